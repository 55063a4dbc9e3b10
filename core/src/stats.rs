//! What the gate reports about itself.

use crate::config::Phase;
use crate::outcome::{CancelOutcome, ConfirmOutcome, ReserveOutcome};

/// Outcome counts since this gate was created or restored. They are
/// telemetry, not state: they are not persisted, because a refusal must not
/// cost a storage write on the hot path of a sold-out product.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    reserve: [u64; RESERVE_CODES.len()],
    confirm: [u64; CONFIRM_CODES.len()],
    cancel: [u64; CANCEL_CODES.len()],
    pub holds_expired: u64,
}

pub(crate) const RESERVE_CODES: [&str; 12] = [
    "reserved",
    "replayed",
    "idempotency_conflict",
    "sold_out",
    "insufficient_stock",
    "buyer_limit",
    "not_open",
    "closed",
    "paused",
    "invalid_quantity",
    "invalid_input",
    "overloaded",
];
pub(crate) const CONFIRM_CODES: [&str; 5] = [
    "confirmed",
    "expired",
    "cancelled",
    "unknown_reservation",
    "invalid_input",
];
pub(crate) const CANCEL_CODES: [&str; 4] = [
    "cancelled",
    "already_confirmed",
    "already_expired",
    "unknown_reservation",
];

impl Counters {
    pub(crate) fn count_reserve(&mut self, o: &ReserveOutcome) {
        debug_assert_eq!(RESERVE_CODES[o.slot()], o.code());
        self.reserve[o.slot()] += 1;
    }

    pub(crate) fn count_confirm(&mut self, o: &ConfirmOutcome) {
        debug_assert_eq!(CONFIRM_CODES[o.slot()], o.code());
        self.confirm[o.slot()] += 1;
    }

    pub(crate) fn count_cancel(&mut self, o: &CancelOutcome) {
        debug_assert_eq!(CANCEL_CODES[o.slot()], o.code());
        self.cancel[o.slot()] += 1;
    }

    /// `(operation, outcome code, count)` for every outcome, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> + '_ {
        let reserve = RESERVE_CODES
            .iter()
            .zip(self.reserve)
            .map(|(c, n)| ("reserve", *c, n));
        let confirm = CONFIRM_CODES
            .iter()
            .zip(self.confirm)
            .map(|(c, n)| ("confirm", *c, n));
        let cancel = CANCEL_CODES
            .iter()
            .zip(self.cancel)
            .map(|(c, n)| ("cancel", *c, n));
        reserve.chain(confirm).chain(cancel)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    pub phase: Phase,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub live_holds: u32,
    pub tombstones: u32,
    /// Buyers who hold or bought at least one unit.
    pub buyers: u64,
    pub outbox_backlog: u64,
    /// Units in the outbox: sold at the gate, not yet stored at the origin.
    pub outbox_backlog_units: u64,
    pub outbox_acked_seq: u64,
    pub outbox_attempts: u32,
    pub outbox_retry_at_ms: u64,
    pub next_deadline_ms: Option<u64>,
    pub counters: Counters,
}
