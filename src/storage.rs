//! The Durable Object's SQLite schema and the mapping between it and the
//! core's rows (`flashgate_core::Row`). ARCHITECTURE.md documents the rows.
//!
//! Every call here is synchronous (`SqlStorage::exec`), so a decision and
//! its writes happen in one turn of the event loop with nothing awaited in
//! between: they commit together, and the response waits for the commit.

use flashgate_core::{
    Change, Config, Gate, HoldState, MetaRow, Mode, OutboxEntry, ReservationRow, Row, RowKey,
};
use serde::Deserialize;
use worker::{SqlStorage, SqlStorageValue};

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
fn int(v: u64) -> SqlStorageValue {
    SqlStorageValue::from(v as i64)
}

fn opt_int(v: Option<u64>) -> SqlStorageValue {
    v.map_or(SqlStorageValue::Null, int)
}

fn text(s: &str) -> SqlStorageValue {
    SqlStorageValue::from(s)
}

/// Creates the tables. Only a product being created calls this, so that a
/// request for an unknown product writes nothing.
pub fn create(sql: &SqlStorage, product_id: &str) -> worker::Result<()> {
    for stmt in SCHEMA {
        sql.exec(stmt, None)?;
    }
    sql.exec(
        "INSERT OR REPLACE INTO product (id, product_id) VALUES (1, ?)",
        vec![text(product_id)],
    )?;
    Ok(())
}

/// Writes one call's changes.
pub fn write(sql: &SqlStorage, changes: &[Change]) -> worker::Result<()> {
    for change in changes {
        match change {
            Change::Put(Row::Meta(m)) => sql.exec(
                "INSERT OR REPLACE INTO meta (id, stock_total, mode, next_reservation_id,
                    outbox_acked_seq, outbox_attempts, outbox_retry_at_ms)
                 VALUES (1, ?, ?, ?, ?, ?, ?)",
                vec![
                    int(m.stock_total),
                    text(m.mode.as_str()),
                    int(m.next_reservation_id),
                    int(m.outbox_acked_seq),
                    int(u64::from(m.outbox_attempts)),
                    int(m.outbox_retry_at_ms),
                ],
            )?,
            Change::Put(Row::Config(c)) => sql.exec(
                "INSERT OR REPLACE INTO config (id, per_buyer_max, quantity_max, hold_ttl_ms,
                    idem_window_ms, opens_at_ms, closes_at_ms, reservations_max)
                 VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                vec![
                    int(u64::from(c.per_buyer_max)),
                    int(u64::from(c.quantity_max)),
                    int(c.hold_ttl_ms),
                    int(c.idem_window_ms),
                    opt_int(c.opens_at_ms),
                    opt_int(c.closes_at_ms),
                    int(u64::from(c.reservations_max)),
                ],
            )?,
            Change::Put(Row::Reservation(r)) => sql.exec(
                "INSERT OR REPLACE INTO reservations (id, buyer, idem_key, quantity, state,
                    expires_at_ms, payment_ref, confirmed_at_ms, outbox_seq)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                vec![
                    int(r.id),
                    text(&r.buyer),
                    text(&r.idem_key),
                    int(u64::from(r.quantity)),
                    text(r.state.as_str()),
                    int(r.expires_at_ms),
                    r.payment_ref.as_deref().map_or(SqlStorageValue::Null, text),
                    opt_int(r.confirmed_at_ms),
                    opt_int(r.outbox_seq),
                ],
            )?,
            Change::Put(Row::Outbox(e)) => sql.exec(
                "INSERT OR REPLACE INTO outbox (seq, reservation_id, buyer, quantity,
                    payment_ref, confirmed_at_ms)
                 VALUES (?, ?, ?, ?, ?, ?)",
                vec![
                    int(e.seq),
                    int(e.reservation_id),
                    text(&e.buyer),
                    int(u64::from(e.quantity)),
                    text(&e.payment_ref),
                    int(e.confirmed_at_ms),
                ],
            )?,
            Change::Delete(RowKey::Reservation(id)) => {
                sql.exec("DELETE FROM reservations WHERE id = ?", vec![int(*id)])?
            }
            Change::Delete(RowKey::Outbox(seq)) => {
                sql.exec("DELETE FROM outbox WHERE seq = ?", vec![int(*seq)])?
            }
            Change::Delete(RowKey::Meta | RowKey::Config) => {
                unreachable!("the meta and config rows are never deleted")
            }
        };
    }
    Ok(())
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
struct ConfigSql {
    per_buyer_max: u32,
    quantity_max: u32,
    hold_ttl_ms: u64,
    idem_window_ms: u64,
    opens_at_ms: Option<u64>,
    closes_at_ms: Option<u64>,
    reservations_max: u32,
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

/// A product loaded from storage.
pub struct Loaded {
    pub product_id: String,
    pub gate: Gate,
}

fn corrupt(what: impl std::fmt::Display) -> worker::Error {
    worker::Error::RustError(format!("stored gate is corrupt: {what}"))
}

/// Loads the product, or `None` if this object never held one.
pub fn load(sql: &SqlStorage) -> worker::Result<Option<Loaded>> {
    let exists: Vec<serde_json::Value> = sql
        .exec(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'product'",
            None,
        )?
        .to_array()?;
    if exists.is_empty() {
        return Ok(None);
    }
    let products: Vec<ProductSql> = sql
        .exec("SELECT product_id FROM product", None)?
        .to_array()?;
    let Some(product) = products.into_iter().next() else {
        return Ok(None);
    };
    let mut rows = Vec::new();
    let metas: Vec<MetaSql> = sql.exec("SELECT * FROM meta", None)?.to_array()?;
    for m in metas {
        rows.push(Row::Meta(MetaRow {
            stock_total: m.stock_total,
            mode: Mode::parse(&m.mode).ok_or_else(|| corrupt("mode"))?,
            next_reservation_id: m.next_reservation_id,
            outbox_acked_seq: m.outbox_acked_seq,
            outbox_attempts: m.outbox_attempts,
            outbox_retry_at_ms: m.outbox_retry_at_ms,
        }));
    }
    let configs: Vec<ConfigSql> = sql.exec("SELECT * FROM config", None)?.to_array()?;
    for c in configs {
        rows.push(Row::Config(Config {
            per_buyer_max: c.per_buyer_max,
            quantity_max: c.quantity_max,
            hold_ttl_ms: c.hold_ttl_ms,
            idem_window_ms: c.idem_window_ms,
            opens_at_ms: c.opens_at_ms,
            closes_at_ms: c.closes_at_ms,
            reservations_max: c.reservations_max,
        }));
    }
    let reservations: Vec<ReservationSql> =
        sql.exec("SELECT * FROM reservations", None)?.to_array()?;
    for r in reservations {
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
    let outbox: Vec<OutboxSql> = sql.exec("SELECT * FROM outbox", None)?.to_array()?;
    for e in outbox {
        rows.push(Row::Outbox(OutboxEntry {
            seq: e.seq,
            reservation_id: e.reservation_id,
            buyer: e.buyer.into(),
            quantity: e.quantity,
            payment_ref: e.payment_ref.into(),
            confirmed_at_ms: e.confirmed_at_ms,
        }));
    }
    let gate = Gate::restore(rows).map_err(|e| corrupt(format!("{e:?}")))?;
    Ok(Some(Loaded {
        product_id: product.product_id,
        gate,
    }))
}
