//! The object's SQL (`flashgate::object::sql`) run against real SQLite: the same
//! schema, statements and row mapping the Durable Object executes, here
//! through rusqlite. A seeded run of gate operations writes every change
//! through its `Storage` and checks, after every step, that loading the
//! database back restores a gate identical to the one in memory.
//!
//! 20 seeds of 600 steps; `SQL_SEED=n` replays one seed, `SQL_SEEDS=n` runs
//! n seeds and `SQL_STEPS=n` sets the steps (`flashgate_testkit::Plan`). A
//! failure prints its seed, its step and the line that reruns it.

use flashgate::http::reply::Reply;
use flashgate::object::product::{ProductObject, Reader, Storage, StorageError};
use flashgate::object::sql::{SqlDb, SqlValue};
use flashgate::protocol::Command;
use flashgate_core::{Config, ConfigPatch, Gate, Mode};
use flashgate_testkit::{run_plan, Plan, Rng, Simulation};
use rusqlite::types::ValueRef;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// `SqlDb` over an in-memory SQLite database. It can be told to fail the
/// `n`th statement from now, or its next commit.
struct Lite {
    conn: rusqlite::Connection,
    fail_exec_in: Option<u32>,
    fail_commit: bool,
}

impl Lite {
    fn new() -> Lite {
        Lite {
            conn: rusqlite::Connection::open_in_memory().expect("sqlite opens"),
            fail_exec_in: None,
            fail_commit: false,
        }
    }
}

/// One command alone: a group commit of one, as the object runs a lone
/// request.
trait OneCommand {
    fn command(
        &mut self,
        store: &mut impl Storage,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Reply, StorageError>;
}

impl OneCommand for ProductObject {
    fn command(
        &mut self,
        store: &mut impl Storage,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let mut replies = self.commands(store, std::slice::from_ref(cmd), now_ms)?;
        assert_eq!(replies.len(), 1, "one reply per command: {cmd:?}");
        Ok(replies.pop().unwrap())
    }
}

fn failed(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

fn lite_value(p: &SqlValue) -> rusqlite::types::Value {
    match p {
        SqlValue::Int(n) => rusqlite::types::Value::Integer(*n),
        SqlValue::Text(s) => rusqlite::types::Value::Text(s.clone()),
        SqlValue::Null => rusqlite::types::Value::Null,
    }
}

impl SqlDb for Lite {
    fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), StorageError> {
        if let Some(n) = self.fail_exec_in.as_mut() {
            if *n == 0 {
                self.fail_exec_in = None;
                return Err(StorageError("injected statement failure".into()));
            }
            *n -= 1;
        }
        let values: Vec<rusqlite::types::Value> = params.iter().map(lite_value).collect();
        self.conn
            .execute(sql, rusqlite::params_from_iter(values))
            .map(drop)
            .map_err(failed)
    }

    fn query_each<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        each: &mut dyn FnMut(T) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.query(sql)?.into_iter().try_for_each(each)
    }

    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        self.conn.execute_batch("BEGIN").map_err(failed)?;
        let r = body(self).and_then(|t| {
            if self.fail_commit {
                self.fail_commit = false;
                return Err(StorageError("injected commit failure".into()));
            }
            self.conn
                .execute_batch("COMMIT")
                .map_err(failed)
                .map(|()| t)
        });
        if r.is_err() {
            self.conn.execute_batch("ROLLBACK").map_err(failed)?;
        }
        r
    }

    fn query<T: DeserializeOwned>(&mut self, sql: &str) -> Result<Vec<T>, StorageError> {
        self.query_with(sql, &[])
    }

    fn query_with<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<T>, StorageError> {
        // Rows become JSON objects keyed by column name, as the Workers
        // runtime hands them to `SqlCursor::to_array`.
        let mut stmt = self.conn.prepare(sql).map_err(failed)?;
        let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
        let params: Vec<rusqlite::types::Value> = params.iter().map(lite_value).collect();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params))
            .map_err(failed)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(failed)? {
            let mut obj = Map::new();
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i).map_err(failed)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(f) => Value::from(f),
                    ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => return Err(StorageError("unexpected blob".into())),
                };
                obj.insert(name.clone(), v);
            }
            out.push(serde_json::from_value(Value::Object(obj)).map_err(failed)?);
        }
        Ok(out)
    }
}

const SECRET: &[u8] = b"id-secret-0123456789abcdef0123456789";

/// A gate whose every change goes through SQLite, and is read back.
struct SqlSim {
    rng: Rng,
    store: Lite,
    gate: Gate,
    /// Odd seeds leave paid records in SQLite and read them back from it,
    /// as the object does.
    archived: bool,
    now: u64,
    steps: u64,
    /// The reservations made so far, with their buyers: most confirms and
    /// cancels name one of them, so that records change state in SQLite.
    made: Vec<(u64, String)>,
    /// What the steps decided, by kind, for the run's own check that it
    /// reached the paths it is meant to write.
    outcomes: std::collections::BTreeMap<String, u64>,
}

impl SqlSim {
    fn new(seed: u64) -> SqlSim {
        let mut store = Lite::new();
        assert_eq!(
            store.load_all().unwrap(),
            None,
            "a new database holds no product"
        );
        let config = Config {
            hold_ttl_ms: 1_000,
            idem_window_ms: 500,
            per_buyer_max: 4,
            quantity_max: 2,
            opens_at_ms: seed.is_multiple_of(2).then_some(5),
            // A waiting room on every fourth seed, so that its row (counts
            // per second as JSON, and the floor) goes through SQLite too.
            // Its buyers need tickets, so those seeds make no reservation.
            admit_per_s: if seed.is_multiple_of(4) { 3 } else { 0 },
            ..Config::default()
        };
        let mut gate = Gate::new(10, config, 30).unwrap();
        let archived = seed % 2 == 1;
        if archived {
            gate.set_archived();
        }
        store
            .write(Some("p-sql"), &gate.poll_changes())
            .expect("create");
        SqlSim {
            rng: Rng::new(seed),
            store,
            gate,
            archived,
            now: 10,
            steps: 0,
            made: Vec::new(),
            outcomes: Default::default(),
        }
    }
}

impl Simulation for SqlSim {
    type Summary = std::collections::BTreeMap<String, u64>;

    /// One gate operation, its changes written through SQLite.
    fn step(&mut self) -> String {
        let (rng, gate, now, step) = (&mut self.rng, &mut self.gate, &mut self.now, self.steps);
        self.steps += 1;
        let buyer = format!("b{}", rng.below(8));
        // A reservation this run made, with its buyer, three times in
        // four; else any id and buyer.
        let (id, owner) = match self.made.len() as u64 {
            n if n > 0 && rng.below(4) > 0 => self.made[rng.below(n) as usize].clone(),
            _ => (1 + rng.below(step + 1), buyer.clone()),
        };
        let kind = |outcome: &dyn std::fmt::Debug| {
            let text = format!("{outcome:?}");
            text.split(['(', ' ', '{']).next().unwrap_or("").to_string()
        };
        let mut decided = None;
        let reader = Reader::new(&mut self.store);
        let a = &reader;
        let desc = match rng.below(10) {
            0..=3 => {
                let key = format!("k{}", rng.below(200));
                let r = gate.handle_reserve(a, *now, &buyer, &key, 1 + rng.below(2) as u32, None);
                if let flashgate_core::ReserveOutcome::Reserved { reservation_id, .. } = r {
                    self.made.push((reservation_id, buyer.clone()));
                }
                decided = Some(format!("reserve {}", kind(&r)));
                "reserve"
            }
            4 => {
                let r = gate.handle_confirm(a, *now, id, &owner, "pay-ü");
                decided = Some(format!("confirm {}", kind(&r)));
                "confirm"
            }
            5 => {
                let r = gate.handle_cancel(a, *now, id, &owner);
                decided = Some(format!("cancel {}", kind(&r)));
                "cancel"
            }
            6 => {
                *now += rng.below(700);
                gate.handle_timeout(*now);
                "time passes"
            }
            8 => {
                let r = gate.void(a, *now, id);
                decided = Some(format!("void {}", kind(&r)));
                "void"
            }
            7 => {
                let mut arrivals = flashgate_core::Arrivals::default();
                for i in 0..rng.below(4) {
                    let t = flashgate_core::Ticket {
                        arrived_ms: now.saturating_sub(rng.below(2_000)),
                        tiebreak: (i * 7919) as u32,
                        infinite_queue: false,
                    };
                    arrivals.add(&t, gate.config().opens_at_ms);
                }
                gate.handle_arrivals(*now, &arrivals);
                let batch = gate.poll_outbox(*now, 3);
                if let Some(last) = batch.last() {
                    if rng.below(2) == 0 {
                        gate.handle_ack(last.seq);
                    } else {
                        gate.handle_nack(*now, step);
                    }
                }
                "arrivals and the outbox"
            }
            _ => {
                // Now and then a new face, Chinese and hostile text
                // included, so that it goes through SQLite too.
                let faces = [
                    r#"{}"#,
                    r#"{"name": {"zh": "龙井茶", "en": "Tea </script><b>"}, "price": {"amount": "19.90", "currency": "CNY"}}"#,
                    r#"{"image_url": "https://cdn.example/a.png?x='1'", "description": {"en": "two\nlines"}}"#,
                ];
                let face = (rng.below(3) == 0)
                    .then(|| serde_json::from_str(faces[rng.below(3) as usize]).unwrap());
                let patch = ConfigPatch {
                    face,
                    closes_at_ms: Some((rng.below(2) == 0).then_some(*now + 100_000)),
                    mode: Some(if rng.below(3) == 0 {
                        Mode::Paused
                    } else {
                        Mode::Active
                    }),
                    ..ConfigPatch::default()
                };
                let _ = gate.configure(a, *now, &patch);
                let _ = gate.restock(a, *now, rng.below(3));
                "config and restock"
            }
        };
        let store = reader.finish().unwrap_or_else(|e| panic!("{desc}: {e}"));
        store
            .write(None, &gate.poll_changes())
            .unwrap_or_else(|e| panic!("{desc}: write: {e}"));
        if let Some(d) = decided {
            *self.outcomes.entry(d).or_default() += 1;
        }
        let who = if matches!(desc, "confirm" | "cancel") {
            &owner
        } else {
            &buyer
        };
        format!("{desc} by {who}")
    }

    /// Loading the database back restores a gate identical to the one in
    /// memory.
    fn check(&mut self, step: &str) {
        self.gate
            .audit(&Reader::new(&mut self.store))
            .unwrap_or_else(|e| panic!("{step}: audit: {e}"));
        let loaded = self
            .store
            .load_all()
            .unwrap()
            .expect("the product is stored");
        assert_eq!(loaded.product_id, "p-sql");
        let restored = if self.archived {
            Gate::restore_archived(loaded.rows)
        } else {
            Gate::restore(loaded.rows)
        }
        .unwrap_or_else(|e| panic!("{step}: {e:?}"));
        assert!(
            restored.rows() == self.gate.rows(),
            "{step}: SQLite did not give back the gate's rows"
        );
    }

    fn finish(self) -> Self::Summary {
        self.outcomes
    }
}

/// Every kind of row and change goes through SQLite and comes back equal.
#[test]
fn sqlite_restores_exactly_what_the_gate_wrote() {
    let plan = Plan::from_env("SQL", 20, 600);
    let mut all = std::collections::BTreeMap::new();
    for outcomes in run_plan(&plan, SqlSim::new) {
        for (kind, n) in outcomes {
            *all.entry(kind).or_insert(0u64) += n;
        }
    }
    // The run must have written every change of a record's life through
    // SQLite, not only refusals: a check that restores nothing but
    // refusals cannot fail for a record's row. (A replay of one seed may
    // reach fewer.)
    if plan.seeds.len() >= 10 {
        for kind in [
            "reserve Reserved",
            "confirm Confirmed",
            "cancel Cancelled",
            "void Ok",
        ] {
            assert!(
                all.get(kind).is_some_and(|&n| n >= 5),
                "{kind} too rarely: {all:?}"
            );
        }
    }
}

/// The object over real SQLite: create, reserve, and a fresh object (as
/// after an eviction) reads the same answers back.
#[test]
fn an_object_over_sqlite_survives_a_reload() {
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    let create = Command::Configure {
        product_id: "p1".into(),
        patch: serde_json::from_str(r#"{"stock_total": 3, "opens_at_ms": null}"#).unwrap(),
    };
    assert_eq!(obj.command(&mut store, &create, 1).unwrap().status, 201);
    let reserve = Command::Reserve {
        product_id: "p1".into(),
        buyer: "alice".into(),
        idem_key: "k".into(),
        quantity: 2,
        ticket: None,
    };
    let first = obj.command(&mut store, &reserve, 2).unwrap();
    assert_eq!(first.status, 201);
    let mut fresh = ProductObject::new(SECRET, [7; 32]);
    let again = fresh.command(&mut store, &reserve, 3).unwrap();
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    let read = Command::GetProduct {
        product_id: "p1".into(),
    };
    let p = fresh.command(&mut store, &read, 3).unwrap();
    assert_eq!(
        (p.body["available"].as_u64(), p.body["held"].as_u64()),
        (Some(1), Some(2))
    );
}

/// A product's face is stored with it: an object that starts afresh (as
/// after an eviction) shows the same face, and a refused face (an http
/// image, a name with a direction override) is a 422 that changes nothing,
/// neither in memory nor in storage. A store from before faces gains the
/// face table at load, with an empty face.
#[test]
fn a_face_survives_a_reload_and_a_refused_face_changes_nothing() {
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    let configure = |patch: &str| Command::Configure {
        product_id: "p1".into(),
        patch: serde_json::from_str(patch).unwrap_or_else(|e| panic!("{patch}: {e}")),
    };
    let face = serde_json::json!({
        "name": {"zh": "龙井茶", "en": "<img src=x onerror=alert(1)>"},
        "price": {"amount": "19.90", "currency": "CNY"},
        "image_url": "https://cdn.example.com/tea.jpg",
        "description": {"zh": "明前\n手工"},
    });
    let created = obj
        .command(
            &mut store,
            &configure(&format!(r#"{{"stock_total": 3, "face": {face}}}"#)),
            1,
        )
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["face"], face);
    let read = Command::GetProduct {
        product_id: "p1".into(),
    };
    let stored = store.load_all().unwrap();
    for bad in [
        r#"{"face": {"image_url": "http://cdn.example.com/tea.jpg"}}"#,
        r#"{"face": {"name": {"en": "gpj.\u202eexe"}}}"#,
        r#"{"face": {"price": {"amount": "1e3", "currency": "CNY"}}}"#,
        r#"{"stock_total": 5, "face": {"description": {"en": "bell\u0007"}}}"#,
    ] {
        let refused = obj.command(&mut store, &configure(bad), 2).unwrap();
        assert_eq!(
            (refused.status, &refused.body["code"]),
            (422, &serde_json::json!("invalid_body")),
            "{bad}: {}",
            refused.body
        );
        assert!(
            refused.body["detail"].as_str().unwrap().contains("face."),
            "{bad}: the detail names the member: {}",
            refused.body
        );
        assert_eq!(store.load_all().unwrap(), stored, "{bad} changed storage");
        let p = obj.command(&mut store, &read, 2).unwrap();
        assert_eq!(
            (&p.body["face"], p.body["stock_total"].as_u64()),
            (&face, Some(3)),
            "{bad}"
        );
    }
    let mut fresh = ProductObject::new(SECRET, [7; 32]);
    let p = fresh.command(&mut store, &read, 3).unwrap();
    assert_eq!(p.body["face"], face, "the face survives a reload");
    // `{}` clears it.
    let cleared = fresh
        .command(&mut store, &configure(r#"{"face": {}}"#), 4)
        .unwrap();
    assert_eq!(
        (cleared.status, &cleared.body["face"]),
        (200, &serde_json::json!({}))
    );
    // A store from before faces: no face table. The load makes it.
    store.exec("DROP TABLE face", &[]).unwrap();
    let mut old = ProductObject::new(SECRET, [7; 32]);
    let p = old.command(&mut store, &read, 5).unwrap();
    assert_eq!((p.status, &p.body["face"]), (200, &serde_json::json!({})));
}

/// A product's proof-of-work setting is stored with it and survives a
/// reload; a refused one (a level out of range, a proof of work with no
/// waiting room, an unknown member) is a 422 that changes nothing in memory
/// or in storage; a store from before it gains the table at load, off.
#[test]
fn a_pow_setting_survives_a_reload_and_a_refused_one_changes_nothing() {
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    let configure = |patch: &str| Command::Configure {
        product_id: "p1".into(),
        patch: serde_json::from_str(patch).unwrap_or_else(|e| panic!("{patch}: {e}")),
    };
    let pow = serde_json::json!({"mode": "adaptive", "level": 2, "infinite_queue": true});
    let created = obj
        .command(
            &mut store,
            &configure(&format!(
                r#"{{"stock_total": 3, "admit_per_s": 10, "pow": {pow}}}"#
            )),
            1,
        )
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);
    // The public view says the mode and the level asked now, not whether
    // a failed join goes to the infinite queue.
    assert_eq!(
        created.body["pow"],
        serde_json::json!({"mode": "adaptive", "level": 2, "asking": 2})
    );
    let stats = Command::Stats {
        product_id: "p1".into(),
    };
    let read_pow = |obj: &mut ProductObject, store: &mut Lite| {
        let s = obj.command(store, &stats, 2).unwrap().body;
        (
            s["room"]["pow_mode"].clone(),
            s["room"]["pow_level"].clone(),
            s["room"]["pow_infinite_queue"].clone(),
        )
    };
    let expected = (
        serde_json::json!("adaptive"),
        serde_json::json!(2),
        serde_json::json!(true),
    );
    assert_eq!(read_pow(&mut obj, &mut store), expected);
    let stored = store.load_all().unwrap();
    for bad in [
        r#"{"pow": {"mode": "fixed", "level": 0}}"#,
        r#"{"pow": {"mode": "fixed", "level": 5}}"#,
        r#"{"admit_per_s": 0}"#,
        r#"{"stock_total": 9, "pow": {"mode": "fixed", "level": 9}}"#,
    ] {
        let refused = obj.command(&mut store, &configure(bad), 2).unwrap();
        assert_eq!(
            (refused.status, &refused.body["code"]),
            (422, &serde_json::json!("invalid_body")),
            "{bad}: {}",
            refused.body
        );
        assert!(
            refused.body["detail"].as_str().unwrap().contains("pow"),
            "{bad}: the detail names the member: {}",
            refused.body
        );
        assert_eq!(store.load_all().unwrap(), stored, "{bad} changed storage");
        assert_eq!(read_pow(&mut obj, &mut store), expected, "{bad}");
    }
    assert!(
        serde_json::from_str::<flashgate_core::ConfigPatch>(
            r#"{"pow": {"mode": "fixed", "cost": 1}}"#
        )
        .is_err(),
        "an unknown member is refused before the object"
    );
    let mut fresh = ProductObject::new(SECRET, [7; 32]);
    assert_eq!(
        read_pow(&mut fresh, &mut store),
        expected,
        "it survives a reload"
    );
    // A store from before it: no pow table. The load makes it, off.
    store.exec("DROP TABLE pow", &[]).unwrap();
    let mut old = ProductObject::new(SECRET, [7; 32]);
    let (mode, level, _) = read_pow(&mut old, &mut store);
    assert_eq!(
        (mode, level),
        (serde_json::json!("off"), serde_json::Value::Null)
    );
}

/// A batch that creates a product and then, in a later command, reads
/// storage for the product's paid records (a restock large enough to regrow
/// the paying buyers' filter, a lower `per_buyer_max`) succeeds whole, as
/// the same commands in separate batches do: each command's rows, the
/// product's tables included, are written before the next is decided. A
/// change that wrote a batch's rows only after its last decision failed this
/// batch, reading tables that did not exist yet.
#[test]
fn a_batch_that_creates_a_product_can_read_its_storage_in_a_later_command() {
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    let batch = vec![
        Command::Configure {
            product_id: "p1".into(),
            patch: serde_json::from_str(
                r#"{"stock_total": 100, "per_buyer_max": 4, "opens_at_ms": null}"#,
            )
            .unwrap(),
        },
        Command::Restock {
            product_id: "p1".into(),
            units: 5_000,
        },
        Command::Configure {
            product_id: "p1".into(),
            patch: serde_json::from_str(r#"{"per_buyer_max": 2}"#).unwrap(),
        },
    ];
    let replies = obj.commands(&mut store, &batch, 1).unwrap();
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().all(|s| (200..300).contains(s)),
        "{statuses:?} {replies:?}"
    );
    let p = obj
        .command(
            &mut store,
            &Command::GetProduct {
                product_id: "p1".into(),
            },
            2,
        )
        .unwrap();
    assert_eq!(p.body["stock_total"].as_u64(), Some(5_100), "{:?}", p.body);
}

/// A product stored by a release with an older schema is refused at load,
/// with a message that names the versions, instead of being misread.
#[test]
fn an_older_schema_is_refused_with_a_clear_error() {
    let mut db = Lite::new();
    for stmt in [
        "CREATE TABLE product (id INTEGER PRIMARY KEY, product_id TEXT NOT NULL)",
        "INSERT INTO product (id, product_id) VALUES (1, 'old')",
    ] {
        db.exec(stmt, &[]).unwrap();
    }
    let err = db.load_all().unwrap_err();
    assert!(err.0.contains("schema version 1"), "{err}");
}

fn reserve(buyer: &str, key: &str) -> Command {
    Command::Reserve {
        product_id: "p1".into(),
        buyer: buyer.into(),
        idem_key: key.into(),
        quantity: 1,
        ticket: None,
    }
}

/// Group commit on real SQLite: a statement that fails anywhere inside a
/// batch, or a commit that fails after it, stores none of the batch, answers
/// none of it, and the next batch decides from what storage holds. Every
/// statement position of the batch is tried.
#[test]
fn a_failure_inside_a_batch_stores_none_of_it() {
    let create = Command::Configure {
        product_id: "p1".into(),
        patch: serde_json::from_str(r#"{"stock_total": 50, "opens_at_ms": null}"#).unwrap(),
    };
    // How many statements a clean batch of six reserves runs.
    let batch: Vec<Command> = (0..6).map(|i| reserve(&format!("b{i}"), "k")).collect();
    let mut statements = 0;
    loop {
        let mut store = Lite::new();
        let mut obj = ProductObject::new(SECRET, [7; 32]);
        assert_eq!(obj.command(&mut store, &create, 1).unwrap().status, 201);
        obj.command(&mut store, &reserve("early", "k"), 2).unwrap();
        let before = store.load_all().unwrap();
        let failing_at = statements;
        store.fail_exec_in = Some(failing_at);
        match obj.commands(&mut store, &batch, 3) {
            Ok(replies) => {
                // The failure point lay past the batch: it ran whole.
                assert!(replies.iter().all(|r| r.status == 201), "{replies:?}");
                store.fail_exec_in = None;
                break;
            }
            Err(e) => {
                assert!(e.0.contains("injected"), "statement {failing_at}: {e}");
                assert_eq!(
                    store.load_all().unwrap(),
                    before,
                    "statement {failing_at}: a failed batch left rows behind"
                );
                assert!(obj.is_poisoned(), "statement {failing_at}: not poisoned");
                // The next batch reloads and sells the same units again.
                let again = obj.commands(&mut store, &batch, 4).unwrap();
                assert!(again.iter().all(|r| r.status == 201), "{again:?}");
            }
        }
        statements += 1;
        assert!(statements < 1_000, "the batch never ran whole");
    }
    assert!(
        statements > 6,
        "a batch of six reserves ran {statements} statements"
    );

    // The commit itself fails: nothing of the batch is stored.
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    obj.command(&mut store, &create, 1).unwrap();
    let before = store.load_all().unwrap();
    store.fail_commit = true;
    assert!(obj.commands(&mut store, &batch, 3).is_err());
    assert_eq!(
        store.load_all().unwrap(),
        before,
        "a failed commit stored rows"
    );
    let read = Command::GetProduct {
        product_id: "p1".into(),
    };
    let p = obj.command(&mut store, &read, 4).unwrap();
    assert_eq!(p.body["available"].as_u64(), Some(50), "{:?}", p.body);
}

/// The catalog registers each product once, lists the newest first, and
/// refuses a new product past its limit while an existing one still passes.
#[test]
fn the_catalog_registers_once_and_is_bounded() {
    use flashgate::limits::{CATALOG_PAGE_MAX, LISTED_MAX, PRODUCTS_MAX};
    use flashgate::object::catalog::{self, Registered};
    let mut db = Lite::new();
    assert_eq!(catalog::newest(&mut db).unwrap(), Vec::<String>::new());
    assert_eq!(catalog::register(&mut db, "a", 1).unwrap(), Registered::New);
    assert_eq!(catalog::register(&mut db, "b", 2).unwrap(), Registered::New);
    assert_eq!(
        catalog::register(&mut db, "a", 3).unwrap(),
        Registered::Known
    );
    assert_eq!(catalog::newest(&mut db).unwrap(), vec!["b", "a"]);
    // A hostile id never reaches SQL.
    assert!(catalog::register(&mut db, "x' OR '1'='1", 4).is_err());
    assert!(catalog::register(&mut db, "", 4).is_err());
    for i in 2..PRODUCTS_MAX {
        assert_eq!(
            catalog::register(&mut db, &format!("p{i}"), 10 + i as u64).unwrap(),
            Registered::New
        );
    }
    assert_eq!(
        catalog::register(&mut db, "one-more", 1 << 40).unwrap(),
        Registered::Full
    );
    assert_eq!(
        catalog::register(&mut db, "a", 1 << 40).unwrap(),
        Registered::Known
    );
    // The edge reads every id, page by page from its cursor, each once.
    let (mut cursor, mut all, mut pages) = (0, Vec::new(), 0);
    loop {
        let page = catalog::ids_after(&mut db, cursor).unwrap();
        assert!(page.ids.len() <= CATALOG_PAGE_MAX);
        assert!(page.next >= cursor);
        cursor = page.next;
        all.extend(page.ids);
        pages += 1;
        if !page.more {
            break;
        }
    }
    assert_eq!(all.len(), PRODUCTS_MAX);
    assert_eq!((&all[0], &all[1]), (&"a".to_string(), &"b".to_string()));
    assert_eq!(pages, PRODUCTS_MAX.div_ceil(CATALOG_PAGE_MAX));
    let again = catalog::ids_after(&mut db, cursor).unwrap();
    assert!(again.ids.is_empty() && !again.more && again.next == cursor);
    let newest = catalog::newest(&mut db).unwrap();
    assert_eq!(newest.len(), LISTED_MAX);
    assert_eq!(newest[0], format!("p{}", PRODUCTS_MAX - 1));
    use flashgate_wire::SaleState;
    assert!(
        flashgate::protocol::listed(SaleState::Open)
            && flashgate::protocol::listed(SaleState::Scheduled)
    );
    assert!(
        !flashgate::protocol::listed(SaleState::Closed)
            && !flashgate::protocol::listed(SaleState::Paused)
    );
}

/// The key index: a second record under a buyer's key fails the write
/// instead of replacing the first (an upsert by id alone), and a product
/// stored before the index existed gets it at load.
#[test]
fn a_second_record_under_a_key_is_refused_and_old_stores_get_the_index() {
    use flashgate_core::{Change, HoldState, ReservationRow, Row};
    let mut store = Lite::new();
    let mut gate = Gate::new(0, Config::default(), 10).unwrap();
    store.write(Some("p-key"), &gate.poll_changes()).unwrap();
    let row = |id: u64, key: &str| {
        Change::Put(Row::Reservation(ReservationRow {
            id,
            buyer: "b".into(),
            idem_key: key.into(),
            quantity: 1,
            state: HoldState::Held,
            expires_at_ms: 1_000,
            payment_ref: None,
            confirmed_at_ms: None,
            outbox_seq: None,
            voided_at_ms: None,
            void_seq: None,
        }))
    };
    store.write(None, &[row(1, "k")]).unwrap();
    // The same id again is an update, not a clash.
    store.write(None, &[row(1, "k")]).unwrap();
    let err = store.write(None, &[row(2, "k")]).unwrap_err();
    assert!(err.0.to_lowercase().contains("unique"), "{err}");
    let ids: Vec<IdSql> = store.query("SELECT id FROM reservations").unwrap();
    assert_eq!(ids.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1]);

    store.exec("DROP INDEX reservations_by_key", &[]).unwrap();
    store.load_all().unwrap();
    let index: Vec<IdSql> = store
        .query("SELECT count(*) AS id FROM sqlite_master WHERE name = 'reservations_by_key'")
        .unwrap();
    assert_eq!(index[0].id, 1, "the load created the index");
}

#[derive(serde::Deserialize)]
struct IdSql {
    id: u64,
}

/// A waiting room's lottery key and record survive a reload; a store from
/// before the `room_record` table loads unchanged (no key yet, an empty
/// record), gets the table, and its object draws a key at the next event.
#[test]
fn the_lottery_and_record_survive_a_reload_and_old_stores_load() {
    let mut store = Lite::new();
    let mut obj = ProductObject::new(SECRET, [7; 32]);
    let create = Command::Configure {
        product_id: "p-room".into(),
        patch: serde_json::from_str(r#"{"stock_total": 3, "admit_per_s": 5}"#).unwrap(),
    };
    let created = obj.command(&mut store, &create, 1).unwrap();
    assert_eq!(created.status, 201);
    let commitment = created.body["lottery_commitment"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(commitment.len(), 64);
    // Open from the start: the key is public, and hashes to the commitment.
    let key = created.body["lottery_key"].as_str().unwrap().to_owned();
    let bytes = flashgate_wire::lottery::parse_key(&key).unwrap();
    assert_eq!(flashgate_wire::lottery::commitment(&bytes), commitment);
    let read = Command::GetProduct {
        product_id: "p-room".into(),
    };
    let mut fresh = ProductObject::new(SECRET, [8; 32]);
    let again = fresh.command(&mut store, &read, 2).unwrap();
    assert_eq!(
        again.body["lottery_key"],
        key.as_str(),
        "the key is stored, not redrawn"
    );

    // An older store: no room_record table.
    store.exec("DROP TABLE room_record", &[]).unwrap();
    let mut old = ProductObject::new(SECRET, [9; 32]);
    let p = old.command(&mut store, &read, 3).unwrap();
    assert_eq!(p.status, 200);
    assert!(p.body["lottery_key"].is_null(), "{}", p.body);
    // The next change draws a key, and it is stored.
    let restock = Command::Restock {
        product_id: "p-room".into(),
        units: 1,
    };
    assert_eq!(old.command(&mut store, &restock, 4).unwrap().status, 200);
    let p = ProductObject::new(SECRET, [1; 32])
        .command(&mut store, &read, 5)
        .unwrap();
    let drawn = p.body["lottery_key"].as_str().unwrap();
    assert_ne!(drawn, key, "a new key, from this object's seed");
}
