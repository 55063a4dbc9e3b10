//! Integration tests of the origin against real databases: an SQLite file in
//! a temporary directory, and the PostgreSQL server on this machine
//! (`FLASHGATE_TEST_PG`, default postgres://root@127.0.0.1:5432/test). Each
//! Postgres test runs in a database of its own, created and dropped here.
//! These tests are not optional: an unreachable Postgres fails them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flashgate_origin::app::{self, AppState, Settings};
use flashgate_origin::db::Db;
use flashgate_wire::signing as wire;
use flashgate_wire::{Batch, Order};
use http_body_util::BodyExt;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};
use tower::ServiceExt;

const SECRET: &[u8] = b"test-origin-secret";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn pg_admin_url() -> String {
    std::env::var("FLASHGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into())
}

/// A database of one backend, dropped (for Postgres) when the test ends.
struct TestDb {
    db: Db,
    pg_name: Option<String>,
    _dir: Option<TempDir>,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A signature test case: name, timestamp header, signature header, body.
type SigCase = (&'static str, Option<String>, Option<String>, Vec<u8>);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Server errors are logged, not returned; show them in test output.
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("warn")
        .try_init();
}

impl TestDb {
    async fn sqlite() -> TestDb {
        init_logs();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("flashgate-origin-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = Db::connect(None, &dir).await.expect("sqlite connects");
        TestDb {
            db,
            pg_name: None,
            _dir: Some(TempDir(dir)),
        }
    }

    async fn postgres() -> TestDb {
        init_logs();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("flashgate_test_{}_{n}", std::process::id());
        let admin = pg_admin_url();
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is required for these tests: {e}"));
        conn.execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
            .await
            .unwrap();
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        let url = match admin.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("bad FLASHGATE_TEST_PG {admin}"),
        };
        let db = Db::connect(Some(&url), std::path::Path::new("unused"))
            .await
            .expect("postgres connects");
        TestDb {
            db,
            pg_name: Some(name),
            _dir: None,
        }
    }

    async fn drop_db(self) {
        self.db.close().await;
        if let Some(name) = self.pg_name {
            let mut conn = PgConnection::connect(&pg_admin_url()).await.unwrap();
            conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await
                .unwrap();
        }
    }
}

fn state(db: &Db) -> Arc<AppState> {
    AppState::new(
        db.clone(),
        Settings {
            hmac_secret: SECRET.to_vec(),
            batch_timeout: Duration::from_secs(30),
        },
    )
}

fn order(product: &str, n: u32, quantity: u32) -> Order {
    Order {
        // Reservation ids start at 1, as the gate issues them.
        reservation_id: format!("{product}:{}", n + 1),
        product_id: product.into(),
        buyer_id: format!("buyer-{n}"),
        quantity,
        payment_ref: format!("pay-{n}"),
        confirmed_at_ms: 1_700_000_000_000 + u64::from(n),
        stock_total: 1_000,
    }
}

fn signed(method: &str, uri: &str, body: Vec<u8>) -> Request<Body> {
    let ts = now_ms();
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .header(wire::TIMESTAMP_HEADER, ts.to_string())
        .header(wire::SIGNATURE_HEADER, wire::sign(SECRET, ts, &body))
        .body(Body::from(body))
        .unwrap()
}

fn batch(orders: Vec<Order>) -> Vec<u8> {
    serde_json::to_vec(&Batch { orders }).unwrap()
}

async fn send(state: &Arc<AppState>, req: Request<Body>) -> (StatusCode, Value, String) {
    let resp = app::router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, body, ct)
}

async fn get(state: &Arc<AppState>, uri: &str) -> (StatusCode, Value) {
    let (s, b, _) = send(state, Request::get(uri).body(Body::empty()).unwrap()).await;
    (s, b)
}

fn statuses(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

/// Runs one test body on SQLite, then on PostgreSQL.
macro_rules! on_both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let t = TestDb::sqlite().await;
                ($body)(t.db.clone()).await;
                t.drop_db().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let t = TestDb::postgres().await;
                ($body)(t.db.clone()).await;
                t.drop_db().await;
            }
        }
    };
}

on_both!(idempotent_reingest, |db: Db| async move {
    let st = state(&db);
    let orders = vec![order("p1", 1, 2), order("p1", 2, 1), order("p2", 3, 1)];
    let (s, body, _) = send(
        &st,
        signed("POST", "/v1/reservations/batch", batch(orders.clone())),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(statuses(&body), ["inserted", "inserted", "inserted"]);
    // The same batch again, and a batch mixing old and new: nothing doubles.
    let (_, body, _) = send(
        &st,
        signed("POST", "/v1/reservations/batch", batch(orders.clone())),
    )
    .await;
    assert_eq!(statuses(&body), ["exists", "exists", "exists"]);
    let mixed = vec![order("p1", 2, 1), order("p1", 4, 3)];
    let (_, body, _) = send(&st, signed("POST", "/v1/reservations/batch", batch(mixed))).await;
    assert_eq!(statuses(&body), ["exists", "inserted"]);
    let (_, p1) = get(&st, "/v1/products/p1").await;
    assert_eq!(
        (p1["sold"].as_i64(), p1["orders_accepted"].as_i64()),
        (Some(6), Some(3))
    );
    let (_, all) = get(&st, "/v1/orders?limit=1000").await;
    assert_eq!(all["orders"].as_array().unwrap().len(), 4);
    let metrics = get_text(&st, "/metrics").await;
    assert!(
        metrics.contains("flashgate_origin_orders_ingested_total 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("flashgate_origin_orders_duplicate_total 4"),
        "{metrics}"
    );
});

async fn get_text(state: &Arc<AppState>, uri: &str) -> String {
    let resp = app::router(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap()
}

on_both!(
    concurrent_batches_never_oversell_or_duplicate,
    |db: Db| async move {
        let st = state(&db);
        let (s, body, _) = send(
            &st,
            signed(
                "PUT",
                "/v1/products/hot",
                br#"{"stock_total":100}"#.to_vec(),
            ),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        // 120 distinct orders of one unit, each sent by two of the 8 tasks, in
        // batches of 10, all at once: 100 fit, 20 must be refused, none twice.
        let mut tasks = Vec::new();
        for t in 0..8u32 {
            let st = st.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine: Vec<u32> = (0..120).filter(|n| n % 4 == t % 4).collect();
                if t >= 4 {
                    mine.reverse();
                }
                for chunk in mine.chunks(10) {
                    let orders = chunk.iter().map(|&n| order("hot", n, 1)).collect();
                    let (s, body, _) =
                        send(&st, signed("POST", "/v1/reservations/batch", batch(orders))).await;
                    assert_eq!(s, StatusCode::OK, "{body}");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let (_, p) = get(&st, "/v1/products/hot").await;
        assert_eq!(p["sold"].as_i64(), Some(100), "{p}");
        assert_eq!(p["units_accepted"].as_i64(), Some(100), "{p}");
        assert_eq!(p["orders_rejected"].as_i64(), Some(20), "{p}");
        let (_, all) = get(&st, "/v1/orders?product_id=hot&limit=1000").await;
        let ids: std::collections::BTreeSet<&str> = all["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["reservation_id"].as_str().unwrap())
            .collect();
        assert_eq!(all["orders"].as_array().unwrap().len(), 120);
        assert_eq!(ids.len(), 120, "no reservation is stored twice");
    }
);

on_both!(
    every_signature_failure_is_refused_and_stores_nothing,
    |db: Db| async move {
        let st = state(&db);
        let body = batch(vec![order("p1", 1, 1)]);
        let now = now_ms();
        let good_sig = wire::sign(SECRET, now, &body);
        let stale = now - wire::SIGNATURE_SKEW_MS_MAX - 1_000;
        let future = now + wire::SIGNATURE_SKEW_MS_MAX + 60_000;
        let cases: Vec<SigCase> = vec![
            ("no headers", None, None, body.clone()),
            ("no signature", Some(now.to_string()), None, body.clone()),
            ("no timestamp", None, Some(good_sig.clone()), body.clone()),
            (
                "timestamp not a number",
                Some("yesterday".into()),
                Some(good_sig.clone()),
                body.clone(),
            ),
            (
                "stale",
                Some(stale.to_string()),
                Some(wire::sign(SECRET, stale, &body)),
                body.clone(),
            ),
            (
                "from the future",
                Some(future.to_string()),
                Some(wire::sign(SECRET, future, &body)),
                body.clone(),
            ),
            (
                "malformed signature",
                Some(now.to_string()),
                Some("v1=nothex".into()),
                body.clone(),
            ),
            (
                "unknown scheme",
                Some(now.to_string()),
                Some(good_sig.replace("v1=", "v0=")),
                body.clone(),
            ),
            (
                "wrong secret",
                Some(now.to_string()),
                Some(wire::sign(b"not-the-secret", now, &body)),
                body.clone(),
            ),
            (
                "tampered body",
                Some(now.to_string()),
                Some(good_sig.clone()),
                batch(vec![order("p1", 1, 9)]),
            ),
            (
                "signature of another timestamp",
                Some((now + 1).to_string()),
                Some(good_sig.clone()),
                body.clone(),
            ),
        ];
        for (name, ts, sig, b) in cases {
            let mut req =
                Request::post("/v1/reservations/batch").header("content-type", "application/json");
            if let Some(ts) = ts {
                req = req.header(wire::TIMESTAMP_HEADER, ts);
            }
            if let Some(sig) = sig {
                req = req.header(wire::SIGNATURE_HEADER, sig);
            }
            let (s, body, ct) = send(&st, req.body(Body::from(b)).unwrap()).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{name}: {body}");
            assert_eq!(ct, "application/problem+json", "{name}");
            assert_eq!(body["code"], "bad_signature", "{name}");
        }
        // PUT /v1/products is authenticated the same way.
        let (s, _, _) = send(
            &st,
            Request::put("/v1/products/p1")
                .body(Body::from(r#"{"stock_total":5}"#))
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        let (_, all) = get(&st, "/v1/orders").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 0, "nothing stored");
        assert_eq!(get(&st, "/v1/products/p1").await.0, StatusCode::NOT_FOUND);
        assert!(get_text(&st, "/metrics")
            .await
            .contains("flashgate_origin_unauthorized_total 12"));
    }
);

on_both!(orders_paginate_by_cursor, |db: Db| async move {
    let st = state(&db);
    for start in [0u32, 100, 200] {
        let orders = (start..start + 100)
            .filter(|n| *n < 250)
            .map(|n| order(if n % 2 == 0 { "even" } else { "odd" }, n, 1))
            .collect();
        let (s, body, _) = send(&st, signed("POST", "/v1/reservations/batch", batch(orders))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
    }
    let mut seen = Vec::new();
    let mut after: Option<i64> = None;
    let mut pages = 0;
    loop {
        let uri = match after {
            Some(a) => format!("/v1/orders?limit=100&after={a}"),
            None => "/v1/orders?limit=100".to_string(),
        };
        let (s, page) = get(&st, &uri).await;
        assert_eq!(s, StatusCode::OK);
        pages += 1;
        seen.extend(
            page["orders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["reservation_id"].as_str().unwrap().to_string()),
        );
        match page["next_after"].as_i64() {
            Some(a) => after = Some(a),
            None => break,
        }
    }
    assert_eq!(seen.len(), 250);
    assert_eq!(
        seen.iter().collect::<std::collections::BTreeSet<_>>().len(),
        250,
        "no order twice"
    );
    assert!(pages >= 3);
    let (_, even) = get(&st, "/v1/orders?product_id=even&limit=1000").await;
    assert_eq!(even["orders"].as_array().unwrap().len(), 125);
    assert!(even["orders"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["product_id"] == "even"));
    for bad in [
        "/v1/orders?limit=0",
        "/v1/orders?limit=1001",
        "/v1/orders?after=abc",
        "/v1/orders?bogus=1",
    ] {
        assert_eq!(get(&st, bad).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
});

on_both!(
    oversized_and_malformed_batches_are_refused,
    |db: Db| async move {
        let st = state(&db);
        let too_many = batch((0..501).map(|n| order("p1", n, 1)).collect());
        let (s, body, _) = send(&st, signed("POST", "/v1/reservations/batch", too_many)).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("batch_too_large"))
        );
        let huge = format!(
            r#"{{"orders":[],"pad":"{}"}}"#,
            "x".repeat(app::BODY_BYTES_MAX)
        );
        let (s, body, _) = send(
            &st,
            signed("POST", "/v1/reservations/batch", huge.into_bytes()),
        )
        .await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"))
        );
        let (s, body, _) = send(
            &st,
            signed(
                "POST",
                "/v1/reservations/batch",
                br#"{"orders":[]}"#.to_vec(),
            ),
        )
        .await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"))
        );
        let (s, body, _) = send(&st, signed("POST", "/v1/reservations/batch", b"{".to_vec())).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("malformed_json"))
        );
        let zero = batch(vec![order("p1", 1, 0)]);
        let (s, _, _) = send(&st, signed("POST", "/v1/reservations/batch", zero)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        let bad_product = batch(vec![order("no spaces", 1, 1)]);
        let (s, _, _) = send(&st, signed("POST", "/v1/reservations/batch", bad_product)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        let (_, all) = get(&st, "/v1/orders").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 0, "nothing stored");
        // The largest allowed batch goes through.
        let full = batch((0..500).map(|n| order("p1", n, 1)).collect());
        let (s, _, _) = send(&st, signed("POST", "/v1/reservations/batch", full)).await;
        assert_eq!(s, StatusCode::OK);
        // A total below what is sold is refused.
        let (s, body, _) = send(
            &st,
            signed("PUT", "/v1/products/p1", br#"{"stock_total":10}"#.to_vec()),
        )
        .await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("below_sold"))
        );
        assert_eq!(get(&st, "/healthz").await.0, StatusCode::OK);
    }
);

/// Loses the answer of the first `n` requests after the router handled
/// them, as a dropped connection would: a layer only this test adds.
fn losing_answers(router: axum::Router, n: u32) -> axum::Router {
    let left = Arc::new(AtomicU32::new(n));
    router.layer(axum::middleware::from_fn(
        move |req: Request<Body>, next: axum::middleware::Next| {
            let left = left.clone();
            async move {
                let resp = next.run(req).await;
                let lose = left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if lose {
                    return axum::response::IntoResponse::into_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                    );
                }
                resp
            }
        },
    ))
}

on_both!(
    a_lost_answer_after_commit_is_retried_without_duplicates,
    |db: Db| async move {
        let st = state(&db);
        let app = losing_answers(app::router(st.clone()), 1);
        let orders = vec![order("p1", 1, 1), order("p1", 2, 1)];
        let first = app
            .clone()
            .oneshot(signed(
                "POST",
                "/v1/reservations/batch",
                batch(orders.clone()),
            ))
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let (s, body, _) = send(&st, signed("POST", "/v1/reservations/batch", batch(orders))).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(statuses(&body), ["exists", "exists"]);
        let (_, p) = get(&st, "/v1/products/p1").await;
        assert_eq!(p["sold"].as_i64(), Some(2));
    }
);
