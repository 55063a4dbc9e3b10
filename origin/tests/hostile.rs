//! The origin served on a real socket, against the abuses a hostile network
//! tries: heads that promise a large body and trickle it, with no
//! credential or a valid one; more connections than the cap; heads past
//! their bound; and secrets anyone can read. Each test fails if the limit
//! it checks is taken out. On SQLite and on PostgreSQL, as `ingest.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use flashgate_origin::db::Db;
use flashgate_origin::server::{self, ServeLimits};
use flashgate_origin::state::{self, AppState, DemoSettings, Settings};
use flashgate_origin::{app, limits};
use flashgate_wire::keys::KeySet;
use flashgate_wire::signing::{self, Purpose};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

#[macro_use]
mod support;
use support::{random_secret, TestDb};

static FORWARD_KEYS: LazyLock<String> = LazyLock::new(|| format!("f1:{}", random_secret()));
static READ_TOKEN: LazyLock<String> = LazyLock::new(random_secret);
static SHOP_TOKEN: LazyLock<String> = LazyLock::new(random_secret);
static BUYER_KEYS: LazyLock<String> = LazyLock::new(|| format!("b1:{}", random_secret()));

/// How long a test waits for an answer or a close that needs no (more of
/// the) body: so long that only one that never comes misses it on a loaded
/// machine, yet shorter than `REQUEST_TIMEOUT`, which would end the wait
/// otherwise. Where the body's deadline would end it first, the test sets
/// that deadline to `BODY_NEVER`; a silent connection's head deadline
/// (`HEADER_READ_TIMEOUT`) is told apart by order, not time (see
/// `connections_past_the_cap_are_closed_at_once`). How long each wait took
/// is printed, not asserted.
const AT_ONCE: Duration = Duration::from_secs(20);
const _: () = assert!(AT_ONCE.as_millis() < limits::REQUEST_TIMEOUT.as_millis());

/// A body deadline no test reaches.
const BODY_NEVER: Duration = Duration::from_secs(600);

fn keys(text: &str) -> KeySet {
    state::key_set("a test key set", text).unwrap()
}

fn settings(body_deadline: Duration) -> Settings {
    Settings {
        forward_keys: keys(&FORWARD_KEYS),
        read_tokens: keys(&format!("r1:{}", *READ_TOKEN)),
        shop_tokens: keys(&format!("s1:{}", *SHOP_TOKEN)),
        buyer_keys: keys(&BUYER_KEYS),
        buyer_audience: "flashgate".into(),
        // On, so that its route asks for a buyer token; it never gets as
        // far as calling the gate here.
        demo: Some(DemoSettings {
            payment_keys: keys(&format!("p1:{}", random_secret())),
            gate_url: "http://127.0.0.1:9".into(),
            allow_origin: None,
            client: reqwest::Client::new(),
        }),
        batch_timeout: Duration::from_secs(30),
        body_deadline,
    }
}

/// The origin, served on a port of its own until dropped.
struct Served {
    addr: SocketAddr,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn serve(db: &Db, body_deadline: Duration, limits: ServeLimits) -> Served {
    let state = AppState::new(db.clone(), settings(body_deadline)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let router = app::router(state.clone());
    tokio::spawn(async move {
        let _ = server::serve(listener, router, limits, async {
            let _ = stopped.await;
        })
        .await;
    });
    Served {
        addr,
        state,
        stop: Some(stop),
    }
}

/// Reads until the end of the answer's head, or `within` passes.
async fn read_head(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    // The rest of a short answer (its problem document) comes with it.
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(200), conn.read(&mut buf)).await {
        got.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Whether the server closes the connection within `within`: a read that
/// ends (EOF) or fails (reset), after whatever answer was left to read.
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

on_both!(
    credentials_are_checked_from_the_head_before_any_body,
    |db: Db| async move {
        // The body never comes in time: an answer within `AT_ONCE` was
        // decided from the head alone.
        let served = serve(&db, BODY_NEVER, ServeLimits::default()).await;
        let bearer = |t: &str| format!("authorization: Bearer {t}\r\n");
        // A made-up signature over a made-up digest, with the gate's key
        // id and a fresh time: everything but the key.
        let forged = format!(
            "{}: f1\r\n{}: {}\r\n{}: v2={}\r\n{}: {}\r\n",
            signing::KEY_ID_HEADER,
            signing::TIMESTAMP_HEADER,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
            signing::SIGNATURE_HEADER,
            "ab".repeat(32),
            signing::DIGEST_HEADER,
            "cd".repeat(32),
        );
        let cases: Vec<(&str, &str, String, &str)> = vec![
            ("POST", "/v1/buyer-tokens", String::new(), "unauthorized"),
            ("POST", "/v1/buyer-tokens", bearer("nope"), "unauthorized"),
            (
                "POST",
                "/v1/buyer-tokens",
                bearer(&READ_TOKEN),
                "unauthorized",
            ),
            ("POST", "/v1/demo/payments", String::new(), "unauthorized"),
            (
                "POST",
                "/v1/demo/payments",
                bearer(&SHOP_TOKEN),
                "token_invalid",
            ),
            ("POST", "/v1/batches", String::new(), "bad_signature"),
            ("POST", "/v1/batches", forged, "bad_signature"),
            ("GET", "/v1/orders", bearer(&SHOP_TOKEN), "unauthorized"),
            ("GET", "/metrics", String::new(), "unauthorized"),
        ];
        for (method, path, credential, code) in cases {
            let case = format!("{method} {path} with {credential:?}");
            let mut conn = TcpStream::connect(served.addr).await.unwrap();
            // A head that promises 1 MiB, and one byte of it.
            let head = format!(
                "{method} {path} HTTP/1.1\r\nhost: origin\r\ncontent-type: application/json\r\n\
                 {credential}content-length: {}\r\n\r\n{{",
                limits::BODY_BYTES_MAX
            );
            conn.write_all(head.as_bytes()).await.unwrap();
            let started = Instant::now();
            let answer = read_head(&mut conn, AT_ONCE)
                .await
                .unwrap_or_else(|| panic!("{case}: no answer within {AT_ONCE:?}"));
            assert_eq!(status_of(&answer), 401, "{case}: {answer}");
            assert!(
                answer.contains(&format!("\"code\":\"{code}\"")),
                "{case}: {answer}"
            );
            // The body is never read: the connection is closed, so the
            // caller holds neither a body nor a connection.
            assert!(
                closed_within(&mut conn, AT_ONCE).await,
                "{case}: the connection stayed open after the 401"
            );
            println!("{case}: answered and closed after {:?}", started.elapsed());
        }
        // None of those took a batch slot.
        assert_eq!(
            served.state.batch_slots.available_permits(),
            limits::BATCHES_IN_FLIGHT_MAX
        );
    }
);

/// What `trickle` saw: the answer, when it came, and how many bytes of
/// the body had been sent by then.
struct Trickled {
    answer: Option<String>,
    took: Duration,
    sent: usize,
}

/// Sends `head`, then the body a byte every `gap`, until the answer comes
/// or `give_up` passes.
async fn trickle(
    addr: SocketAddr,
    head: String,
    body: &[u8],
    gap: Duration,
    give_up: Duration,
) -> Trickled {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut rd, mut wr) = conn.into_split();
    let body = body.to_vec();
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let writer = tokio::spawn(async move {
        for b in body {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(gap).await;
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let answer = loop {
        match tokio::time::timeout(give_up.saturating_sub(started.elapsed()), rd.read(&mut buf))
            .await
        {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break None,
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(200), rd.read(&mut buf)).await
                    {
                        got.extend_from_slice(&buf[..n]);
                    }
                    break Some(String::from_utf8_lossy(&got).into_owned());
                }
            }
        }
    };
    let took = started.elapsed();
    writer.abort();
    Trickled {
        answer,
        took,
        sent: sent.load(Ordering::SeqCst),
    }
}

on_both!(
    a_trickled_body_is_cut_at_the_deadline_for_the_whole_body,
    |db: Db| async move {
        // Each byte comes well inside any per-frame timeout; only a
        // deadline for the whole body cuts the body. A body of 200 bytes
        // and more, a byte every 40 ms, takes at least 8 s: ten times the
        // deadline. A cut is told from a body that arrived by what was
        // sent of it when the answer came, not by the clock, and how long
        // it took is printed.
        let deadline = Duration::from_millis(800);
        let gap = Duration::from_millis(40);
        let give_up = AT_ONCE;
        let served = serve(&db, deadline, ServeLimits::default()).await;
        let mint = br#"{"buyer_id":"alice","ttl_s":60}"#;
        let padded = format!("{}{}", " ".repeat(200), std::str::from_utf8(mint).unwrap());
        let mint_head = |len: usize| {
            format!(
                "POST /v1/buyer-tokens HTTP/1.1\r\nhost: origin\r\ncontent-type: application/json\r\n\
                 authorization: Bearer {}\r\ncontent-length: {len}\r\n\r\n",
                *SHOP_TOKEN
            )
        };
        let cut = trickle(
            served.addr,
            mint_head(padded.len()),
            padded.as_bytes(),
            gap,
            give_up,
        )
        .await;
        let (answer, took) = (cut.answer, cut.took);
        let answer = answer.unwrap_or_else(|| panic!("no answer within {give_up:?}"));
        assert_eq!(status_of(&answer), 408, "{answer}");
        assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
        // Not before the deadline, and before the body was all sent.
        assert!(
            took >= deadline,
            "cut after {took:?}, before the deadline of {deadline:?}"
        );
        assert!(
            cut.sent < padded.len(),
            "answered after the whole body ({} bytes) was sent: not cut",
            padded.len()
        );
        println!(
            "a body sent a byte every {gap:?} was cut after {took:?} (deadline {deadline:?}), {} of its {} bytes sent",
            cut.sent,
            padded.len()
        );

        // A signed batch trickled by the gate's key holder: cut the same,
        // its slot given back, nothing stored.
        let body = br#"{"product_id":"slow","events":[{"kind":"stock","seq":1,"stock_total":5,"at_ms":1}]}"#;
        let mut padded = body.to_vec();
        padded.splice(1..1, std::iter::repeat_n(b' ', 200));
        let signed = signing::sign(
            &keys(&FORWARD_KEYS),
            &signing::Request {
                purpose: Purpose::Forward,
                method: "POST",
                path: "/v1/batches",
                body: &padded,
            },
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        );
        let mut head = format!(
            "POST /v1/batches HTTP/1.1\r\nhost: origin\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n",
            padded.len()
        );
        for (k, v) in signed.headers() {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let cut = trickle(served.addr, head.clone(), &padded, gap, give_up).await;
        let answer = cut
            .answer
            .unwrap_or_else(|| panic!("no answer within {give_up:?}"));
        assert_eq!(status_of(&answer), 408, "{answer}");
        assert!(
            cut.sent < padded.len(),
            "the signed batch was answered after its whole body ({} bytes) was sent: not cut",
            padded.len()
        );
        println!(
            "a signed batch sent a byte every {gap:?} was cut after {:?}, {} of its {} bytes sent",
            cut.took,
            cut.sent,
            padded.len()
        );
        assert_eq!(
            served.state.batch_slots.available_permits(),
            limits::BATCHES_IN_FLIGHT_MAX
        );
        assert!(served.state.db.product("slow").await.unwrap().is_none());

        // The same bodies, sent at once, go through.
        let whole = trickle(
            served.addr,
            mint_head(mint.len()),
            mint,
            Duration::ZERO,
            give_up,
        )
        .await;
        assert_eq!(status_of(&whole.answer.unwrap_or_default()), 201);
        let mut conn = TcpStream::connect(served.addr).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(&padded).await.unwrap();
        let answer = read_head(&mut conn, AT_ONCE).await.unwrap_or_default();
        assert_eq!(status_of(&answer), 200, "{answer}");
    }
);

on_both!(
    connections_past_the_cap_are_closed_at_once,
    |db: Db| async move {
        let cap = 4;
        let served = serve(
            &db,
            limits::BODY_READ_TIMEOUT,
            ServeLimits {
                connections_max: cap,
            },
        )
        .await;
        // `cap` anonymous clients that connect and send nothing.
        let mut held = Vec::new();
        for _ in 0..cap {
            held.push(TcpStream::connect(served.addr).await.unwrap());
        }
        // Let the server accept them all before the extra ones come.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Each extra one is closed while those accepted before it, which
        // sent nothing either, are still open (the first of them serves a
        // read below). Without the cap an extra one would be closed only
        // by the head's deadline (HEADER_READ_TIMEOUT), which would have
        // closed those first: the order tells the cap's close from the
        // deadline's, not the clock.
        for n in 0..3 {
            let mut extra = TcpStream::connect(served.addr).await.unwrap();
            let started = Instant::now();
            assert!(
                closed_within(&mut extra, AT_ONCE).await,
                "extra connection {n} was kept past the cap of {cap}"
            );
            println!("extra connection {n} closed after {:?}", started.elapsed());
        }
        // An accepted connection still serves the shop.
        let read = format!(
            "GET /v1/orders HTTP/1.1\r\nhost: origin\r\nauthorization: Bearer {}\r\n\r\n",
            *READ_TOKEN
        );
        held[0].write_all(read.as_bytes()).await.unwrap();
        let answer = read_head(&mut held[0], AT_ONCE).await.unwrap_or_default();
        assert_eq!(status_of(&answer), 200, "{answer}");
        // A closed connection gives its place back, once the server has
        // seen it close: until then a new one is closed at once, as past
        // the cap.
        drop(held.pop());
        let started = Instant::now();
        let answer = loop {
            let mut again = TcpStream::connect(served.addr).await.unwrap();
            // The server may close it before it has read the request.
            let _ = again.write_all(read.as_bytes()).await;
            if let Some(answer) = read_head(&mut again, AT_ONCE).await {
                break answer;
            }
            assert!(
                started.elapsed() < AT_ONCE,
                "the closed connection's place never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(status_of(&answer), 200, "{answer}");
        println!(
            "a place came back {:?} after a connection closed",
            started.elapsed()
        );
    }
);

on_both!(a_head_past_its_bound_is_refused, |db: Db| async move {
    let served = serve(&db, limits::BODY_READ_TIMEOUT, ServeLimits::default()).await;
    let mut conn = TcpStream::connect(served.addr).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: origin\r\nx-pad: {}\r\n\r\n",
        "a".repeat(limits::HEADER_BYTES_MAX + 1)
    );
    // The server may close before it has read all of it.
    let _ = conn.write_all(head.as_bytes()).await;
    let answer = read_head(&mut conn, AT_ONCE).await.unwrap_or_default();
    assert_eq!(status_of(&answer), 431, "{answer}");
    let mut conn = TcpStream::connect(served.addr).await.unwrap();
    let fields: String = (0..=limits::HEADER_FIELDS_MAX)
        .map(|i| format!("x-{i}: 1\r\n"))
        .collect();
    let _ = conn
        .write_all(format!("GET /healthz HTTP/1.1\r\nhost: origin\r\n{fields}\r\n").as_bytes())
        .await;
    let answer = read_head(&mut conn, AT_ONCE).await.unwrap_or_default();
    assert_eq!(status_of(&answer), 431, "{answer}");
});

on_both!(health_says_only_ok, |db: Db| async move {
    let served = serve(&db, limits::BODY_READ_TIMEOUT, ServeLimits::default()).await;
    let mut conn = TcpStream::connect(served.addr).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: origin\r\n\r\n")
        .await
        .unwrap();
    let answer = read_head(&mut conn, AT_ONCE).await.unwrap_or_default();
    assert_eq!(status_of(&answer), 200, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert_eq!(body, r#"{"status":"ok"}"#, "{answer}");
});

/// The binary itself refuses to start with a secret anyone can read or
/// that is plainly not random, and names the variable on stderr; with
/// random secrets it starts.
#[test]
fn the_origin_refuses_to_start_with_a_published_or_weak_secret() {
    let dir = std::env::temp_dir().join(format!("flashgate-secrets-{}", std::process::id()));
    let good = |kid: &str| format!("{kid}:{}", random_secret());
    let vars = [
        ("FORWARD_KEYS", "f1"),
        ("ORIGIN_READ_TOKENS", "r1"),
        ("ORIGIN_SHOP_TOKENS", "s1"),
        ("BUYER_TOKEN_KEYS", "b1"),
        ("PAYMENT_KEYS", "p1"),
    ];
    let run = |bad: Option<(&str, String)>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flashgate-origin"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--demo-payments"])
            .args(["--gate-url", "http://127.0.0.1:9"])
            .env("FLASHGATE_DATA_DIR", &dir)
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (name, kid) in vars {
            cmd.env(name, good(kid));
        }
        if let Some((name, value)) = &bad {
            cmd.env(name, value);
        }
        let mut child = cmd.spawn().unwrap();
        // A refusal comes before the database opens; give a start as long.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let running = child.try_wait().unwrap().is_none();
        if running {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        (running, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let weak = [
        (
            "replace-with-32-or-more-random-bytes-000000".to_string(),
            "published",
        ),
        ("a".repeat(64), "not random"),
        ("0123456789".repeat(5), "not random"),
        (
            "please-replace-this-with-a-real-random-token".to_string(),
            "not random",
        ),
    ];
    for (name, kid) in vars {
        for (secret, why) in &weak {
            let (running, stderr) = run(Some((name, format!("{kid}:{secret}"))));
            assert!(!running, "started with {name}={kid}:{secret}");
            assert!(
                stderr.contains(name) && stderr.contains(why),
                "{name}={kid}:{secret}: {stderr}"
            );
            assert!(!stderr.contains(secret.as_str()), "the secret was printed");
        }
    }
    let (running, stderr) = run(None);
    assert!(running, "random secrets were refused: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
