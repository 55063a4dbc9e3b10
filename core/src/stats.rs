//! What the gate reports about itself.

use crate::config::SaleState;
use crate::outcome::{CancelKind, ConfirmKind, ReserveKind};

/// Outcome counts since this gate was created or restored. They are
/// telemetry, not state: they are not persisted, because a refusal must not
/// cost a storage write on the hot path of a sold-out product. Each array is
/// indexed by its outcome's kind, so a slot exists for every code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    reserve: [u64; ReserveKind::ALL.len()],
    confirm: [u64; ConfirmKind::ALL.len()],
    cancel: [u64; CancelKind::ALL.len()],
    pub holds_expired: u64,
    /// Tickets of buyers who had joined the waiting room before, reported
    /// by the edges and not counted again.
    pub rejoins_uncounted: u64,
    /// Joins the edges refused for want of a valid proof of work, and
    /// those they sent to the infinite queue (`pow.rs`).
    pub pow_refused: u64,
    pub pow_infinite_queued: u64,
}

impl Counters {
    pub(crate) fn count_reserve(&mut self, kind: ReserveKind) {
        self.reserve[kind as usize] += 1;
    }

    pub(crate) fn count_confirm(&mut self, kind: ConfirmKind) {
        self.confirm[kind as usize] += 1;
    }

    pub(crate) fn count_cancel(&mut self, kind: CancelKind) {
        self.cancel[kind as usize] += 1;
    }

    pub fn reserve(&self, kind: ReserveKind) -> u64 {
        self.reserve[kind as usize]
    }

    pub fn confirm(&self, kind: ConfirmKind) -> u64 {
        self.confirm[kind as usize]
    }

    pub fn cancel(&self, kind: CancelKind) -> u64 {
        self.cancel[kind as usize]
    }

    /// What was counted since `earlier`, a copy of these counters taken
    /// before (each count only grows, so no slot underflows).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut d = self.clone();
        d.each_mut(earlier, |a, b| *a -= b);
        d
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Counters) {
        self.each_mut(other, |a, b| *a += b);
    }

    /// Whether nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    /// `f(slot, other's slot)` over every slot: one list of the fields, so
    /// that a new counter cannot be left out of `since` or `add`.
    fn each_mut(&mut self, other: &Counters, f: impl Fn(&mut u64, u64)) {
        let Counters {
            reserve,
            confirm,
            cancel,
            holds_expired,
            rejoins_uncounted,
            pow_refused,
            pow_infinite_queued,
        } = self;
        for (a, &b) in reserve.iter_mut().zip(&other.reserve) {
            f(a, b);
        }
        for (a, &b) in confirm.iter_mut().zip(&other.confirm) {
            f(a, b);
        }
        for (a, &b) in cancel.iter_mut().zip(&other.cancel) {
            f(a, b);
        }
        f(holds_expired, other.holds_expired);
        f(rejoins_uncounted, other.rejoins_uncounted);
        f(pow_refused, other.pow_refused);
        f(pow_infinite_queued, other.pow_infinite_queued);
    }

    /// `(operation, outcome code, count)` for every outcome, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> + '_ {
        let reserve = ReserveKind::ALL
            .iter()
            .map(|&k| ("reserve", k.code(), self.reserve(k)));
        let confirm = ConfirmKind::ALL
            .iter()
            .map(|&k| ("confirm", k.code(), self.confirm(k)));
        let cancel = CancelKind::ALL
            .iter()
            .map(|&k| ("cancel", k.code(), self.cancel(k)));
        reserve.chain(confirm).chain(cancel)
    }
}

/// The few numbers a viewer of the sale sees: cheap to read (no counters
/// are copied), so the object reads them after every batch for its live
/// updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub sale_state: SaleState,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    pub sale_state: SaleState,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub live_holds: u32,
    pub tombstones: u32,
    /// Buyers who hold or bought at least one unit.
    pub buyers: u64,
    pub outbox_backlog: u64,
    /// Net units in the outbox: ordered minus voided, not yet at the origin.
    pub outbox_backlog_units: i64,
    pub outbox_acked_seq: u64,
    pub outbox_attempts: u32,
    pub outbox_retry_at_ms: u64,
    pub next_deadline_ms: Option<u64>,
    /// The waiting room: tickets reported by the edges, and admitted.
    pub queue_reported: u64,
    pub queue_admitted: u64,
    pub queue_advancing: bool,
    /// The proof of work: the setting, the level asked now, and the join
    /// rate it follows.
    pub pow: crate::pow::Pow,
    pub pow_level: Option<u8>,
    pub joins_per_s: u64,
    pub counters: Counters,
    /// At home of a product of several stock shards, the escrow.
    pub escrow: Option<crate::escrow::EscrowStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_slot() {
        let mut c = Counters::default();
        for (i, &k) in ReserveKind::ALL.iter().enumerate() {
            assert_eq!(k as usize, i);
            for _ in 0..=i {
                c.count_reserve(k);
            }
        }
        for (i, &k) in ReserveKind::ALL.iter().enumerate() {
            assert_eq!(c.reserve(k), i as u64 + 1, "{}", k.code());
        }
        let codes: Vec<_> = c.iter().filter(|e| e.0 == "reserve").map(|e| e.1).collect();
        let want: Vec<_> = ReserveKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(codes, want);
    }
}
