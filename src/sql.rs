//! The Durable Object's SQLite schema, and the mapping between its tables
//! and the core's rows (`flashgate_core::Row`). ARCHITECTURE.md documents the
//! tables.
//!
//! Pure: it speaks to any `SqlDb`, which the Worker implements over the
//! object's `SqlStorage` (`wasm/sqlite.rs`) and the tests implement over
//! rusqlite, so the statements are run against real SQLite natively. Every
//! call of `SqlStorage` is synchronous, so a decision and its writes happen
//! in one turn of the event loop with nothing awaited in between.

use flashgate_core::{
    Change, Config, HoldState, ItemKey, MetaRow, Mode, OutboxEntry, ReservationRow, Row,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::object::{Storage, StorageError, Stored};

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
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS product (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        product_id TEXT NOT NULL)",
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
        reservations_max INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reservations (
        id INTEGER PRIMARY KEY,
        buyer TEXT NOT NULL,
        idem_key TEXT NOT NULL,
        quantity INTEGER NOT NULL,
        state TEXT NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        payment_ref TEXT,
        confirmed_at_ms INTEGER,
        outbox_seq INTEGER)",
    "CREATE TABLE IF NOT EXISTS outbox (
        seq INTEGER PRIMARY KEY,
        reservation_id INTEGER NOT NULL,
        buyer TEXT NOT NULL,
        quantity INTEGER NOT NULL,
        payment_ref TEXT NOT NULL,
        confirmed_at_ms INTEGER NOT NULL)",
];

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

/// Creates the tables and records the product id. Only a product being
/// created calls this, so that a request for an unknown product writes
/// nothing.
pub fn create(db: &mut impl SqlDb, product_id: &str) -> Result<(), StorageError> {
    for stmt in SCHEMA {
        db.exec(stmt, &[])?;
    }
    db.exec(
        "INSERT OR REPLACE INTO product (id, product_id) VALUES (1, ?)",
        &[text(product_id)],
    )
}

/// Writes one decision's changes.
pub fn write(db: &mut impl SqlDb, changes: &[Change]) -> Result<(), StorageError> {
    for change in changes {
        match change {
            Change::Put(Row::Meta(m)) => db.exec(
                "INSERT OR REPLACE INTO meta (id, stock_total, mode, next_reservation_id,
                    outbox_acked_seq, outbox_attempts, outbox_retry_at_ms)
                 VALUES (1, ?, ?, ?, ?, ?, ?)",
                &[
                    int(m.stock_total),
                    text(m.mode.as_str()),
                    int(m.next_reservation_id),
                    int(m.outbox_acked_seq),
                    int(u64::from(m.outbox_attempts)),
                    int(m.outbox_retry_at_ms),
                ],
            )?,
            Change::Put(Row::Config(c)) => {
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
                } = *c;
                db.exec(
                    "INSERT OR REPLACE INTO config (id, per_buyer_max, quantity_max, hold_ttl_ms,
                        idem_window_ms, opens_at_ms, closes_at_ms, reservations_max)
                     VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                    &[
                        int(u64::from(per_buyer_max)),
                        int(u64::from(quantity_max)),
                        int(hold_ttl_ms),
                        int(idem_window_ms),
                        opt_int(opens_at_ms),
                        opt_int(closes_at_ms),
                        int(u64::from(reservations_max)),
                    ],
                )?
            }
            Change::Put(Row::Reservation(r)) => db.exec(
                "INSERT OR REPLACE INTO reservations (id, buyer, idem_key, quantity, state,
                    expires_at_ms, payment_ref, confirmed_at_ms, outbox_seq)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                ],
            )?,
            Change::Put(Row::Outbox(e)) => db.exec(
                "INSERT OR REPLACE INTO outbox (seq, reservation_id, buyer, quantity,
                    payment_ref, confirmed_at_ms)
                 VALUES (?, ?, ?, ?, ?, ?)",
                &[
                    int(e.seq),
                    int(e.reservation_id),
                    text(&e.buyer),
                    int(u64::from(e.quantity)),
                    text(&e.payment_ref),
                    int(e.confirmed_at_ms),
                ],
            )?,
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

#[derive(Deserialize)]
struct CountSql {
    n: u64,
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
}

#[derive(Deserialize)]
struct OutboxSql {
    seq: u64,
    reservation_id: u64,
    buyer: String,
    quantity: u32,
    payment_ref: String,
    confirmed_at_ms: u64,
}

fn corrupt(what: &str) -> StorageError {
    StorageError(format!("stored gate is corrupt: bad {what}"))
}

/// Reads the product and its rows, or `None` if this object never held a
/// product.
pub fn load(db: &mut impl SqlDb) -> Result<Option<Stored>, StorageError> {
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
    let mut rows = Vec::new();
    for m in db.query::<MetaSql>("SELECT * FROM meta")? {
        rows.push(Row::Meta(MetaRow {
            stock_total: m.stock_total,
            mode: Mode::parse(&m.mode).ok_or_else(|| corrupt("mode"))?,
            next_reservation_id: m.next_reservation_id,
            outbox_acked_seq: m.outbox_acked_seq,
            outbox_attempts: m.outbox_attempts,
            outbox_retry_at_ms: m.outbox_retry_at_ms,
        }));
    }
    // The config columns are the fields of `Config`, so it reads directly.
    for c in db.query::<Config>("SELECT * FROM config")? {
        rows.push(Row::Config(c));
    }
    for r in db.query::<ReservationSql>("SELECT * FROM reservations")? {
        rows.push(Row::Reservation(ReservationRow {
            id: r.id,
            buyer: r.buyer,
            idem_key: r.idem_key,
            quantity: r.quantity,
            state: HoldState::parse(&r.state).ok_or_else(|| corrupt("state"))?,
            expires_at_ms: r.expires_at_ms,
            payment_ref: r.payment_ref,
            confirmed_at_ms: r.confirmed_at_ms,
            outbox_seq: r.outbox_seq,
        }));
    }
    for e in db.query::<OutboxSql>("SELECT * FROM outbox")? {
        rows.push(Row::Outbox(OutboxEntry {
            seq: e.seq,
            reservation_id: e.reservation_id,
            buyer: e.buyer.into(),
            quantity: e.quantity,
            payment_ref: e.payment_ref.into(),
            confirmed_at_ms: e.confirmed_at_ms,
        }));
    }
    Ok(Some(Stored {
        product_id: product.product_id,
        rows,
    }))
}

/// The object's storage over a SQL database.
pub struct SqlStore<D>(pub D);

impl<D: SqlDb> Storage for SqlStore<D> {
    fn load(&mut self) -> Result<Option<Stored>, StorageError> {
        load(&mut self.0)
    }

    fn write(&mut self, create: Option<&str>, changes: &[Change]) -> Result<(), StorageError> {
        if let Some(id) = create {
            self::create(&mut self.0, id)?;
        }
        write(&mut self.0, changes)
    }
}
