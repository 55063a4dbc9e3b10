//! The gate of one product: every decision about its stock.
//!
//! Each `handle`-style entry point takes `now_ms` and first settles every
//! timeout that is due, so that no decision ever counts a hold past its
//! expiry as held. Then it validates everything that can refuse the request,
//! returning an outcome value; past that point the operation must succeed,
//! and it mutates state and marks the rows it touched.

use std::collections::BTreeSet;

use hashbrown::HashMap;

use crate::buyers::Buyers;
use crate::config::{limits, Config, ConfigError, Mode, Phase};
use crate::outbox::{Outbox, OutboxEntry};
use crate::outcome::{
    AckOutcome, AdminOutcome, CancelOutcome, ConfirmOutcome, Confirmation, InvalidInput,
    ReservationId, ReserveOutcome,
};
use crate::rows::{Change, MetaRow, ReservationRow, RestoreError, Row, RowKey};
use crate::stats::{Counters, Stats};
use crate::store::{HoldState, Paid, Reservation, Store};

/// Rows touched since the shell last took the changes.
#[derive(Default)]
struct Dirty {
    meta: bool,
    config: bool,
    keys: Vec<RowKey>,
}

pub struct Gate {
    config: Config,
    mode: Mode,
    stock_total: u64,
    available: u64,
    held: u64,
    sold: u64,
    next_id: ReservationId,
    live_holds: u32,
    /// Cancelled or expired records kept for idempotent replay.
    tombstones: u32,
    store: Store,
    /// `(expires_at_ms, id)` of every live hold, so expiry costs
    /// O(expired × log n) and never scans the holds.
    expiry: BTreeSet<(u64, ReservationId)>,
    /// `(expires_at_ms + idem_window_ms, id)` of every tombstone.
    purge: BTreeSet<(u64, ReservationId)>,
    /// Every buyer some record refers to, with their units.
    buyers: Buyers,
    outbox: Outbox,
    dirty: Dirty,
    counters: Counters,
}

/// A reservation as a reader sees it at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationView {
    pub id: ReservationId,
    pub buyer: String,
    pub quantity: u32,
    /// A hold past its expiry reads as `Expired` even before the timeout is
    /// handled, because a confirm would be refused.
    pub state: HoldState,
    pub expires_at_ms: u64,
    pub confirmation: Option<Confirmation>,
}

/// Why a gate could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupError {
    Config(ConfigError),
    StockTooLarge,
}

fn field_ok(s: &str, bytes_max: usize) -> bool {
    !s.is_empty() && s.len() <= bytes_max
}

impl Gate {
    /// A new product with `stock_total` units, all available.
    pub fn new(config: Config, stock_total: u64) -> Result<Gate, SetupError> {
        config.validate().map_err(SetupError::Config)?;
        if stock_total > limits::STOCK_UNITS_MAX {
            return Err(SetupError::StockTooLarge);
        }
        let mut gate = Gate::empty(config, Mode::Active, stock_total, 1, Outbox::default());
        gate.available = stock_total;
        gate.dirty.meta = true;
        gate.dirty.config = true;
        gate.assert_stock();
        Ok(gate)
    }

    fn empty(
        config: Config,
        mode: Mode,
        stock_total: u64,
        next_id: ReservationId,
        outbox: Outbox,
    ) -> Gate {
        Gate {
            config,
            mode,
            stock_total,
            available: 0,
            held: 0,
            sold: 0,
            next_id,
            live_holds: 0,
            tombstones: 0,
            store: Store::new(next_id),
            expiry: BTreeSet::new(),
            purge: BTreeSet::new(),
            buyers: Buyers::default(),
            outbox,
            dirty: Dirty::default(),
            counters: Counters::default(),
        }
    }

    /// I1, checked wherever units move. A failure is a bug, not an outcome.
    fn assert_stock(&self) {
        assert!(
            self.available + self.held + self.sold == self.stock_total,
            "I1 broken: available {} + held {} + sold {} != total {}",
            self.available,
            self.held,
            self.sold,
            self.stock_total
        );
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn stock_total(&self) -> u64 {
        self.stock_total
    }

    pub fn phase(&self, now_ms: u64) -> Phase {
        self.config.phase(self.mode, now_ms)
    }

    // ----- buyer operations -------------------------------------------------

    /// Asks for `quantity` units for `buyer`, under the buyer's idempotency
    /// key. A refusal changes nothing and is not remembered: retrying it can
    /// never take stock twice, and it is decided afresh.
    pub fn reserve(
        &mut self,
        now_ms: u64,
        buyer: &str,
        idem_key: &str,
        quantity: u32,
    ) -> ReserveOutcome {
        self.settle(now_ms);
        let outcome = self.reserve_decide(now_ms, buyer, idem_key, quantity);
        self.counters.count_reserve(&outcome);
        outcome
    }

    fn reserve_decide(
        &mut self,
        now_ms: u64,
        buyer: &str,
        idem_key: &str,
        quantity: u32,
    ) -> ReserveOutcome {
        if !field_ok(buyer, limits::BUYER_ID_BYTES_MAX) {
            return ReserveOutcome::InvalidInput(InvalidInput::BuyerId);
        }
        if !field_ok(idem_key, limits::IDEM_KEY_BYTES_MAX) {
            return ReserveOutcome::InvalidInput(InvalidInput::IdempotencyKey);
        }
        // The key is checked before anything else about the request, so that
        // a retry gets its first answer even after the sale closed. A buyer
        // with no slot has no records, so no key to replay.
        let slot = self.buyers.find(buyer);
        if let Some(id) = slot.and_then(|slot| self.store.find_idem(slot, idem_key)) {
            let r = self.store.get(id).expect("indexed record exists");
            return if r.quantity == quantity {
                ReserveOutcome::Replayed {
                    reservation_id: id,
                    expires_at_ms: r.expires_at_ms,
                    quantity,
                }
            } else {
                ReserveOutcome::IdempotencyConflict { reservation_id: id }
            };
        }
        if quantity == 0 || quantity > self.config.quantity_max {
            return ReserveOutcome::InvalidQuantity {
                quantity_max: self.config.quantity_max,
            };
        }
        match self.phase(now_ms) {
            Phase::Open => {}
            Phase::Scheduled => {
                return ReserveOutcome::NotOpen {
                    opens_at_ms: self.config.opens_at_ms.unwrap_or(0),
                }
            }
            Phase::Paused => return ReserveOutcome::Paused,
            Phase::Closed => return ReserveOutcome::Closed,
        }
        if self.live_holds + self.tombstones >= self.config.reservations_max {
            return ReserveOutcome::Overloaded {
                retry_after_ms: self.record_frees_at(now_ms),
            };
        }
        if self.available == 0 {
            return ReserveOutcome::SoldOut;
        }
        let used = slot.map_or(0, |slot| self.buyers.units(slot));
        if u64::from(used) + u64::from(quantity) > u64::from(self.config.per_buyer_max) {
            return ReserveOutcome::BuyerLimitReached {
                remaining: self.config.per_buyer_max.saturating_sub(used),
            };
        }
        if u64::from(quantity) > self.available {
            return ReserveOutcome::InsufficientStock {
                available: self.available,
            };
        }

        // Every refusal is above this line. From here the reserve must succeed.
        let id = self.next_id;
        self.next_id += 1;
        let expires_at_ms = now_ms.saturating_add(self.config.hold_ttl_ms);
        let buyer = self.buyers.acquire(buyer, Some(slot));
        self.buyers.add_units(buyer, quantity);
        self.store.insert(
            id,
            Reservation {
                buyer,
                idem_key: idem_key.into(),
                expires_at_ms,
                quantity,
                state: HoldState::Held,
            },
            None,
        );
        self.expiry.insert((expires_at_ms, id));
        self.available -= u64::from(quantity);
        self.held += u64::from(quantity);
        self.live_holds += 1;
        self.assert_stock();
        self.dirty.meta = true;
        self.dirty.keys.push(RowKey::Reservation(id));
        ReserveOutcome::Reserved {
            reservation_id: id,
            expires_at_ms,
            quantity,
        }
    }

    /// How long until a reservation record can next age out.
    fn record_frees_at(&self, now_ms: u64) -> u64 {
        let purge = self.purge.first().map(|&(t, _)| t);
        let hold = self
            .expiry
            .first()
            .map(|&(t, _)| t.saturating_add(self.config.idem_window_ms));
        let at = match (purge, hold) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(now_ms),
        };
        at.saturating_sub(now_ms).max(1)
    }

    /// Pays for a held reservation. Only the buyer who holds it may confirm.
    pub fn confirm(
        &mut self,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
        payment_ref: &str,
    ) -> ConfirmOutcome {
        self.settle(now_ms);
        let outcome = self.confirm_decide(now_ms, id, buyer, payment_ref);
        self.counters.count_confirm(&outcome);
        outcome
    }

    fn confirm_decide(
        &mut self,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
        payment_ref: &str,
    ) -> ConfirmOutcome {
        if !field_ok(payment_ref, limits::PAYMENT_REF_BYTES_MAX) {
            return ConfirmOutcome::InvalidInput(InvalidInput::PaymentRef);
        }
        let Some(r) = self.owned(id, buyer) else {
            return ConfirmOutcome::Unknown;
        };
        match r.state {
            HoldState::Held => {}
            HoldState::Confirmed => return ConfirmOutcome::Confirmed(self.confirmation(id)),
            HoldState::Cancelled => return ConfirmOutcome::Cancelled,
            HoldState::Expired => return ConfirmOutcome::Expired,
        }
        // Settling expired every hold due at `now_ms`, so this one is still
        // inside its TTL: a confirm at `expires_at_ms` was refused above.
        assert!(now_ms < r.expires_at_ms, "a due hold survived settle");

        // Every refusal is above this line. From here the confirm must succeed.
        let seq = self.outbox.next_seq();
        let r = self.store.get_mut(id).expect("checked above");
        let quantity = r.quantity;
        r.state = HoldState::Confirmed;
        let removed = self.expiry.remove(&(r.expires_at_ms, id));
        assert!(removed, "a live hold is in the expiry index");
        let entry = OutboxEntry {
            seq,
            reservation_id: id,
            buyer: buyer.into(),
            quantity,
            payment_ref: payment_ref.into(),
            confirmed_at_ms: now_ms,
        };
        let paid = Paid {
            payment_ref: payment_ref.into(),
            confirmed_at_ms: now_ms,
            outbox_seq: seq,
        };
        self.store.move_to_confirmed(id, paid);
        self.outbox.push(entry);
        self.held -= u64::from(quantity);
        self.sold += u64::from(quantity);
        self.live_holds -= 1;
        self.assert_stock();
        self.dirty.keys.push(RowKey::Reservation(id));
        self.dirty.keys.push(RowKey::Outbox(seq));
        ConfirmOutcome::Confirmed(self.confirmation(id))
    }

    /// The record `id` if `buyer` made it. Another buyer's record reads as
    /// unknown, so ids reveal nothing.
    fn owned(&self, id: ReservationId, buyer: &str) -> Option<&Reservation> {
        self.store
            .get(id)
            .filter(|r| self.buyers.id(r.buyer) == buyer)
    }

    fn confirmation(&self, id: ReservationId) -> Confirmation {
        let r = self.store.get(id).expect("confirmed record exists");
        let paid = self.store.paid(id).expect("a confirmed record has payment");
        Confirmation {
            reservation_id: id,
            quantity: r.quantity,
            payment_ref: paid.payment_ref.to_string(),
            confirmed_at_ms: paid.confirmed_at_ms,
            outbox_seq: paid.outbox_seq,
        }
    }

    /// Gives a held reservation's units back. Only its buyer may cancel.
    pub fn cancel(&mut self, now_ms: u64, id: ReservationId, buyer: &str) -> CancelOutcome {
        self.settle(now_ms);
        let outcome = match self.owned(id, buyer) {
            None => CancelOutcome::Unknown,
            Some(r) => match r.state {
                HoldState::Confirmed => CancelOutcome::AlreadyConfirmed,
                HoldState::Expired => CancelOutcome::AlreadyExpired,
                HoldState::Cancelled => CancelOutcome::Cancelled {
                    quantity: r.quantity,
                },
                HoldState::Held => {
                    let quantity = r.quantity;
                    self.release(id, HoldState::Cancelled);
                    CancelOutcome::Cancelled { quantity }
                }
            },
        };
        self.counters.count_cancel(&outcome);
        outcome
    }

    /// Ends a live hold as cancelled or expired and returns its units.
    fn release(&mut self, id: ReservationId, to: HoldState) {
        debug_assert!(matches!(to, HoldState::Cancelled | HoldState::Expired));
        let window = self.config.idem_window_ms;
        let r = self.store.get_mut(id).expect("released record exists");
        assert_eq!(r.state, HoldState::Held, "I4: only a hold resolves");
        r.state = to;
        let (quantity, expires_at_ms, buyer) = (r.quantity, r.expires_at_ms, r.buyer);
        let removed = self.expiry.remove(&(expires_at_ms, id));
        assert!(removed, "a live hold is in the expiry index");
        self.purge
            .insert((expires_at_ms.saturating_add(window), id));
        self.buyers.remove_units(buyer, quantity);
        self.held -= u64::from(quantity);
        self.available += u64::from(quantity);
        self.live_holds -= 1;
        self.tombstones += 1;
        self.assert_stock();
        self.dirty.keys.push(RowKey::Reservation(id));
    }

    /// A reservation as it reads at `now_ms`, or `None` if it is unknown or
    /// aged out. Reading changes nothing.
    pub fn reservation(&self, id: ReservationId, now_ms: u64) -> Option<ReservationView> {
        let r = self.store.get(id)?;
        let state = if r.state == HoldState::Held && now_ms >= r.expires_at_ms {
            HoldState::Expired
        } else {
            r.state
        };
        Some(ReservationView {
            id,
            buyer: self.buyers.id(r.buyer).to_string(),
            quantity: r.quantity,
            state,
            expires_at_ms: r.expires_at_ms,
            confirmation: (r.state == HoldState::Confirmed).then(|| self.confirmation(id)),
        })
    }

    // ----- time -------------------------------------------------------------

    /// Expires every hold that is due and forgets every tombstone whose
    /// idempotency window ended. Returns how many holds expired. Costs
    /// O(due × log n). Calling it again with the same `now_ms` does nothing,
    /// so a retried alarm is harmless.
    pub fn handle_timeout(&mut self, now_ms: u64) -> u32 {
        self.settle(now_ms)
    }

    fn settle(&mut self, now_ms: u64) -> u32 {
        let mut expired = 0;
        while let Some(&(at, id)) = self.expiry.first() {
            if at > now_ms {
                break;
            }
            self.release(id, HoldState::Expired);
            expired += 1;
        }
        while let Some(&(at, id)) = self.purge.first() {
            if at > now_ms {
                break;
            }
            self.purge.pop_first();
            let r = self.store.remove(id);
            debug_assert!(matches!(r.state, HoldState::Cancelled | HoldState::Expired));
            self.buyers.release(r.buyer);
            self.tombstones -= 1;
            self.dirty.keys.push(RowKey::Reservation(id));
        }
        self.counters.holds_expired += u64::from(expired);
        expired
    }

    /// The next instant at which the gate has work: a hold to expire, a
    /// tombstone to forget, or an outbox batch to send. The shell sets its
    /// alarm to it. An instant in the past means "now".
    pub fn poll_timeout(&self) -> Option<u64> {
        [
            self.expiry.first().map(|&(t, _)| t),
            self.purge.first().map(|&(t, _)| t),
            self.outbox.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ----- outbox -----------------------------------------------------------

    /// The next batch of confirmations to forward, oldest first. Empty while
    /// a batch is out (until its lease lapses) or a backoff runs.
    pub fn poll_outbox(&mut self, now_ms: u64, batch_size_max: usize) -> Vec<OutboxEntry> {
        self.outbox.poll(now_ms, batch_size_max)
    }

    /// The origin stored every entry up to `up_to_seq`.
    pub fn ack_outbox(&mut self, up_to_seq: u64) -> AckOutcome {
        let (outcome, removed) = self.outbox.ack(up_to_seq);
        if let AckOutcome::Acked { .. } = outcome {
            self.dirty.meta = true;
            self.dirty.keys.extend(removed.map(RowKey::Outbox));
        }
        outcome
    }

    /// The batch that is out failed. It is handed out again after a capped
    /// exponential backoff whose jitter comes from `jitter_seed`.
    pub fn nack_outbox(&mut self, now_ms: u64, jitter_seed: u64) -> bool {
        let nacked = self.outbox.nack(now_ms, jitter_seed);
        if nacked {
            self.dirty.meta = true;
        }
        nacked
    }

    // ----- admin ------------------------------------------------------------

    pub fn add_units(&mut self, now_ms: u64, units: u64) -> AdminOutcome {
        self.settle(now_ms);
        match self.stock_total.checked_add(units) {
            Some(total) if total <= limits::STOCK_UNITS_MAX => {
                self.stock_total = total;
                self.available += units;
                self.assert_stock();
                self.dirty.meta = true;
                AdminOutcome::Done
            }
            _ => AdminOutcome::StockTooLarge,
        }
    }

    /// Sets the total. It may never fall below the units held or sold.
    pub fn set_total(&mut self, now_ms: u64, stock_total: u64) -> AdminOutcome {
        self.update(now_ms, None, Some(stock_total), None)
    }

    /// Replaces the rules. New rules apply to new requests; live holds keep
    /// their expiry. `per_buyer_max` may not drop below what a buyer already
    /// holds or bought, so that the per-buyer invariant keeps holding.
    pub fn configure(&mut self, now_ms: u64, config: Config) -> AdminOutcome {
        self.update(now_ms, Some(config), None, None)
    }

    pub fn pause(&mut self, now_ms: u64) -> AdminOutcome {
        self.update(now_ms, None, None, Some(Mode::Paused))
    }

    pub fn resume(&mut self, now_ms: u64) -> AdminOutcome {
        self.update(now_ms, None, None, Some(Mode::Active))
    }

    pub fn close(&mut self, now_ms: u64) -> AdminOutcome {
        self.update(now_ms, None, None, Some(Mode::Closed))
    }

    /// Applies an admin's changes to the rules, the total and the mode
    /// together: all of them, or none if any is refused.
    pub fn update(
        &mut self,
        now_ms: u64,
        config: Option<Config>,
        stock_total: Option<u64>,
        mode: Option<Mode>,
    ) -> AdminOutcome {
        self.settle(now_ms);
        if let Some(config) = &config {
            if let Err(e) = config.validate() {
                return AdminOutcome::InvalidConfig(e);
            }
            let most = self.buyers.units_max();
            if config.per_buyer_max < most {
                return AdminOutcome::BuyerAboveLimit { units: most };
            }
        }
        let committed = self.held + self.sold;
        match stock_total {
            Some(t) if t > limits::STOCK_UNITS_MAX => return AdminOutcome::StockTooLarge,
            Some(t) if t < committed => return AdminOutcome::BelowCommitted { committed },
            _ => {}
        }
        if self.mode == Mode::Closed && mode.is_some_and(|m| m != Mode::Closed) {
            return AdminOutcome::SaleClosed;
        }

        // Every refusal is above this line. From here the update must succeed.
        if let Some(config) = config {
            if config.idem_window_ms != self.config.idem_window_ms {
                // Purge deadlines derive from the window; recompute them so
                // that a restore, which derives them too, rebuilds the same
                // index.
                let window = config.idem_window_ms;
                self.purge = self
                    .store
                    .iter()
                    .filter(|(_, r)| matches!(r.state, HoldState::Cancelled | HoldState::Expired))
                    .map(|(id, r)| (r.expires_at_ms.saturating_add(window), id))
                    .collect();
            }
            self.config = config;
            self.dirty.config = true;
        }
        if let Some(t) = stock_total {
            self.stock_total = t;
            self.available = t - committed;
            self.assert_stock();
            self.dirty.meta = true;
        }
        if let Some(mode) = mode.filter(|&m| m != self.mode) {
            self.mode = mode;
            self.dirty.meta = true;
        }
        // A shorter window may already have ended for some tombstones.
        self.settle(now_ms);
        AdminOutcome::Done
    }

    // ----- observation ------------------------------------------------------

    pub fn stats(&self, now_ms: u64) -> Stats {
        Stats {
            phase: self.phase(now_ms),
            stock_total: self.stock_total,
            available: self.available,
            held: self.held,
            sold: self.sold,
            live_holds: self.live_holds,
            tombstones: self.tombstones,
            buyers: self.buyers.with_units(),
            outbox_backlog: self.outbox.backlog() as u64,
            outbox_backlog_units: self.outbox.backlog_units(),
            outbox_acked_seq: self.outbox.acked_seq,
            outbox_attempts: self.outbox.attempts,
            outbox_retry_at_ms: self.outbox.retry_at_ms,
            next_deadline_ms: self.poll_timeout(),
            counters: self.counters.clone(),
        }
    }

    // ----- persistence ------------------------------------------------------

    /// The rows to write for everything that changed since the last call, in
    /// key order, each once. Deleted rows come as `Change::Delete`.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let mut keys = std::mem::take(&mut self.dirty.keys);
        if keys.len() > 1 {
            keys.sort_unstable();
            keys.dedup();
        }
        let mut out = Vec::with_capacity(keys.len() + 2);
        if std::mem::take(&mut self.dirty.meta) {
            out.push(Change::Put(Row::Meta(self.meta_row())));
        }
        if std::mem::take(&mut self.dirty.config) {
            out.push(Change::Put(Row::Config(self.config.clone())));
        }
        for key in keys {
            let row = match key {
                RowKey::Reservation(id) => self.store.get(id).map(|_| self.reservation_row(id)),
                RowKey::Outbox(seq) => self.outbox.get(seq).cloned().map(Row::Outbox),
                RowKey::Meta | RowKey::Config => unreachable!("tracked by flags"),
            };
            out.push(match row {
                Some(row) => Change::Put(row),
                None => Change::Delete(key),
            });
        }
        out
    }

    /// True when changes are waiting to be taken.
    pub fn has_changes(&self) -> bool {
        self.dirty.meta || self.dirty.config || !self.dirty.keys.is_empty()
    }

    fn reservation_row(&self, id: ReservationId) -> Row {
        let r = self.store.get(id).expect("rendered record exists");
        let paid = self.store.paid(id);
        Row::Reservation(ReservationRow {
            id,
            buyer: self.buyers.id(r.buyer).to_string(),
            idem_key: r.idem_key.to_string(),
            quantity: r.quantity,
            state: r.state,
            expires_at_ms: r.expires_at_ms,
            payment_ref: paid.map(|p| p.payment_ref.to_string()),
            confirmed_at_ms: paid.map(|p| p.confirmed_at_ms),
            outbox_seq: paid.map(|p| p.outbox_seq),
        })
    }

    fn meta_row(&self) -> MetaRow {
        MetaRow {
            stock_total: self.stock_total,
            mode: self.mode,
            next_reservation_id: self.next_id,
            outbox_acked_seq: self.outbox.acked_seq,
            outbox_attempts: self.outbox.attempts,
            outbox_retry_at_ms: self.outbox.retry_at_ms,
        }
    }

    /// Every row of the gate, in key order: what storage holds once every
    /// change has been written.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = vec![Row::Meta(self.meta_row()), Row::Config(self.config.clone())];
        rows.extend(self.store.iter().map(|(id, _)| self.reservation_row(id)));
        rows.extend(self.outbox.iter().cloned().map(Row::Outbox));
        rows
    }

    /// Rebuilds a gate from its rows, checking that they are consistent.
    pub fn restore(rows: impl IntoIterator<Item = Row>) -> Result<Gate, RestoreError> {
        let mut meta = None;
        let mut config = None;
        let mut reservations = Vec::new();
        let mut outbox = Vec::new();
        for row in rows {
            match row {
                Row::Meta(m) => {
                    if meta.replace(m).is_some() {
                        return Err(RestoreError::DuplicateKey(RowKey::Meta));
                    }
                }
                Row::Config(c) => {
                    if config.replace(c).is_some() {
                        return Err(RestoreError::DuplicateKey(RowKey::Config));
                    }
                }
                Row::Reservation(r) => reservations.push(r),
                Row::Outbox(e) => outbox.push(e),
            }
        }
        let meta = meta.ok_or(RestoreError::MissingMeta)?;
        let config = config.ok_or(RestoreError::MissingConfig)?;
        config.validate().map_err(RestoreError::InvalidConfig)?;
        let window = config.idem_window_ms;
        let mut gate = Gate::empty(
            config,
            meta.mode,
            meta.stock_total,
            meta.next_reservation_id,
            Outbox::restored(
                meta.outbox_acked_seq,
                meta.outbox_attempts,
                meta.outbox_retry_at_ms,
            ),
        );
        reservations.sort_unstable_by_key(|r| r.id);
        let mut last_id = None;
        for row in reservations {
            let id = row.id;
            let bad = |why| Err(RestoreError::BadReservation(id, why));
            if last_id == Some(id) {
                return Err(RestoreError::DuplicateKey(RowKey::Reservation(id)));
            }
            last_id = Some(id);
            if id >= meta.next_reservation_id {
                return bad("id at or above next_reservation_id");
            }
            if row.quantity == 0 {
                return bad("zero quantity");
            }
            if !field_ok(&row.buyer, limits::BUYER_ID_BYTES_MAX)
                || !field_ok(&row.idem_key, limits::IDEM_KEY_BYTES_MAX)
            {
                return bad("buyer or key out of bounds");
            }
            let known = gate.buyers.find(&row.buyer);
            if known.is_some_and(|slot| gate.store.find_idem(slot, &row.idem_key).is_some()) {
                return bad("idempotency key used twice");
            }
            let confirmed = row.state == HoldState::Confirmed;
            let paid = match (row.payment_ref, row.confirmed_at_ms, row.outbox_seq) {
                (Some(payment_ref), Some(confirmed_at_ms), Some(outbox_seq)) if confirmed => {
                    Some(Paid {
                        payment_ref: payment_ref.into(),
                        confirmed_at_ms,
                        outbox_seq,
                    })
                }
                (None, None, None) if !confirmed => None,
                _ => return bad("payment fields disagree with state"),
            };
            let quantity = u64::from(row.quantity);
            let buyer = gate.buyers.acquire(&row.buyer, Some(known));
            if matches!(row.state, HoldState::Held | HoldState::Confirmed) {
                gate.buyers.add_units(buyer, row.quantity);
            }
            match row.state {
                HoldState::Held => {
                    gate.expiry.insert((row.expires_at_ms, id));
                    gate.held += quantity;
                    gate.live_holds += 1;
                }
                HoldState::Confirmed => gate.sold += quantity,
                HoldState::Cancelled | HoldState::Expired => {
                    gate.purge
                        .insert((row.expires_at_ms.saturating_add(window), id));
                    gate.tombstones += 1;
                }
            }
            gate.store.insert(
                id,
                Reservation {
                    buyer,
                    idem_key: row.idem_key.into(),
                    expires_at_ms: row.expires_at_ms,
                    quantity: row.quantity,
                    state: row.state,
                },
                paid,
            );
        }
        let committed = gate.held + gate.sold;
        if committed > gate.stock_total || gate.stock_total > limits::STOCK_UNITS_MAX {
            return Err(RestoreError::Oversold {
                committed,
                stock_total: gate.stock_total,
            });
        }
        gate.available = gate.stock_total - committed;
        outbox.sort_unstable_by_key(|e| e.seq);
        for entry in outbox {
            let expected = gate.outbox.next_seq();
            if entry.seq != expected {
                return Err(RestoreError::OutboxGap {
                    expected,
                    found: entry.seq,
                });
            }
            let matches = gate
                .store
                .paid(entry.reservation_id)
                .is_some_and(|p| p.outbox_seq == entry.seq);
            if !matches {
                return Err(RestoreError::BadReservation(
                    entry.reservation_id,
                    "outbox entry without its confirmed reservation",
                ));
            }
            gate.outbox.push(entry);
        }
        gate.assert_stock();
        Ok(gate)
    }

    /// Checks every invariant against the full state. O(n): for tests, the
    /// simulator and debugging, never a request path.
    pub fn audit(&self) -> Result<(), String> {
        if self.available + self.held + self.sold != self.stock_total {
            return Err(format!(
                "I1: available {} + held {} + sold {} != total {}",
                self.available, self.held, self.sold, self.stock_total
            ));
        }
        self.store.audit()?;
        self.buyers.audit()?;
        let (mut held, mut sold, mut live, mut tomb) = (0u64, 0u64, 0u32, 0u32);
        let mut expiry = BTreeSet::new();
        let mut purge = BTreeSet::new();
        let mut usage: HashMap<u32, (u32, u32)> = HashMap::new();
        for (id, r) in self.store.iter() {
            if id >= self.next_id {
                return Err(format!(
                    "reservation {id} at or above next id {}",
                    self.next_id
                ));
            }
            if self.store.paid(id).is_some() != (r.state == HoldState::Confirmed) {
                return Err(format!("reservation {id}: payment disagrees with state"));
            }
            let q = u64::from(r.quantity);
            match r.state {
                HoldState::Held => {
                    held += q;
                    live += 1;
                    expiry.insert((r.expires_at_ms, id));
                }
                HoldState::Confirmed => sold += q,
                HoldState::Cancelled | HoldState::Expired => {
                    tomb += 1;
                    purge.insert((r.expires_at_ms + self.config.idem_window_ms, id));
                }
            }
            let (units, refs) = usage.entry(r.buyer).or_default();
            *refs += 1;
            if matches!(r.state, HoldState::Held | HoldState::Confirmed) {
                *units += r.quantity;
            }
        }
        if (held, sold) != (self.held, self.sold) {
            return Err(format!(
                "held/sold counters {}/{} but records sum to {held}/{sold}",
                self.held, self.sold
            ));
        }
        if (live, tomb) != (self.live_holds, self.tombstones) {
            return Err("live hold or tombstone count disagrees with records".into());
        }
        if expiry != self.expiry {
            return Err("the expiry index does not match the live holds".into());
        }
        if purge != self.purge {
            return Err("the purge index does not match the tombstones".into());
        }
        let slots: Vec<_> = self.buyers.iter().collect();
        if slots.len() != usage.len()
            || slots
                .iter()
                .any(|&(slot, _, units, refs)| usage.get(&slot) != Some(&(units, refs)))
        {
            return Err("per-buyer units or references disagree with records".into());
        }
        if let Some((_, b, u, _)) = slots.iter().find(|s| s.2 > self.config.per_buyer_max) {
            return Err(format!(
                "buyer {b} has {u} units, above per_buyer_max {}",
                self.config.per_buyer_max
            ));
        }
        // Every confirmation not yet acked is in the outbox, and only those.
        let mut pending = 0;
        for (id, r) in self.store.iter() {
            if let Some(p) = self.store.paid(id) {
                if p.outbox_seq > self.outbox.acked_seq {
                    pending += 1;
                    match self.outbox.get(p.outbox_seq) {
                        Some(e) if e.reservation_id == id && e.quantity == r.quantity => {}
                        _ => return Err(format!("confirmation {id} is missing from the outbox")),
                    }
                }
            }
        }
        if pending != self.outbox.backlog() {
            return Err("the outbox holds entries with no confirmation".into());
        }
        Ok(())
    }
}
