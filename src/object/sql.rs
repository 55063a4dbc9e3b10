//! The Durable Object's SQLite schema, and the mapping between its tables
//! and the core's rows (`flashgate_core::Row`). docs/storage.md, "The rows",
//! documents the tables.
//!
//! Pure: it speaks to any `SqlDb`, which the Worker implements over the
//! object's `SqlStorage` (`wasm/object/sqlite.rs`) and the tests implement over
//! rusqlite, so the statements are run against real SQLite natively. Every
//! call of `SqlStorage` is synchronous, so a decision and its writes happen
//! in one turn of the event loop with nothing awaited in between.

use flashgate_core::{
    Admission, AdmissionRecord, Bucket, Change, Config, Counters, Face, HistoryWrite, HoldState,
    ItemKey, Lottery, LotteryKey, Mark, MetaRow, Mode, OutboxEntry, OutboxEvent, Pow,
    ReservationId, ReservationRow, Row,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::object::product::{Storage, StorageError};

/// A value bound to a statement's `?` placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlValue {
    Int(i64),
    Text(String),
    Null,
}

/// A database the object can run statements on.
pub trait SqlDb {
    fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), StorageError>;
    /// Every row of a query, each as `T` (columns by name).
    fn query<T: DeserializeOwned>(&mut self, sql: &str) -> Result<Vec<T>, StorageError>;
    /// As `query`, with values bound to its `?` placeholders.
    fn query_with<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<T>, StorageError>;
    /// Every row of a query handed to `each` as it is read, for queries
    /// whose rows are too many to hold at once.
    fn query_each<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        each: &mut dyn FnMut(T) -> Result<(), StorageError>,
    ) -> Result<(), StorageError>;
    /// Runs `body` as one transaction, rolled back if it returns an error.
    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError>
    where
        Self: Sized;
}

/// The version of the tables below. A product stored under another
/// version is refused at load with a clear error rather than misread.
pub const SCHEMA_VERSION: u64 = 2;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS product (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        product_id TEXT NOT NULL)",
    // `stock_total` holds the gate's `escrowed` units (`MetaRow`): the
    // column kept the name it had before a shard kept an escrow, so that
    // stored products read back unchanged.
    "CREATE TABLE IF NOT EXISTS meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        stock_total INTEGER NOT NULL,
        mode TEXT NOT NULL,
        next_reservation_id INTEGER NOT NULL,
        outbox_acked_seq INTEGER NOT NULL,
        outbox_attempts INTEGER NOT NULL,
        outbox_retry_at_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS config (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        per_buyer_max INTEGER NOT NULL,
        quantity_max INTEGER NOT NULL,
        hold_ttl_ms INTEGER NOT NULL,
        idem_window_ms INTEGER NOT NULL,
        opens_at_ms INTEGER,
        closes_at_ms INTEGER,
        reservations_max INTEGER NOT NULL,
        admit_per_s INTEGER NOT NULL,
        prequeue_ms INTEGER NOT NULL,
        ticket_ttl_ms INTEGER NOT NULL,
        attempts_per_window_max INTEGER NOT NULL,
        attempt_window_ms INTEGER NOT NULL)",
    FACE_TABLE,
    POW_TABLE,
    // The waiting room: counts per arrival second as JSON, since they are
    // read and written together.
    "CREATE TABLE IF NOT EXISTS admission (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        prequeue INTEGER NOT NULL,
        folded INTEGER NOT NULL,
        folded_until_s INTEGER NOT NULL,
        buckets TEXT NOT NULL,
        base_milli INTEGER NOT NULL,
        base_at_ms INTEGER NOT NULL,
        advancing INTEGER NOT NULL,
        floor TEXT)",
    "CREATE TABLE IF NOT EXISTS reservations (
        id INTEGER PRIMARY KEY,
        buyer TEXT NOT NULL,
        idem_key TEXT NOT NULL,
        quantity INTEGER NOT NULL,
        state TEXT NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        payment_ref TEXT,
        confirmed_at_ms INTEGER,
        outbox_seq INTEGER,
        voided_at_ms INTEGER,
        void_seq INTEGER)",
    KEY_INDEX,
    ESCROW_TABLE,
    ROOM_TABLE,
    HISTORY_TABLE,
    // One row per event; the columns an event kind does not use are NULL.
    "CREATE TABLE IF NOT EXISTS outbox (
        seq INTEGER PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('stock', 'order', 'void')),
        at_ms INTEGER NOT NULL,
        stock_total INTEGER,
        reservation_id INTEGER,
        buyer TEXT,
        quantity INTEGER,
        payment_ref TEXT)",
];

/// A paid record is read back by its buyer's key (`flashgate_core::archive`),
/// and a key names one record per buyer: unique, so that storage refuses a
/// second record under a key rather than hold two. Created with the
/// tables, and at load for products stored before it existed (the row
/// format is unchanged, so the schema version is too).
const KEY_INDEX: &str = "CREATE UNIQUE INDEX IF NOT EXISTS reservations_by_key
    ON reservations (buyer, idem_key)";

/// The escrow of a product of several stock shards (`flashgate_core::escrow`):
/// home's pool or a shard's ledger, as JSON, since it is read and written
/// whole and is small (one account per shard, at most 64). Absent for a
/// product of one shard. Created with the tables, and at load for products
/// stored before it existed, so the schema version is unchanged.
const ESCROW_TABLE: &str = "CREATE TABLE IF NOT EXISTS escrow (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    body TEXT NOT NULL)";

#[derive(Deserialize)]
struct EscrowSql {
    body: String,
}
/// The product's face (`flashgate_core::Face`), as JSON: the pages read it
/// whole, and no query looks inside it. Written with every config row; a
/// table of its own, so that a product stored before faces existed gains
/// it at load (as the key index) with its row format, and so its schema
/// version, unchanged.
const FACE_TABLE: &str = "CREATE TABLE IF NOT EXISTS face (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    face TEXT NOT NULL)";
/// The waiting room's proof-of-work setting (`flashgate_core::Pow`), as
/// JSON, written with every config row; a table of its own for the reason
/// the face has one.
const POW_TABLE: &str = "CREATE TABLE IF NOT EXISTS pow (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    pow TEXT NOT NULL)";
/// The waiting room's lottery key and admission record
/// (`flashgate_core::lottery`), beside the `admission` row they belong to
/// and written with it. A table of its own, created with the tables and at
/// load for products stored before it existed, so that those load
/// unchanged (no row: no key yet, an empty record) and the schema version
/// stays.
const ROOM_TABLE: &str = "CREATE TABLE IF NOT EXISTS room_record (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        lottery_key TEXT,
        record TEXT NOT NULL)";

/// The product's history (`flashgate_core::history`), one row per time
/// bucket: its counts as JSON (`Counters::named`, nonzero ones only) and
/// its mark as JSON, since both are read and written whole. Every row has
/// the history's step; a step that doubles rewrites them all. Created with
/// the tables, and at load for products stored before it existed (no row:
/// an empty history), so the schema version stays.
const HISTORY_TABLE: &str = "CREATE TABLE IF NOT EXISTS history (
        start_ms INTEGER PRIMARY KEY,
        step_ms INTEGER NOT NULL,
        counts TEXT NOT NULL,
        mark TEXT NOT NULL)";

#[derive(Deserialize)]
struct HistorySql {
    start_ms: u64,
    step_ms: u64,
    counts: String,
    mark: String,
}

/// The stored history: its step and buckets, `None` if it has none.
pub fn load_history(db: &mut impl SqlDb) -> Result<Option<(u64, Vec<Bucket>)>, StorageError> {
    db.exec(HISTORY_TABLE, &[])?;
    let rows: Vec<HistorySql> = db.query("SELECT * FROM history ORDER BY start_ms")?;
    let Some(step_ms) = rows.first().map(|r| r.step_ms) else {
        return Ok(None);
    };
    let mut buckets = Vec::with_capacity(rows.len());
    for r in rows {
        if r.step_ms != step_ms {
            return Err(corrupt("history step"));
        }
        let counts: Counters =
            serde_json::from_str(&r.counts).map_err(|_| corrupt("history counts"))?;
        let mark: Mark = serde_json::from_str(&r.mark).map_err(|_| corrupt("history mark"))?;
        buckets.push(Bucket {
            start_ms: r.start_ms,
            counts,
            mark,
        });
    }
    Ok(Some((step_ms, buckets)))
}

/// Writes what `History::poll_write` handed over: upserts by start, after
/// deleting every row if the step doubled.
pub fn write_history(db: &mut impl SqlDb, w: &HistoryWrite) -> Result<(), StorageError> {
    if w.replace {
        db.exec("DELETE FROM history", &[])?;
    }
    for b in &w.buckets {
        db.exec(
            "INSERT OR REPLACE INTO history (start_ms, step_ms, counts, mark) VALUES (?, ?, ?, ?)",
            &[
                int(b.start_ms),
                int(w.step_ms),
                SqlValue::Text(to_json(&b.counts)?),
                SqlValue::Text(to_json(&b.mark)?),
            ],
        )?;
    }
    Ok(())
}

/// The states of a paid record, as stored.
const PAID_STATES: &str = "state IN ('confirmed', 'voided')";

/// Values are far below 2^53 (see `flashgate_core::limits`), so they are
/// exact as SQLite integers and as JavaScript numbers.
fn int(v: u64) -> SqlValue {
    SqlValue::Int(v as i64)
}

fn opt_int(v: Option<u64>) -> SqlValue {
    v.map_or(SqlValue::Null, int)
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

fn to_json(v: &impl serde::Serialize) -> Result<String, StorageError> {
    serde_json::to_string(v).map_err(|e| StorageError(format!("encoding a row: {e}")))
}

/// Creates the tables and records the product id. Only a product being
/// created calls this, so that a request for an unknown product writes
/// nothing.
pub fn create(db: &mut impl SqlDb, product_id: &str) -> Result<(), StorageError> {
    for stmt in SCHEMA {
        db.exec(stmt, &[])?;
    }
    db.exec(
        "INSERT OR REPLACE INTO schema_version (id, version) VALUES (1, ?)",
        &[int(SCHEMA_VERSION)],
    )?;
    db.exec(
        "INSERT OR REPLACE INTO product (id, product_id) VALUES (1, ?)",
        &[text(product_id)],
    )
}

/// Writes one decision's changes.
pub fn write(db: &mut impl SqlDb, changes: &[Change]) -> Result<(), StorageError> {
    for change in changes {
        match change {
            Change::Put(row) => put(db, row)?,
            Change::Delete(ItemKey::Reservation(id)) => {
                db.exec("DELETE FROM reservations WHERE id = ?", &[int(*id)])?
            }
            Change::Delete(ItemKey::Outbox(seq)) => {
                db.exec("DELETE FROM outbox WHERE seq = ?", &[int(*seq)])?
            }
        };
    }
    Ok(())
}

/// Writes one row: an upsert of its table's row.
fn put(db: &mut impl SqlDb, row: &Row) -> Result<(), StorageError> {
    match row {
        Row::Meta(m) => db.exec(
            "INSERT OR REPLACE INTO meta (id, stock_total, mode, next_reservation_id,
                outbox_acked_seq, outbox_attempts, outbox_retry_at_ms)
             VALUES (1, ?, ?, ?, ?, ?, ?)",
            &[
                int(m.escrowed),
                text(m.mode.as_str()),
                int(m.next_reservation_id),
                int(m.outbox_acked_seq),
                int(u64::from(m.outbox_attempts)),
                int(m.outbox_retry_at_ms),
            ],
        ),
        Row::Config(c) => put_config(db, c),
        Row::Escrow(e) => db.exec(
            "INSERT OR REPLACE INTO escrow (id, body) VALUES (1, ?)",
            &[SqlValue::Text(to_json(e)?)],
        ),
        Row::Admission(a) => put_admission(db, a),
        // An upsert by id only: `INSERT OR REPLACE` would also resolve a
        // clash on the key index by deleting the other row, silently.
        // This way a second record under a key fails the write.
        //
        // The update sets only what a record's life changes. Its buyer, key
        // and quantity are fixed when it is made, and setting the indexed
        // two again rewrites the record's key index entry: a row written,
        // and billed, on every confirm, cancel and expiry. Measured by the
        // rows a Durable Object counts (`work.isolate` in the stats), 2,000
        // buyers at 64 at a time, each reserving and paying: 4.36 rows a
        // confirm with them set, 3.35 without; `scripts/bench-compare`'s
        // cost model has the whole sale's rows per click. Should the core
        // ever change them, `tests/sql_storage.rs`, which restores the gate
        // from the database after every step, would see the stale columns.
        Row::Reservation(r) => db.exec(
            "INSERT INTO reservations (id, buyer, idem_key, quantity, state,
                expires_at_ms, payment_ref, confirmed_at_ms, outbox_seq, voided_at_ms,
                void_seq)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET
                state = excluded.state, expires_at_ms = excluded.expires_at_ms,
                payment_ref = excluded.payment_ref,
                confirmed_at_ms = excluded.confirmed_at_ms,
                outbox_seq = excluded.outbox_seq, voided_at_ms = excluded.voided_at_ms,
                void_seq = excluded.void_seq",
            &[
                int(r.id),
                text(&r.buyer),
                text(&r.idem_key),
                int(u64::from(r.quantity)),
                text(r.state.as_str()),
                int(r.expires_at_ms),
                r.payment_ref.as_deref().map_or(SqlValue::Null, text),
                opt_int(r.confirmed_at_ms),
                opt_int(r.outbox_seq),
                opt_int(r.voided_at_ms),
                opt_int(r.void_seq),
            ],
        ),
        Row::Outbox(e) => put_outbox(db, e),
    }
}

fn put_config(db: &mut impl SqlDb, c: &Config) -> Result<(), StorageError> {
    // Destructured in full: a new config field fails to compile
    // here until it has a column.
    let Config {
        per_buyer_max,
        quantity_max,
        hold_ttl_ms,
        idem_window_ms,
        opens_at_ms,
        closes_at_ms,
        reservations_max,
        admit_per_s,
        prequeue_ms,
        ticket_ttl_ms,
        attempts_per_window_max,
        attempt_window_ms,
        pow,
        face,
    } = c;
    db.exec(
        "INSERT OR REPLACE INTO config (id, per_buyer_max, quantity_max, hold_ttl_ms,
            idem_window_ms, opens_at_ms, closes_at_ms, reservations_max,
            admit_per_s, prequeue_ms, ticket_ttl_ms, attempts_per_window_max,
            attempt_window_ms)
         VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            int(u64::from(*per_buyer_max)),
            int(u64::from(*quantity_max)),
            int(*hold_ttl_ms),
            int(*idem_window_ms),
            opt_int(*opens_at_ms),
            opt_int(*closes_at_ms),
            int(u64::from(*reservations_max)),
            int(u64::from(*admit_per_s)),
            int(*prequeue_ms),
            int(*ticket_ttl_ms),
            int(u64::from(*attempts_per_window_max)),
            int(*attempt_window_ms),
        ],
    )?;
    db.exec(
        "INSERT OR REPLACE INTO pow (id, pow) VALUES (1, ?)",
        &[SqlValue::Text(to_json(pow)?)],
    )?;
    db.exec(
        "INSERT OR REPLACE INTO face (id, face) VALUES (1, ?)",
        &[SqlValue::Text(to_json(face)?)],
    )
}

fn put_admission(db: &mut impl SqlDb, a: &Admission) -> Result<(), StorageError> {
    let Admission {
        prequeue,
        folded,
        folded_until_s,
        buckets,
        base_milli,
        base_at_ms,
        advancing,
        floor,
        lottery,
        record,
    } = a;
    db.exec(
        "INSERT OR REPLACE INTO room_record (id, lottery_key, record)
         VALUES (1, ?, ?)",
        &[
            match lottery.key {
                Some(k) => SqlValue::Text(k.to_hex()),
                None => SqlValue::Null,
            },
            SqlValue::Text(to_json(record)?),
        ],
    )?;
    let buckets: Vec<(u64, u64)> = buckets.iter().map(|(&s, &n)| (s, n)).collect();
    db.exec(
        "INSERT OR REPLACE INTO admission (id, prequeue, folded, folded_until_s,
            buckets, base_milli, base_at_ms, advancing, floor)
         VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            int(*prequeue),
            int(*folded),
            int(*folded_until_s),
            SqlValue::Text(to_json(&buckets)?),
            int(*base_milli),
            int(*base_at_ms),
            int(u64::from(*advancing)),
            match floor {
                Some(f) => SqlValue::Text(to_json(f)?),
                None => SqlValue::Null,
            },
        ],
    )
}

fn put_outbox(db: &mut impl SqlDb, e: &OutboxEntry) -> Result<(), StorageError> {
    let (kind, at_ms, stock, reservation, buyer, quantity, payment_ref) = match &e.event {
        OutboxEvent::Stock { stock_total, at_ms } => {
            ("stock", *at_ms, Some(*stock_total), None, None, None, None)
        }
        OutboxEvent::Order {
            reservation_id,
            buyer,
            quantity,
            payment_ref,
            confirmed_at_ms,
        } => (
            "order",
            *confirmed_at_ms,
            None,
            Some(*reservation_id),
            Some(&**buyer),
            Some(*quantity),
            Some(&**payment_ref),
        ),
        OutboxEvent::Void {
            reservation_id,
            quantity,
            voided_at_ms,
        } => (
            "void",
            *voided_at_ms,
            None,
            Some(*reservation_id),
            None,
            Some(*quantity),
            None,
        ),
    };
    db.exec(
        "INSERT OR REPLACE INTO outbox (seq, kind, at_ms, stock_total,
            reservation_id, buyer, quantity, payment_ref)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            int(e.seq),
            text(kind),
            int(at_ms),
            opt_int(stock),
            opt_int(reservation),
            buyer.map_or(SqlValue::Null, text),
            opt_int(quantity.map(u64::from)),
            payment_ref.map_or(SqlValue::Null, text),
        ],
    )
}

#[derive(Deserialize)]
struct CountSql {
    n: u64,
}

#[derive(Deserialize)]
struct BuyerSql {
    buyer: String,
}

#[derive(Deserialize)]
struct ProductSql {
    product_id: String,
}

#[derive(Deserialize)]
struct MetaSql {
    stock_total: u64,
    mode: String,
    next_reservation_id: u64,
    outbox_acked_seq: u64,
    outbox_attempts: u32,
    outbox_retry_at_ms: u64,
}

#[derive(Deserialize)]
struct ReservationSql {
    id: u64,
    buyer: String,
    idem_key: String,
    quantity: u32,
    state: String,
    expires_at_ms: u64,
    payment_ref: Option<String>,
    confirmed_at_ms: Option<u64>,
    outbox_seq: Option<u64>,
    voided_at_ms: Option<u64>,
    void_seq: Option<u64>,
}

impl ReservationSql {
    fn row(self) -> Result<ReservationRow, StorageError> {
        Ok(ReservationRow {
            id: self.id,
            buyer: self.buyer,
            idem_key: self.idem_key,
            quantity: self.quantity,
            state: HoldState::parse(&self.state).ok_or_else(|| corrupt("state"))?,
            expires_at_ms: self.expires_at_ms,
            payment_ref: self.payment_ref,
            confirmed_at_ms: self.confirmed_at_ms,
            outbox_seq: self.outbox_seq,
            voided_at_ms: self.voided_at_ms,
            void_seq: self.void_seq,
        })
    }
}

/// The paid reservations a query finds (at most one for a key or an id).
fn paid_rows(
    db: &mut impl SqlDb,
    filter: &str,
    params: &[SqlValue],
) -> Result<Vec<ReservationRow>, StorageError> {
    let sql = format!("SELECT * FROM reservations WHERE {PAID_STATES}{filter}");
    let rows: Vec<ReservationSql> = db.query_with(&sql, params)?;
    rows.into_iter().map(ReservationSql::row).collect()
}

/// The paid reservation `id`, read back for the core's archive.
pub fn paid(
    db: &mut impl SqlDb,
    id: ReservationId,
) -> Result<Option<ReservationRow>, StorageError> {
    Ok(paid_rows(db, " AND id = ?", &[int(id)])?.pop())
}

/// The paid reservation `buyer` made under `idem_key` (by the key index).
pub fn paid_by_key(
    db: &mut impl SqlDb,
    buyer: &str,
    idem_key: &str,
) -> Result<Option<ReservationRow>, StorageError> {
    Ok(paid_rows(
        db,
        " AND buyer = ? AND idem_key = ?",
        &[text(buyer), text(idem_key)],
    )?
    .pop())
}

#[derive(Deserialize)]
struct OutboxSql {
    seq: u64,
    kind: String,
    at_ms: u64,
    stock_total: Option<u64>,
    reservation_id: Option<u64>,
    buyer: Option<String>,
    quantity: Option<u32>,
    payment_ref: Option<String>,
}

impl OutboxSql {
    fn event(self) -> Option<OutboxEvent> {
        Some(match self.kind.as_str() {
            "stock" => OutboxEvent::Stock {
                stock_total: self.stock_total?,
                at_ms: self.at_ms,
            },
            "order" => OutboxEvent::Order {
                reservation_id: self.reservation_id?,
                buyer: self.buyer?.into(),
                quantity: self.quantity?,
                payment_ref: self.payment_ref?.into(),
                confirmed_at_ms: self.at_ms,
            },
            "void" => OutboxEvent::Void {
                reservation_id: self.reservation_id?,
                quantity: self.quantity?,
                voided_at_ms: self.at_ms,
            },
            _ => return None,
        })
    }
}

#[derive(Deserialize)]
struct AdmissionSql {
    prequeue: u64,
    folded: u64,
    folded_until_s: u64,
    buckets: String,
    base_milli: u64,
    base_at_ms: u64,
    advancing: u8,
    floor: Option<String>,
}

impl AdmissionSql {
    fn admission(self) -> Option<Admission> {
        let buckets: Vec<(u64, u64)> = serde_json::from_str(&self.buckets).ok()?;
        let floor = match self.floor {
            Some(f) => Some(serde_json::from_str(&f).ok()?),
            None => None,
        };
        Some(Admission {
            prequeue: self.prequeue,
            folded: self.folded,
            folded_until_s: self.folded_until_s,
            buckets: buckets.into_iter().collect(),
            base_milli: self.base_milli,
            base_at_ms: self.base_at_ms,
            advancing: self.advancing != 0,
            floor,
            lottery: Lottery::default(),
            record: AdmissionRecord::default(),
        })
    }
}

#[derive(Deserialize)]
struct PowSql {
    pow: String,
}

#[derive(Deserialize)]
struct FaceSql {
    face: String,
}

#[derive(Deserialize)]
struct RoomSql {
    lottery_key: Option<String>,
    record: String,
}

impl RoomSql {
    /// Fills in the admission's lottery key and record.
    fn into(self, a: &mut Admission) -> Option<()> {
        a.lottery.key = match self.lottery_key {
            Some(k) => Some(LotteryKey::from_hex(&k)?),
            None => None,
        };
        a.record = serde_json::from_str(&self.record).ok()?;
        Some(())
    }
}

#[derive(Deserialize)]
struct VersionSql {
    version: u64,
}

fn corrupt(what: &str) -> StorageError {
    StorageError(format!("stored gate is corrupt: bad {what}"))
}

/// Reads the product's rows into `each`, one at a time, and returns its
/// id, or `None` if this object never held a product.
pub fn load(
    db: &mut impl SqlDb,
    each: &mut dyn FnMut(Row) -> Result<(), StorageError>,
) -> Result<Option<String>, StorageError> {
    let tables: Vec<CountSql> = db.query(
        "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'product'",
    )?;
    if tables.iter().all(|t| t.n == 0) {
        return Ok(None);
    }
    let products: Vec<ProductSql> = db.query("SELECT product_id FROM product")?;
    let Some(product) = products.into_iter().next() else {
        return Ok(None);
    };
    // Tables from before the schema had a version are version 1.
    let versioned: Vec<CountSql> = db.query(
        "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
    )?;
    let version = if versioned.iter().all(|t| t.n == 0) {
        1
    } else {
        let v: Vec<VersionSql> = db.query("SELECT version FROM schema_version")?;
        v.first().map_or(1, |v| v.version)
    };
    if version != SCHEMA_VERSION {
        return Err(StorageError(format!(
            "product {} is stored in schema version {version}, and this gate reads \
             version {SCHEMA_VERSION}; it was stored by another release of flashgate",
            product.product_id
        )));
    }
    for m in db.query::<MetaSql>("SELECT * FROM meta")? {
        each(Row::Meta(MetaRow {
            escrowed: m.stock_total,
            mode: Mode::parse(&m.mode).ok_or_else(|| corrupt("mode"))?,
            next_reservation_id: m.next_reservation_id,
            outbox_acked_seq: m.outbox_acked_seq,
            outbox_attempts: m.outbox_attempts,
            outbox_retry_at_ms: m.outbox_retry_at_ms,
        }))?;
    }
    // The config columns are the fields of `Config`, so it reads directly,
    // all but the face, which has its own row.
    db.exec(FACE_TABLE, &[])?;
    let faces: Vec<FaceSql> = db.query("SELECT face FROM face")?;
    let face: Box<Face> = match faces.into_iter().next() {
        Some(f) => serde_json::from_str(&f.face).map_err(|_| corrupt("face"))?,
        None => Box::default(),
    };
    db.exec(POW_TABLE, &[])?;
    let pows: Vec<PowSql> = db.query("SELECT pow FROM pow")?;
    let pow: Pow = match pows.into_iter().next() {
        Some(p) => serde_json::from_str(&p.pow).map_err(|_| corrupt("pow"))?,
        None => Pow::default(),
    };
    for mut c in db.query::<Config>("SELECT * FROM config")? {
        c.face = face.clone();
        c.pow = pow;
        each(Row::Config(c))?;
    }
    db.exec(ROOM_TABLE, &[])?;
    let rooms: Vec<RoomSql> = db.query("SELECT * FROM room_record")?;
    let mut room = rooms.into_iter().next();
    for a in db.query::<AdmissionSql>("SELECT * FROM admission")? {
        let mut a = a.admission().ok_or_else(|| corrupt("waiting room"))?;
        if let Some(r) = room.take() {
            r.into(&mut a)
                .ok_or_else(|| corrupt("waiting room's record"))?;
        }
        each(Row::Admission(a))?;
    }
    db.exec(ESCROW_TABLE, &[])?;
    for e in db.query::<EscrowSql>("SELECT body FROM escrow")? {
        let escrow = serde_json::from_str(&e.body).map_err(|_| corrupt("escrow"))?;
        each(Row::Escrow(escrow))?;
    }
    db.exec(KEY_INDEX, &[])?;
    // The records kept in memory by id, then the paid ones by buyer (by the
    // key index), as `Restorer` takes them.
    for part in [
        format!("SELECT * FROM reservations WHERE NOT ({PAID_STATES}) ORDER BY id"),
        // By the key index, whose order is the buyer's first: no sort.
        format!("SELECT * FROM reservations WHERE {PAID_STATES} ORDER BY buyer"),
    ] {
        db.query_each::<ReservationSql>(&part, &mut |r| each(Row::Reservation(r.row()?)))?;
    }
    db.query_each::<OutboxSql>("SELECT * FROM outbox ORDER BY seq", &mut |e| {
        let seq = e.seq;
        let event = e.event().ok_or_else(|| corrupt("outbox entry"))?;
        each(Row::Outbox(OutboxEntry { seq, event }))
    })?;
    Ok(Some(product.product_id))
}

/// Every SQL database is the object's storage.
impl<D: SqlDb> Storage for D {
    fn load(
        &mut self,
        each: &mut dyn FnMut(Row) -> Result<(), StorageError>,
    ) -> Result<Option<String>, StorageError> {
        load(self, each)
    }

    fn write(&mut self, create: Option<&str>, changes: &[Change]) -> Result<(), StorageError> {
        if let Some(id) = create {
            self::create(self, id)?;
        }
        write(self, changes)
    }

    fn paid(&mut self, id: ReservationId) -> Result<Option<ReservationRow>, StorageError> {
        paid(self, id)
    }

    fn paid_by_key(
        &mut self,
        buyer: &str,
        idem_key: &str,
    ) -> Result<Option<ReservationRow>, StorageError> {
        paid_by_key(self, buyer, idem_key)
    }

    fn paid_of_buyer(&mut self, buyer: &str) -> Result<Vec<ReservationRow>, StorageError> {
        paid_rows(self, " AND buyer = ? ORDER BY id", &[text(buyer)])
    }

    fn paid_units_max(&mut self) -> Result<u32, StorageError> {
        let most: Vec<CountSql> = self.query(
            "SELECT COALESCE(MAX(units), 0) AS n FROM (SELECT SUM(quantity) AS units
             FROM reservations WHERE state = 'confirmed' GROUP BY buyer)",
        )?;
        Ok(most.first().map_or(0, |m| m.n as u32))
    }

    fn each_paid_buyer(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StorageError> {
        let sql = format!("SELECT DISTINCT buyer FROM reservations WHERE {PAID_STATES}");
        self.query_each::<BuyerSql>(&sql, &mut |b| {
            each(&b.buyer);
            Ok(())
        })
    }

    fn all_paid(&mut self) -> Result<Vec<ReservationRow>, StorageError> {
        paid_rows(self, " ORDER BY id", &[])
    }

    fn load_history(&mut self) -> Result<Option<(u64, Vec<Bucket>)>, StorageError> {
        load_history(self)
    }

    fn write_history(&mut self, w: &HistoryWrite) -> Result<(), StorageError> {
        write_history(self, w)
    }

    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        SqlDb::atomically(self, body)
    }
}
