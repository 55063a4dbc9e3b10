//! The persistence contract: the rows a gate is stored as.
//!
//! Every call records which rows it touched; `Gate::poll_changes` renders
//! them as puts and deletes, so the shell writes O(1) rows per request and
//! never the whole state. `Gate::restore` rebuilds an identical gate from the
//! rows. The rows are the Durable Object's SQLite schema (docs/storage.md,
//! "The rows"):
//!
//! | row            | key                  | table                     |
//! |----------------|----------------------|---------------------------|
//! | `Meta`         | the single meta row  | `meta` (one row, id = 1)  |
//! | `Config`       | the single config row| `config` (one row, id = 1)|
//! | `Admission`    | the waiting room row | `admission` (one row)     |
//! | `Escrow`       | the escrow row       | `escrow` (one row; absent for a product of one shard) |
//! | `Reservation`  | reservation id       | `reservations`            |
//! | `Outbox`       | outbox sequence      | `outbox`                  |
//!
//! `available`, `held`, `sold`, the per-buyer usage and every index are not
//! stored: restore derives them from the reservations, and checks that the
//! stored stock total can carry them.

use crate::admission::Admission;
use crate::config::{Config, Mode};
use crate::outbox::OutboxEntry;
use crate::outcome::ReservationId;
use crate::store::HoldState;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowKey {
    Meta,
    Config,
    Admission,
    Escrow,
    Reservation(ReservationId),
    Outbox(u64),
}

/// The key of a row that can be deleted. The meta and config rows live as
/// long as the product, so a delete of them cannot even be written down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ItemKey {
    Reservation(ReservationId),
    Outbox(u64),
}

impl From<ItemKey> for RowKey {
    fn from(k: ItemKey) -> RowKey {
        match k {
            ItemKey::Reservation(id) => RowKey::Reservation(id),
            ItemKey::Outbox(seq) => RowKey::Outbox(seq),
        }
    }
}

/// Counters and cursors that cannot be derived from the other rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaRow {
    /// The gate's `escrowed` units (its `meta.stock_total` column, named
    /// before a shard kept an escrow).
    pub escrowed: u64,
    pub mode: Mode,
    /// Ids are never reused, even after their records age out.
    pub next_reservation_id: ReservationId,
    pub outbox_acked_seq: u64,
    pub outbox_attempts: u32,
    pub outbox_retry_at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationRow {
    pub id: ReservationId,
    pub buyer: String,
    pub idem_key: String,
    pub quantity: u32,
    pub state: HoldState,
    pub expires_at_ms: u64,
    /// Set exactly when `state` is `Confirmed` or `Voided`.
    pub payment_ref: Option<String>,
    pub confirmed_at_ms: Option<u64>,
    pub outbox_seq: Option<u64>,
    /// Set exactly when `state` is `Voided`.
    pub voided_at_ms: Option<u64>,
    pub void_seq: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Row {
    Meta(MetaRow),
    Config(Config),
    Admission(Admission),
    /// Home's pool or a shard's ledger (`escrow.rs`); boxed, as the
    /// largest row by far and the rarest.
    Escrow(Box<crate::sharded::Escrow>),
    Reservation(ReservationRow),
    Outbox(OutboxEntry),
}

impl Row {
    pub fn key(&self) -> RowKey {
        match self {
            Row::Meta(_) => RowKey::Meta,
            Row::Config(_) => RowKey::Config,
            Row::Admission(_) => RowKey::Admission,
            Row::Escrow(_) => RowKey::Escrow,
            Row::Reservation(r) => RowKey::Reservation(r.id),
            Row::Outbox(e) => RowKey::Outbox(e.seq),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Put(Row),
    Delete(ItemKey),
}

impl Change {
    /// The key of the row this change writes or deletes.
    pub fn key(&self) -> RowKey {
        match self {
            Change::Put(row) => row.key(),
            Change::Delete(k) => (*k).into(),
        }
    }
}

/// Why a set of rows does not describe a gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreError {
    MissingMeta,
    MissingConfig,
    MissingAdmission,
    /// The waiting room's counts contradict themselves.
    BadAdmission(&'static str),
    InvalidConfig(crate::config::ConfigError),
    /// Held plus sold units exceed the stored total: I1 would break.
    Oversold {
        committed: u64,
        escrowed: u64,
    },
    /// A reservation row that contradicts itself or the meta row.
    BadReservation(ReservationId, &'static str),
    /// The escrow row contradicts the stock the gate keeps.
    BadEscrow(&'static str),
    /// Outbox sequences must run densely from the acked cursor.
    OutboxGap {
        expected: u64,
        found: u64,
    },
    DuplicateKey(RowKey),
}
