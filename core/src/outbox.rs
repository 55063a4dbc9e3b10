//! The transactional outbox: the changes the origin must mirror, waiting to
//! reach it, in the order the gate made them: confirmed orders, voids, and
//! stock totals.
//!
//! An entry is made in the same call that makes the change, so the shell
//! writes both in one storage transaction. Delivery is at least once: an
//! entry leaves the outbox only when the origin acknowledged it, and the
//! origin applies each event idempotently (orders by reservation id, voids
//! once per order, stock totals only forward by sequence) (I2). There is no
//! retry limit, because dropping an entry would lose an order; instead the
//! backoff is capped and the attempt count is visible in the stats, for
//! alerting.

use std::collections::VecDeque;

use crate::config::limits;
use crate::mix::splitmix64;
use crate::outcome::{AckOutcome, ReservationId};

/// One change on its way to the origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboxEvent {
    /// The stock total changed (or the product was created with it).
    Stock { stock_total: u64, at_ms: u64 },
    /// A reservation was confirmed: an order.
    Order {
        reservation_id: ReservationId,
        buyer: Box<str>,
        quantity: u32,
        payment_ref: Box<str>,
        confirmed_at_ms: u64,
    },
    /// A confirmed order was voided; its units are back in stock.
    Void {
        reservation_id: ReservationId,
        quantity: u32,
        voided_at_ms: u64,
    },
}

impl OutboxEvent {
    /// The units this event adds to (orders) or takes from (voids) what
    /// the origin counts as sold.
    pub fn sold_units(&self) -> i64 {
        match self {
            OutboxEvent::Stock { .. } => 0,
            OutboxEvent::Order { quantity, .. } => i64::from(*quantity),
            OutboxEvent::Void { quantity, .. } => -i64::from(*quantity),
        }
    }

    /// The reservation an order or void is about.
    pub fn reservation_id(&self) -> Option<ReservationId> {
        match self {
            OutboxEvent::Stock { .. } => None,
            OutboxEvent::Order { reservation_id, .. }
            | OutboxEvent::Void { reservation_id, .. } => Some(*reservation_id),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxEntry {
    pub seq: u64,
    pub event: OutboxEvent,
}

/// A batch handed to the shell and not yet acked or nacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    up_to_seq: u64,
    until_ms: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Outbox {
    /// Entry `i` has sequence `acked_seq + 1 + i`.
    entries: VecDeque<OutboxEntry>,
    pub acked_seq: u64,
    /// Failed deliveries since the last success.
    pub attempts: u32,
    /// No batch is handed out before this instant.
    pub retry_at_ms: u64,
    /// Not persisted: after a restart the batch is simply handed out again,
    /// which at-least-once delivery allows.
    lease: Option<Lease>,
}

/// The delay before retry number `attempt` (1-based): exponential from
/// `OUTBOX_BACKOFF_BASE_MS`, capped at `OUTBOX_BACKOFF_CAP_MS`, with "equal
/// jitter" in `[delay / 2, delay]` drawn from the caller's seed, so that many
/// products failing together do not retry in lockstep.
pub fn backoff_ms(attempt: u32, jitter_seed: u64) -> u64 {
    let doublings = attempt.saturating_sub(1).min(20);
    let delay = (limits::OUTBOX_BACKOFF_BASE_MS << doublings).min(limits::OUTBOX_BACKOFF_CAP_MS);
    let half = delay / 2;
    let mut state = jitter_seed;
    half + splitmix64(&mut state) % (delay - half + 1)
}

impl Outbox {
    pub fn restored(acked_seq: u64, attempts: u32, retry_at_ms: u64) -> Outbox {
        Outbox {
            entries: VecDeque::new(),
            acked_seq,
            attempts,
            retry_at_ms,
            lease: None,
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.acked_seq + self.entries.len() as u64 + 1
    }

    pub fn backlog(&self) -> usize {
        self.entries.len()
    }

    /// The net units waiting: ordered minus voided, as the origin will
    /// count them once the backlog arrives. O(backlog); for stats, not
    /// decisions.
    pub fn backlog_units(&self) -> i64 {
        self.entries.iter().map(|e| e.event.sold_units()).sum()
    }

    /// Appends an event and returns its sequence number.
    pub fn push(&mut self, event: OutboxEvent) -> u64 {
        let seq = self.next_seq();
        self.entries.push_back(OutboxEntry { seq, event });
        seq
    }

    /// Appends a stored entry on restore; sequences must be dense.
    pub fn push_restored(&mut self, entry: OutboxEntry) -> bool {
        if entry.seq != self.next_seq() {
            return false;
        }
        self.entries.push_back(entry);
        true
    }

    pub fn get(&self, seq: u64) -> Option<&OutboxEntry> {
        let i = seq.checked_sub(self.acked_seq + 1)?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    pub fn iter(&self) -> impl Iterator<Item = &OutboxEntry> {
        self.entries.iter()
    }

    /// When the outbox next wants the shell's attention.
    pub fn deadline(&self) -> Option<u64> {
        if self.entries.is_empty() {
            return None;
        }
        Some(match self.lease {
            Some(lease) => lease.until_ms,
            None => self.retry_at_ms,
        })
    }

    /// The next batch of at most `batch_size_max` entries (the caller's
    /// limit: the origin's batch size), or nothing while a batch is out or a
    /// backoff runs.
    pub fn poll(&mut self, now_ms: u64, batch_size_max: usize) -> Vec<OutboxEntry> {
        if let Some(lease) = self.lease {
            if now_ms < lease.until_ms {
                return Vec::new();
            }
            // The shell that took the batch never answered; hand it out again.
            self.lease = None;
        }
        if self.entries.is_empty() || now_ms < self.retry_at_ms {
            return Vec::new();
        }
        let n = batch_size_max.max(1).min(self.entries.len());
        self.lease = Some(Lease {
            up_to_seq: self.acked_seq + n as u64,
            until_ms: now_ms.saturating_add(limits::OUTBOX_LEASE_MS),
        });
        self.entries.range(..n).cloned().collect()
    }

    /// Removes every entry up to `up_to_seq`. Returns the outcome and the
    /// sequences removed, for the shell to delete.
    pub fn ack(&mut self, up_to_seq: u64) -> (AckOutcome, std::ops::Range<u64>) {
        let first = self.acked_seq + 1;
        if up_to_seq < first {
            return (AckOutcome::Stale, 0..0);
        }
        match self.lease {
            Some(lease) if up_to_seq <= lease.up_to_seq => {}
            _ => return (AckOutcome::NotHandedOut, 0..0),
        }
        let n = up_to_seq - self.acked_seq;
        self.entries.drain(..n as usize);
        self.acked_seq = up_to_seq;
        self.attempts = 0;
        self.retry_at_ms = 0;
        self.lease = None;
        (AckOutcome::Acked { entries: n }, first..up_to_seq + 1)
    }

    /// Records a failed delivery of the batch that is out. Returns false, and
    /// changes nothing, if no batch is out.
    pub fn nack(&mut self, now_ms: u64, jitter_seed: u64) -> bool {
        if self.lease.take().is_none() {
            return false;
        }
        self.attempts = self.attempts.saturating_add(1);
        self.retry_at_ms = now_ms.saturating_add(backoff_ms(self.attempts, jitter_seed));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_with_bounded_jitter() {
        for seed in 0..200u64 {
            for attempt in 1..40u32 {
                let full = (limits::OUTBOX_BACKOFF_BASE_MS << (attempt - 1).min(20))
                    .min(limits::OUTBOX_BACKOFF_CAP_MS);
                let d = backoff_ms(attempt, seed);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt} seed {seed}: {d} not in [{}, {full}]",
                    full / 2
                );
            }
        }
        assert!(backoff_ms(u32::MAX, 7) <= limits::OUTBOX_BACKOFF_CAP_MS);
    }
}
