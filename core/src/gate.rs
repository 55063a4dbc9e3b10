//! The gate of one product: every decision about its stock.
//!
//! Each entry point takes `now_ms` and first settles every timeout that is
//! due, so that no decision ever counts a hold past its expiry as held. Then
//! it validates everything that can refuse the request, returning an outcome
//! value; past that point the operation must succeed, and it mutates state
//! and marks the rows it touched. Persistence (`persist.rs`) and the full
//! audit (`audit.rs`) are further `impl Gate` blocks beside this one.
//!
//! Its methods follow quinn-proto's taxonomy:
//! - getters, which change nothing: `config`, `mode`, `escrowed`,
//!   `sale_state`, `reservation`, `admission`, `uptake`, `buyers_filter`, `levels`,
//!   `stats`, `rows`;
//! - inputs, `handle_*`: a buyer's `handle_reserve`, the payment backend's
//!   `handle_confirm`, a buyer's `handle_cancel`, the edge's
//!   `handle_arrivals`, the shell's `handle_lottery_key` (the randomness
//!   the core has none of), the origin's `handle_ack` and `handle_nack`,
//!   and the clock's `handle_timeout`;
//! - mutators, the admin's: `configure` (with its shortcuts `set_rules`,
//!   `set_total`, `set_mode`), `restock`, `void`;
//! - outputs, `poll_*`: when to be woken (`poll_timeout`), the outbox batch
//!   to deliver (`poll_outbox`), and the rows to write (`poll_changes`).

use std::collections::BTreeSet;

use crate::admission::{Admission, Arrivals, Room, Rules, Ticket};
use crate::archive::Archive;
use crate::bloom::Bloom;
use crate::buyers::{BuyerSlot, Buyers};
use crate::config::{limits, Config, ConfigPatch, Mode, SaleState};
use crate::escrow::limits::SOLD_OUT_LAG_MS;
use crate::history::Mark;
use crate::lottery::LotteryKey;
use crate::odds::Uptake;
use crate::outbox::{Outbox, OutboxEntry, OutboxEvent};
use crate::outcome::{
    AckOutcome, AdminRefusal, CancelOutcome, ConfirmOutcome, Confirmation, InvalidInput,
    ReservationId, ReserveOutcome, Voided,
};
use crate::pacing::Pacing;
use crate::rows::{ItemKey, ReservationRow};
use crate::sharded::Escrow;
use crate::stats::{Counters, Levels, Stats};
use crate::store::{HoldState, Paid, Reservation, Store, Void};

/// Rows touched since the shell last took the changes.
#[derive(Default)]
pub(crate) struct Dirty {
    pub meta: bool,
    pub config: bool,
    pub admission: bool,
    pub escrow: bool,
    pub keys: Vec<ItemKey>,
}

pub struct Gate {
    pub(crate) config: Config,
    pub(crate) mode: Mode,
    /// The units this gate keeps, `available + held + sold` (I1): the
    /// product's `stock_total` for a product of one object, a shard's
    /// escrow otherwise (`sharded.rs`). The product's total is
    /// `product_total`.
    pub(crate) escrowed: u64,
    pub(crate) available: u64,
    pub(crate) held: u64,
    pub(crate) sold: u64,
    pub(crate) next_id: ReservationId,
    pub(crate) live_holds: u32,
    /// Cancelled or expired records kept for idempotent replay.
    pub(crate) tombstones: u32,
    pub(crate) store: Store,
    /// `(expires_at_ms, id)` of every live hold, so expiry costs
    /// O(expired × log n) and never scans the holds.
    pub(crate) expiry: BTreeSet<(u64, ReservationId)>,
    /// `(expires_at_ms + idem_window_ms, id)` of every tombstone.
    pub(crate) purge: BTreeSet<(u64, ReservationId)>,
    /// Every buyer some record refers to, with their units.
    pub(crate) buyers: Buyers,
    pub(crate) outbox: Outbox,
    /// The waiting room: its progress (stored) and its joins (memory).
    pub(crate) room: Room,
    /// Reserve attempts per buyer in the current window (memory only).
    pub(crate) pacing: Pacing,
    pub(crate) dirty: Dirty,
    pub(crate) counters: Counters,
    /// Bounds the expiries and purges of one event (memory only).
    pub(crate) settling: Settling,
    /// Paid records leave memory once their rows are taken, and are read
    /// back from the archive (`archive.rs`). Set by the shell that stores
    /// the rows; off, every record stays in memory.
    pub(crate) archived: bool,
    /// Every buyer who confirmed an order (since the gate was built or
    /// restored): an archived gate reads storage for a buyer with no slot
    /// only if this may contain it. Memory only, of a fixed size.
    pub(crate) paid_buyers: Bloom,
    /// The buyers `paid_buyers` was sized for.
    pub(crate) paid_buyers_sized_for: u64,
    /// Which part of the product's stock this gate keeps (`sharded.rs`).
    pub(crate) escrow: Escrow,
}

/// The fewest buyers the paid buyers' filter is sized for, so that a
/// product created small and restocked keeps a useful filter.
const PAID_BUYERS_SIZED_MIN: u64 = 1_024;

/// How many buyers the paid buyers' filter of a product of `stock_total`
/// units is sized for: each buyer with units holds at least one, so the
/// stock bounds them.
pub(crate) fn paid_buyers_sized_for(stock_total: u64) -> u64 {
    stock_total.max(PAID_BUYERS_SIZED_MIN)
}

/// A buyer's paid records in storage, as read when the buyer has no slot.
struct Away {
    rows: Vec<ReservationRow>,
}

impl Away {
    /// Units the records hold (a voided order holds none).
    fn units(&self) -> u32 {
        self.rows
            .iter()
            .filter(|r| r.state == HoldState::Confirmed)
            .map(|r| r.quantity)
            .sum()
    }
}

/// What a decision reads of one record, wherever it lives: in memory, or
/// (paid and archived) in storage.
#[derive(Clone, Debug)]
struct Found {
    quantity: u32,
    state: HoldState,
    expires_at_ms: u64,
    paid: Option<Paid>,
}

impl Found {
    fn from_row(row: &ReservationRow) -> Option<Found> {
        // Every archived row was written by this gate and checked at load,
        // so a row that does not parse is a bug; it reads as unknown.
        let paid = paid_of(row);
        debug_assert!(paid.is_ok(), "archived row {} is corrupt", row.id);
        Some(Found {
            quantity: row.quantity,
            state: row.state,
            expires_at_ms: row.expires_at_ms,
            paid: paid.ok()?,
        })
    }

    fn confirmation(&self, id: ReservationId) -> Confirmation {
        let paid = self.paid.as_ref().expect("a paid record has its payment");
        Confirmation {
            reservation_id: id,
            quantity: self.quantity,
            payment_ref: paid.payment_ref.to_string(),
            confirmed_at_ms: paid.confirmed_at_ms,
            outbox_seq: paid.outbox_seq,
        }
    }
}

/// The payment (and void) a paid row carries, checked against its state.
pub(crate) fn paid_of(row: &ReservationRow) -> Result<Option<Paid>, &'static str> {
    let void = match (row.voided_at_ms, row.void_seq) {
        (Some(voided_at_ms), Some(outbox_seq)) if row.state == HoldState::Voided => Some(Void {
            voided_at_ms,
            outbox_seq,
        }),
        (None, None) if row.state != HoldState::Voided => None,
        _ => return Err("void fields disagree with state"),
    };
    match (&row.payment_ref, row.confirmed_at_ms, row.outbox_seq) {
        (Some(payment_ref), Some(confirmed_at_ms), Some(outbox_seq)) if row.state.paid() => {
            Ok(Some(Paid {
                payment_ref: payment_ref.as_str().into(),
                confirmed_at_ms,
                outbox_seq,
                void,
            }))
        }
        (None, None, None) if !row.state.paid() => Ok(None),
        _ => Err("payment fields disagree with state"),
    }
}

/// How much settling the current event may still do. An event is one
/// instant: every operation at the same `now_ms` shares one budget (a
/// batch of commands is decided at one instant), and a timeout starts a
/// fresh one.
#[derive(Clone, Debug)]
pub(crate) struct Settling {
    pub(crate) per_event_max: u32,
    at_ms: Option<u64>,
    used: u32,
}

impl Default for Settling {
    fn default() -> Self {
        Settling {
            per_event_max: limits::SETTLE_PER_EVENT_MAX,
            at_ms: None,
            used: 0,
        }
    }
}

impl Settling {
    /// Takes one item of the budget of the event at `now_ms`, if any is left.
    fn take(&mut self, now_ms: u64) -> bool {
        if self.at_ms != Some(now_ms) {
            self.at_ms = Some(now_ms);
            self.used = 0;
        }
        if self.used < self.per_event_max {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

/// A buyer's own reservation as it reads at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationView {
    pub id: ReservationId,
    pub quantity: u32,
    /// A hold past its expiry reads as `Expired` even before the timeout is
    /// handled, because a confirm would be refused.
    pub state: HoldState,
    pub expires_at_ms: u64,
    /// For a confirmed or voided reservation, its payment.
    pub confirmation: Option<Confirmation>,
    pub voided_at_ms: Option<u64>,
}

pub(crate) fn field_ok(s: &str, bytes_max: usize) -> bool {
    !s.is_empty() && s.len() <= bytes_max
}

impl Gate {
    /// A new product with `stock_total` units, all available. Its first
    /// outbox event tells the origin the total.
    pub fn new(now_ms: u64, config: Config, stock_total: u64) -> Result<Gate, AdminRefusal> {
        config.validate().map_err(AdminRefusal::InvalidConfig)?;
        if stock_total > limits::STOCK_UNITS_MAX {
            return Err(AdminRefusal::StockTooLarge);
        }
        let mut gate = Gate::empty(config, Mode::Active, stock_total, 1, Outbox::default());
        gate.available = stock_total;
        gate.dirty.meta = true;
        gate.dirty.config = true;
        gate.room
            .admission
            .checkpoint(now_ms, gate.admission_rules(), stock_total > 0);
        gate.dirty.admission = true;
        gate.emit_stock(now_ms);
        gate.assert_stock();
        Ok(gate)
    }

    /// A new product from an admin's patch over the default rules. The
    /// patch must name the stock; it may also set the mode.
    pub fn create(now_ms: u64, patch: &ConfigPatch) -> Result<Gate, AdminRefusal> {
        let stock_total = patch.stock_total.ok_or(AdminRefusal::StockRequired)?;
        let shards = patch.shards.unwrap_or(1);
        if shards == 0 || shards > crate::escrow::limits::SHARDS_MAX {
            return Err(AdminRefusal::InvalidShards);
        }
        let mut gate = Gate::new(now_ms, patch.apply(&Config::default()), stock_total)?;
        if shards > 1 {
            gate.become_home(shards);
        }
        // A new product is active and has no holds, so any mode is allowed.
        if let Some(mode) = patch.mode {
            gate.mode = mode;
            gate.sync_admission(now_ms);
        }
        Ok(gate)
    }

    pub(crate) fn empty(
        config: Config,
        mode: Mode,
        escrowed: u64,
        next_id: ReservationId,
        outbox: Outbox,
    ) -> Gate {
        Gate {
            config,
            mode,
            escrowed,
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
            room: Room::default(),
            pacing: Pacing::default(),
            dirty: Dirty::default(),
            counters: Counters::default(),
            settling: Settling::default(),
            archived: false,
            paid_buyers: Bloom::with_capacity(paid_buyers_sized_for(escrowed)),
            paid_buyers_sized_for: paid_buyers_sized_for(escrowed),
            escrow: Escrow::Single,
        }
    }

    /// Rebuilds the paid buyers' filter, larger, once the stock has grown to
    /// twice what it was sized for, so that a restock does not fill it (a
    /// full filter costs reads of storage and lets every sold-out request
    /// through the edge). One pass over the paying buyers in storage: an
    /// admin's restock pays for it, never a buyer's request.
    fn grow_paid_buyers(&mut self, archive: &dyn Archive) {
        let want = paid_buyers_sized_for(self.product_total());
        if want < self.paid_buyers_sized_for.saturating_mul(2) {
            return;
        }
        let mut filter = Bloom::with_capacity(want);
        if self.archived {
            archive.each_paid_buyer(&mut |buyer| filter.insert(buyer));
        }
        for (id, r) in self.store.iter() {
            if self.store.paid(id).is_some() {
                filter.insert(self.buyers.id(r.buyer));
            }
        }
        self.paid_buyers = filter;
        self.paid_buyers_sized_for = want;
    }

    /// Reads the paid records of `buyer`, who has no slot, if the buyer
    /// may have any.
    fn away(&self, archive: &dyn Archive, buyer: &str) -> Option<Away> {
        if !self.archived || !self.paid_buyers.may_contain(buyer) {
            return None;
        }
        let rows: Vec<ReservationRow> = archive
            .paid_of_buyer(buyer)
            .into_iter()
            .filter(|r| r.state.paid())
            .collect();
        (!rows.is_empty()).then_some(Away { rows })
    }

    /// A slot for `buyer`'s new record in memory, loaded with the buyer's
    /// paid records in storage (`away`, read for a buyer with no slot).
    fn slot_for(
        &mut self,
        buyer: &str,
        known: Option<BuyerSlot>,
        away: Option<&Away>,
    ) -> BuyerSlot {
        let slot = self.buyers.acquire(buyer, Some(known));
        if let (None, Some(away)) = (known, away) {
            self.buyers
                .adopt(slot, away.units(), away.rows.len() as u32);
        }
        slot
    }

    /// From now on, paid records leave memory once `poll_changes` has
    /// handed their rows over, and every call that may name one must be
    /// given the storage they went to. Only a shell that writes every
    /// change it takes may set this.
    pub fn set_archived(&mut self) {
        self.archived = true;
    }

    /// For the simulators: whether `set_archived` was called.
    #[cfg(any(test, feature = "test-support"))]
    pub fn is_archived(&self) -> bool {
        self.archived
    }

    /// Record `id` if `buyer` made it, from memory or the archive. Another
    /// buyer's record reads as unknown, so ids reveal nothing.
    fn find_owned(&self, archive: &dyn Archive, id: ReservationId, buyer: &str) -> Option<Found> {
        if self.owned(id, buyer).is_some() {
            return self.resident(id);
        }
        // Only an id handed out before, and not in memory (someone else's
        // record, or one aged out), can be archived; anything else is
        // decided without a read that could fail the batch.
        if !self.archived || id >= self.next_id || self.store.get(id).is_some() {
            return None;
        }
        let row = archive
            .paid(id)
            .filter(|r| r.state.paid() && r.buyer == buyer)?;
        Found::from_row(&row)
    }

    /// Record `id` as it is in memory.
    fn resident(&self, id: ReservationId) -> Option<Found> {
        let r = self.store.get(id)?;
        Some(Found {
            quantity: r.quantity,
            state: r.state,
            expires_at_ms: r.expires_at_ms,
            paid: self.store.paid(id).cloned(),
        })
    }

    /// Brings archived record `id` back into memory for a change; the next
    /// `poll_changes` writes and archives it again.
    fn fault_in(&mut self, archive: &dyn Archive, id: ReservationId) {
        if !self.archived || id >= self.next_id || self.store.get(id).is_some() {
            return;
        }
        let Some(row) = archive.paid(id).filter(|r| r.state.paid()) else {
            return;
        };
        let Ok(Some(paid)) = paid_of(&row) else {
            debug_assert!(false, "archived row {id} is corrupt");
            return;
        };
        let slot = match self.buyers.find(&row.buyer) {
            Some(slot) => {
                self.buyers.unarchive(slot);
                slot
            }
            None => {
                // This record comes into memory; the buyer's others stay in
                // storage, and all their units are the slot's.
                let away = self.away(archive, &row.buyer);
                let (units, records) = away.map_or((0, 0), |a| (a.units(), a.rows.len() as u32));
                let slot = self.buyers.acquire(&row.buyer, Some(None));
                self.buyers.adopt(slot, units, records.saturating_sub(1));
                slot
            }
        };
        // Marked, so that `poll_changes` archives it again even if the
        // caller then changes nothing.
        self.dirty.keys.push(ItemKey::Reservation(id));
        self.store.insert(
            id,
            Reservation {
                buyer: slot,
                idem_key: row.idem_key.into(),
                expires_at_ms: row.expires_at_ms,
                quantity: row.quantity,
                state: row.state,
            },
            Some(paid),
        );
    }

    /// I1, checked wherever units move. A failure is a bug, not an outcome.
    pub(crate) fn assert_stock(&self) {
        assert!(
            self.available + self.held + self.sold == self.escrowed,
            "I1 broken: available {} + held {} + sold {} != escrowed {}",
            self.available,
            self.held,
            self.sold,
            self.escrowed
        );
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// For the simulators: the units this gate keeps (`escrowed`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn escrowed(&self) -> u64 {
        self.escrowed
    }

    pub fn sale_state(&self, now_ms: u64) -> SaleState {
        self.config.sale_state(self.mode, now_ms)
    }

    // ----- buyer operations -------------------------------------------------

    /// Asks for `quantity` units for `buyer`, under the buyer's idempotency
    /// key. A refusal changes nothing and is not remembered: retrying it can
    /// never take stock twice, and it is decided afresh.
    ///
    /// A product with a waiting room (`admit_per_s > 0`) also needs the
    /// buyer's `ticket`, as the edge verified it, and its turn to have come.
    pub fn handle_reserve(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        buyer: &str,
        idem_key: &str,
        quantity: u32,
        ticket: Option<Ticket>,
    ) -> ReserveOutcome {
        self.settle(now_ms);
        let outcome = self.reserve_decide(archive, now_ms, buyer, idem_key, quantity, ticket);
        if matches!(
            outcome,
            ReserveOutcome::Reserved { .. }
                | ReserveOutcome::SoldOut
                | ReserveOutcome::InsufficientStock { .. }
                | ReserveOutcome::Unavailable { .. }
        ) {
            self.note_demand(now_ms, u64::from(quantity));
        }
        self.counters.count_reserve(outcome.kind());
        outcome
    }

    fn reserve_decide(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        buyer: &str,
        idem_key: &str,
        quantity: u32,
        ticket: Option<Ticket>,
    ) -> ReserveOutcome {
        if !field_ok(buyer, limits::BUYER_ID_BYTES_MAX) {
            return ReserveOutcome::InvalidInput(InvalidInput::BuyerId);
        }
        if !field_ok(idem_key, limits::IDEM_KEY_BYTES_MAX) {
            return ReserveOutcome::InvalidInput(InvalidInput::IdempotencyKey);
        }
        // The key is checked before anything else about the request, so that
        // a retry gets its first answer even after the sale closed. A buyer
        // with no slot has no record in memory, but may have paid ones in
        // storage: they are read if the filter of paying buyers says so.
        let slot = self.buyers.find(buyer);
        let away = match slot {
            None => self.away(archive, buyer),
            Some(_) => None,
        };
        let resident = slot
            .and_then(|slot| self.store.find_idem(slot, idem_key))
            .map(|id| {
                let r = self.store.get(id).expect("indexed record exists");
                (id, r.quantity, r.expires_at_ms)
            });
        // Only a buyer with archived records can have a key in storage, so
        // everyone else is decided without reading it (a slot counts its
        // buyer's archived records; a slot-less buyer's were read above).
        let stored = || {
            let row = match (slot, &away) {
                (Some(slot), _) if self.archived && self.buyers.archived(slot) > 0 => archive
                    .paid_by_key(self.buyers.id(slot), idem_key)
                    .filter(|r| r.state.paid())?,
                (None, Some(away)) => away.rows.iter().find(|r| *r.idem_key == *idem_key)?.clone(),
                _ => return None,
            };
            Some((row.id, row.quantity, row.expires_at_ms))
        };
        if let Some((id, q, expires_at_ms)) = resident.or_else(stored) {
            return if q == quantity {
                ReserveOutcome::Replayed {
                    reservation_id: id,
                    expires_at_ms,
                    quantity,
                }
            } else {
                ReserveOutcome::IdempotencyConflict { reservation_id: id }
            };
        }
        // A stock shard decides only under rules home leased it; its shell
        // asks home before such a reserve, so this is a call that failed.
        if self.rules_lapsed(now_ms) {
            return ReserveOutcome::Unavailable {
                retry_after_ms: crate::escrow::limits::UNDECIDED_RETRY_MS,
            };
        }
        // Every attempt past a replay counts against the buyer's pace,
        // refused or not: that is what bounds a script's clicks.
        let window_ms = self.config.attempt_window_ms;
        let most = self.config.attempts_per_window_max;
        if let Err(limited) = self.pacing.attempt(buyer, now_ms, window_ms, most) {
            return ReserveOutcome::RateLimited {
                retry_after_ms: limited.retry_after_ms,
            };
        }
        if quantity == 0 || quantity > self.config.quantity_max {
            return ReserveOutcome::InvalidQuantity {
                quantity_max: self.config.quantity_max,
            };
        }
        if let Some(refusal) = self.refuse_by_sale(now_ms, ticket) {
            return refusal;
        }
        if self.live_holds + self.tombstones >= self.config.reservations_max {
            return ReserveOutcome::Overloaded {
                retry_after_ms: self.record_frees_at(now_ms),
            };
        }
        // At home, `U` is sellable too: it is drawn from in this turn.
        let sellable = self.sellable();
        if sellable == 0 {
            return self.shortage(now_ms, 0);
        }
        let used = match slot {
            Some(slot) => self.buyers.units(slot),
            None => away.as_ref().map_or(0, Away::units),
        };
        if u64::from(used) + u64::from(quantity) > u64::from(self.config.per_buyer_max) {
            return ReserveOutcome::BuyerLimitReached {
                remaining: self.config.per_buyer_max.saturating_sub(used),
            };
        }
        if u64::from(quantity) > sellable {
            return self.shortage(now_ms, sellable);
        }

        // Every refusal is above this line. From here the reserve must succeed.
        self.draw(u64::from(quantity));
        let id = self.next_id;
        self.next_id += 1;
        let expires_at_ms = now_ms.saturating_add(self.config.hold_ttl_ms);
        let buyer = self.slot_for(buyer, slot, away.as_ref());
        self.buyers.restock(buyer, quantity);
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
        self.dirty.keys.push(ItemKey::Reservation(id));
        self.sync_admission(now_ms);
        ReserveOutcome::Reserved {
            reservation_id: id,
            expires_at_ms,
            quantity,
        }
    }

    /// Whether the sale takes a reserve now: its state, and for a waiting
    /// room the buyer's ticket. The refusal, if not.
    fn refuse_by_sale(&self, now_ms: u64, ticket: Option<Ticket>) -> Option<ReserveOutcome> {
        match self.sale_state(now_ms) {
            SaleState::Open => {}
            SaleState::Scheduled => {
                return Some(ReserveOutcome::NotOpen {
                    opens_at_ms: self.config.opens_at_ms.unwrap_or(0),
                })
            }
            SaleState::Paused => return Some(ReserveOutcome::Paused),
            SaleState::Closed => return Some(ReserveOutcome::Closed),
        }
        if self.config.admit_per_s > 0 {
            let Some(ticket) = ticket else {
                return Some(ReserveOutcome::TicketRequired);
            };
            if ticket.arrived_ms.saturating_add(self.config.ticket_ttl_ms) <= now_ms {
                return Some(ReserveOutcome::TicketExpired);
            }
            let rules = self.admission_rules();
            let key = ticket.key(rules.opens_at_ms);
            // A ticket of the infinite queue is never admitted: it answers
            // as a ticket still waiting would.
            if ticket.infinite_queue || !self.room.admission.watermark(now_ms, rules).admits(key) {
                return Some(ReserveOutcome::NotAdmitted {
                    position: self.room.admission.position(key, now_ms, rules).max(1),
                });
            }
        }
        None
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
    pub fn handle_confirm(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
        payment_ref: &str,
    ) -> ConfirmOutcome {
        self.settle(now_ms);
        if self.owned(id, buyer).is_some() {
            self.settle_one(now_ms, id);
        }
        let outcome = self.confirm_decide(archive, now_ms, id, buyer, payment_ref);
        self.counters.count_confirm(outcome.kind());
        outcome
    }

    fn confirm_decide(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
        payment_ref: &str,
    ) -> ConfirmOutcome {
        if !field_ok(payment_ref, limits::PAYMENT_REF_BYTES_MAX) {
            return ConfirmOutcome::InvalidInput(InvalidInput::PaymentRef);
        }
        let Some(r) = self.find_owned(archive, id, buyer) else {
            return ConfirmOutcome::Unknown;
        };
        match r.state {
            HoldState::Held => {}
            HoldState::Confirmed => return ConfirmOutcome::Confirmed(r.confirmation(id)),
            HoldState::Cancelled => return ConfirmOutcome::Cancelled,
            HoldState::Expired => return ConfirmOutcome::Expired,
            HoldState::Voided => return ConfirmOutcome::Voided,
        }
        // `settle_one` expired this hold if it was due, so it is still
        // inside its TTL: a confirm at `expires_at_ms` was refused above.
        assert!(now_ms < r.expires_at_ms, "a due hold survived settle");

        // Every refusal is above this line. From here the confirm must succeed.
        let r = self.store.get_mut(id).expect("checked above");
        let quantity = r.quantity;
        r.state = HoldState::Confirmed;
        let removed = self.expiry.remove(&(r.expires_at_ms, id));
        assert!(removed, "a live hold is in the expiry index");
        self.paid_buyers.insert(buyer);
        let seq = self.outbox.push(OutboxEvent::Order {
            reservation_id: id,
            buyer: buyer.into(),
            quantity,
            payment_ref: payment_ref.into(),
            confirmed_at_ms: now_ms,
        });
        let paid = Paid {
            payment_ref: payment_ref.into(),
            confirmed_at_ms: now_ms,
            outbox_seq: seq,
            void: None,
        };
        self.store.move_to_confirmed(id, paid);
        self.held -= u64::from(quantity);
        self.sold += u64::from(quantity);
        self.live_holds -= 1;
        self.counters.holds_confirmed += 1;
        self.assert_stock();
        self.dirty.keys.push(ItemKey::Reservation(id));
        self.dirty.keys.push(ItemKey::Outbox(seq));
        let confirmed = self.resident(id).expect("the record just confirmed");
        ConfirmOutcome::Confirmed(confirmed.confirmation(id))
    }

    /// The record `id` if `buyer` made it. Another buyer's record reads as
    /// unknown, so ids reveal nothing.
    fn owned(&self, id: ReservationId, buyer: &str) -> Option<&Reservation> {
        self.store
            .get(id)
            .filter(|r| self.buyers.id(r.buyer) == buyer)
    }

    /// Gives a held reservation's units back. Only its buyer may cancel.
    pub fn handle_cancel(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
    ) -> CancelOutcome {
        self.settle(now_ms);
        if self.owned(id, buyer).is_some() {
            self.settle_one(now_ms, id);
        }
        let outcome = match self.find_owned(archive, id, buyer) {
            None => CancelOutcome::Unknown,
            Some(r) => match r.state {
                HoldState::Confirmed => CancelOutcome::AlreadyConfirmed,
                HoldState::Voided => CancelOutcome::Voided,
                HoldState::Expired => CancelOutcome::AlreadyExpired,
                HoldState::Cancelled => CancelOutcome::Cancelled {
                    quantity: r.quantity,
                },
                HoldState::Held => {
                    let quantity = r.quantity;
                    self.release(id, HoldState::Cancelled);
                    self.counters.holds_cancelled += 1;
                    self.sync_admission(now_ms);
                    CancelOutcome::Cancelled { quantity }
                }
            },
        };
        self.counters.count_cancel(outcome.kind());
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
        self.dirty.keys.push(ItemKey::Reservation(id));
        self.give_back_home();
    }

    /// `buyer`'s reservation `id` as it reads at `now_ms`, or `None` if it
    /// is unknown, aged out, or another buyer's: a reader learns nothing
    /// about reservations it does not own. Reading changes nothing.
    pub fn reservation(
        &self,
        archive: &dyn Archive,
        now_ms: u64,
        id: ReservationId,
        buyer: &str,
    ) -> Option<ReservationView> {
        let r = self.find_owned(archive, id, buyer)?;
        let state = if r.state == HoldState::Held && now_ms >= r.expires_at_ms {
            HoldState::Expired
        } else {
            r.state
        };
        Some(ReservationView {
            id,
            quantity: r.quantity,
            state,
            expires_at_ms: r.expires_at_ms,
            confirmation: r.paid.as_ref().map(|_| r.confirmation(id)),
            voided_at_ms: r.paid.and_then(|p| p.void).map(|v| v.voided_at_ms),
        })
    }

    /// Voids a confirmed order, as an admin's refund: its units go back to
    /// stock, the buyer's count drops, and the void enters the outbox for
    /// the origin. Voiding a voided order again returns the same answer.
    pub fn void(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        id: ReservationId,
    ) -> Result<Voided, AdminRefusal> {
        self.settle(now_ms);
        self.fault_in(archive, id);
        let r = self.store.get(id).ok_or(AdminRefusal::UnknownReservation)?;
        let quantity = r.quantity;
        match r.state {
            HoldState::Confirmed => {}
            HoldState::Voided => {
                let void = self.store.paid(id).and_then(|p| p.void);
                let void = void.expect("a voided record has its void");
                return Ok(Voided {
                    reservation_id: id,
                    quantity,
                    voided_at_ms: void.voided_at_ms,
                });
            }
            HoldState::Held | HoldState::Cancelled | HoldState::Expired => {
                return Err(AdminRefusal::NotConfirmed)
            }
        }

        // Every refusal is above this line. From here the void must succeed.
        let buyer = r.buyer;
        let seq = self.outbox.push(OutboxEvent::Void {
            reservation_id: id,
            quantity,
            voided_at_ms: now_ms,
        });
        self.store.void(
            id,
            Void {
                voided_at_ms: now_ms,
                outbox_seq: seq,
            },
        );
        self.buyers.remove_units(buyer, quantity);
        self.sold -= u64::from(quantity);
        self.available += u64::from(quantity);
        self.assert_stock();
        self.give_back_home();
        self.dirty.keys.push(ItemKey::Reservation(id));
        self.dirty.keys.push(ItemKey::Outbox(seq));
        self.sync_admission(now_ms);
        Ok(Voided {
            reservation_id: id,
            quantity,
            voided_at_ms: now_ms,
        })
    }

    /// Records the stock total in the outbox, so the origin's total follows
    /// the gate's, in order with the orders.
    fn emit_stock(&mut self, now_ms: u64) {
        // Only home (or a single product) knows the product's total; a
        // shard tells the origin nothing of stock.
        if matches!(self.escrow, Escrow::Shard(_)) {
            return;
        }
        let seq = self.outbox.push(OutboxEvent::Stock {
            stock_total: self.product_total(),
            at_ms: now_ms,
        });
        self.dirty.keys.push(ItemKey::Outbox(seq));
    }

    // ----- time -------------------------------------------------------------

    /// Expires every hold that is due and forgets every tombstone whose
    /// idempotency window ended. Returns how many holds expired. Costs
    /// O(due × log n). Calling it again with the same `now_ms` does nothing,
    /// so a retried alarm is harmless.
    ///
    /// A timeout is an event of its own, with a fresh budget: it settles at
    /// most `SETTLE_PER_EVENT_MAX` items, expiries (oldest first) before
    /// purges. If more are due, `poll_timeout` is already past, and the
    /// shell fires again at once.
    pub fn handle_timeout(&mut self, now_ms: u64) -> u32 {
        self.settling.at_ms = None;
        self.settle(now_ms)
    }

    /// How many expiries and purges the event at `now_ms` has done so far.
    pub fn settled_in_event(&self, now_ms: u64) -> u32 {
        if self.settling.at_ms == Some(now_ms) {
            self.settling.used
        } else {
            0
        }
    }

    /// For tests: a smaller budget per event, to reach the backlog paths.
    #[doc(hidden)]
    pub fn set_settle_per_event_max(&mut self, n: u32) {
        self.settling.per_event_max = n.max(1);
    }

    /// Expires the due holds and purges the due tombstones, oldest first, as
    /// far as the event's budget goes. An operation on one record does not
    /// rely on this: it settles that record itself (`settle_one`).
    pub(crate) fn settle(&mut self, now_ms: u64) -> u32 {
        let mut expired = 0;
        while let Some(&(at, id)) = self.expiry.first() {
            if at > now_ms || !self.settling.take(now_ms) {
                break;
            }
            self.release(id, HoldState::Expired);
            expired += 1;
        }
        while let Some(&(at, id)) = self.purge.first() {
            if at > now_ms || !self.settling.take(now_ms) {
                break;
            }
            self.purge.pop_first();
            let r = self.store.remove(id);
            debug_assert!(matches!(r.state, HoldState::Cancelled | HoldState::Expired));
            self.buyers.release(r.buyer);
            self.tombstones -= 1;
            self.dirty.keys.push(ItemKey::Reservation(id));
        }
        self.counters.holds_expired += u64::from(expired);
        if expired > 0 {
            self.sync_admission(now_ms);
        }
        expired
    }

    /// Expires hold `id` if it is due and the budget left it behind, so an
    /// operation on it decides on its true state. Outside any budget: it is
    /// one record.
    fn settle_one(&mut self, now_ms: u64, id: ReservationId) {
        let due = self
            .store
            .get(id)
            .is_some_and(|r| r.state == HoldState::Held && r.expires_at_ms <= now_ms);
        if due {
            self.release(id, HoldState::Expired);
            self.counters.holds_expired += 1;
            self.sync_admission(now_ms);
        }
    }

    // ----- waiting room -----------------------------------------------------

    pub(crate) fn admission_rules(&self) -> Rules {
        Rules {
            admit_per_s: self.config.admit_per_s,
            opens_at_ms: self.config.opens_at_ms,
        }
    }

    /// The waiting room advances only while there is stock to sell and the
    /// sale is not paused or closed: admitting buyers to nothing would only
    /// turn them away. A change is a checkpoint, and stored.
    pub(crate) fn sync_admission(&mut self, now_ms: u64) {
        // A shard's waiting room is home's, as its last reply gave it.
        if matches!(self.escrow, Escrow::Shard(_)) {
            return;
        }
        let advancing = self.product_available() > 0 && self.mode == Mode::Active;
        if self.room.admission.advancing != advancing {
            let rules = self.admission_rules();
            // Edges extrapolate the snapshot they hold: what they said
            // before the stop stays true (`SOLD_OUT_LAG_MS`, the lag of
            // every edge answer).
            self.room
                .admission
                .checkpoint_after_lag(now_ms, rules, advancing, SOLD_OUT_LAG_MS);
            self.dirty.admission = true;
            self.note_watermark(now_ms);
        }
    }

    /// An edge's report of the tickets it issued. Reports are what place
    /// the watermark; see `admission`.
    ///
    /// A buyer who joins again is counted once: every counted ticket moves
    /// the watermark back for everyone after it, so a buyer rejoining in a
    /// loop (at the buyers' rate limit) would slow the room for all.
    pub fn handle_arrivals(&mut self, now_ms: u64, arrivals: &Arrivals) {
        self.settle(now_ms);
        self.counters.pow_required += arrivals.pow_required;
        self.counters.pow_infinite_queued += arrivals.pow_infinite_queued;
        self.counters.edge_sold_out += arrivals.edge_sold_out;
        self.counters.edge_not_admitted += arrivals.edge_not_admitted;
        self.counters.edge_rate_limited += arrivals.edge_rate_limited;
        let rules = self.admission_rules();
        let (forgotten, changed) = self.room.note_arrivals(now_ms, rules, arrivals);
        self.counters.rejoins_uncounted += forgotten;
        if changed {
            self.dirty.admission = true;
        }
        // Every edge's refresh comes here about once a second: the record
        // of the watermark is kept on that beat, as it stands from now on.
        self.note_record(now_ms);
    }

    /// Whether the waiting room needs a lottery key: it has none (just set
    /// up, or rescheduled before any ticket). The shell then draws one and
    /// hands it in (`handle_lottery_key`) in the same event, so that no
    /// snapshot, and so no ticket, goes out without it.
    /// A stock shard takes its room, key included, from home's replies.
    pub fn lottery_wanted(&self) -> bool {
        self.config.admit_per_s > 0
            && self.room.admission.lottery.key.is_none()
            && !matches!(self.escrow, Escrow::Shard(_))
    }

    /// A key the shell drew for the lottery (32 random bytes), taken only
    /// if one is wanted: a drawn key is never replaced once tickets could
    /// have been ordered by it.
    pub fn handle_lottery_key(&mut self, key: LotteryKey) {
        if self.lottery_wanted() {
            self.room.admission.lottery.key = Some(key);
            self.dirty.admission = true;
        }
    }

    /// A new schedule gets a new key if nobody could have joined under the
    /// old one (its pre-queue had not opened and no ticket was reported):
    /// the old commitment then orders nothing, and a key told at an opening
    /// that was called off must not order the next one.
    fn redraw_if_rescheduled(&mut self, now_ms: u64, config: &Config) {
        let moved = (config.opens_at_ms, config.prequeue_ms)
            != (self.config.opens_at_ms, self.config.prequeue_ms);
        let untouched = self.room.admission.reported() == 0
            && self
                .config
                .opens_at_ms
                .is_some_and(|o| now_ms < o.saturating_sub(self.config.prequeue_ms));
        if moved && untouched && self.room.admission.lottery.key.is_some() {
            self.room.admission.lottery.key = None;
            self.dirty.admission = true;
        }
    }

    /// Notes the watermark in the admission record (`lottery::AdmissionRecord`).
    fn note_record(&mut self, now_ms: u64) {
        if self.config.admit_per_s == 0 {
            return;
        }
        self.note_watermark(now_ms);
    }

    /// Notes the watermark, whatever the rate: after a checkpoint, which
    /// may raise it at once (`Admission::checkpoint_after_lag`) even as the
    /// room turns off, the record's bound for this millisecond must hold
    /// what it admits.
    fn note_watermark(&mut self, now_ms: u64) {
        let below = self
            .room
            .admission
            .watermark(now_ms, self.admission_rules())
            .below;
        if self.room.admission.record.note(now_ms, below) {
            self.dirty.admission = true;
        }
    }

    /// What the tickets admitted so far took: the product's units held or
    /// sold (every shard's, as home knows them) against the tickets
    /// admitted. Derived from stored state, so it survives a reload and
    /// counts reserves made at any shard; units a buyer gave back are not
    /// counted, as they are on sale again.
    pub fn uptake(&self, now_ms: u64) -> Uptake {
        let l = self.product_levels();
        Uptake {
            admitted: self
                .room
                .admission
                .admitted_milli(now_ms, self.admission_rules())
                / 1000,
            units: l.held.saturating_add(l.sold),
        }
    }

    /// The waiting room's state, for the edge to answer polls from.
    /// The proof of work the waiting room asks at `now_ms`: its level, or
    /// `None` when it asks none (`pow.rs`).
    pub fn pow_level(&self, now_ms: u64) -> Option<u8> {
        self.config
            .pow
            .level_at(self.room.joins_per_s(now_ms), self.config.admit_per_s)
    }

    /// Joins per second the edges reported over the last
    /// `POW_RATE_WINDOW_S`.
    pub fn joins_per_s(&self, now_ms: u64) -> u64 {
        self.room.joins_per_s(now_ms)
    }

    pub fn admission(&self) -> &Admission {
        &self.room.admission
    }

    /// A filter of every buyer who holds or bought units, those with only
    /// paid orders in storage included (and, harmlessly, buyers whose
    /// orders were voided since): what the edge lets through to the object
    /// when nothing is left, so that their replays are answered. Sized by
    /// the stock when the gate was built or restored.
    pub fn buyers_filter(&self) -> Bloom {
        let mut filter = self.paid_buyers.clone();
        for buyer in self.buyers.ids_with_units() {
            filter.insert(buyer);
        }
        filter
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

    /// The next batch of at most `batch_size_max` outbox events to forward,
    /// oldest first. Empty while a batch is out (until its lease lapses) or
    /// a backoff runs.
    pub fn poll_outbox(&mut self, now_ms: u64, batch_size_max: usize) -> Vec<OutboxEntry> {
        self.outbox.poll(now_ms, batch_size_max)
    }

    /// The origin stored every entry up to `up_to_seq`.
    pub fn handle_ack(&mut self, up_to_seq: u64) -> AckOutcome {
        let (outcome, removed) = self.outbox.ack(up_to_seq);
        if let AckOutcome::Acked { .. } = outcome {
            self.dirty.meta = true;
            self.dirty.keys.extend(removed.map(ItemKey::Outbox));
        }
        outcome
    }

    /// The batch that is out failed. It is handed out again after a capped
    /// exponential backoff whose jitter comes from `jitter_seed`. Returns
    /// false, and changes nothing, if no batch was out.
    pub fn handle_nack(&mut self, now_ms: u64, jitter_seed: u64) -> bool {
        let nacked = self.outbox.nack(now_ms, jitter_seed);
        if nacked {
            self.dirty.meta = true;
        }
        nacked
    }

    // ----- admin ------------------------------------------------------------

    pub fn restock(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        units: u64,
    ) -> Result<(), AdminRefusal> {
        if self.is_shard() {
            return Err(AdminRefusal::NotHome);
        }
        self.settle(now_ms);
        match self.product_total().checked_add(units) {
            Some(total) if total <= limits::STOCK_UNITS_MAX => {
                if units > 0 {
                    match &mut self.escrow {
                        // At home a restock adds to `U`.
                        Escrow::Home(pool) => {
                            pool.restock(units);
                            self.dirty.escrow = true;
                        }
                        Escrow::Single | Escrow::Shard(_) => {
                            self.escrowed = total;
                            self.available += units;
                        }
                    }
                    self.assert_stock();
                    self.dirty.meta = true;
                    self.emit_stock(now_ms);
                    self.sync_admission(now_ms);
                    self.grow_paid_buyers(archive);
                }
                Ok(())
            }
            _ => Err(AdminRefusal::StockTooLarge),
        }
    }

    /// Sets the total. It may never fall below the units held or sold.
    pub fn set_total(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        stock_total: u64,
    ) -> Result<(), AdminRefusal> {
        self.configure(
            archive,
            now_ms,
            &ConfigPatch {
                stock_total: Some(stock_total),
                ..ConfigPatch::default()
            },
        )
    }

    pub fn set_mode(&mut self, now_ms: u64, mode: Mode) -> Result<(), AdminRefusal> {
        // The rules do not change, so storage is not read.
        self.configure(
            &crate::archive::NoArchive,
            now_ms,
            &ConfigPatch {
                mode: Some(mode),
                ..ConfigPatch::default()
            },
        )
    }

    /// Replaces the rules. New rules apply to new requests; live holds keep
    /// their expiry. For the simulators; the admin's path is `configure`.
    #[cfg(any(test, feature = "test-support"))]
    pub fn set_rules(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        config: &Config,
    ) -> Result<(), AdminRefusal> {
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
            face: _,
        } = *config;
        self.configure(
            archive,
            now_ms,
            &ConfigPatch {
                per_buyer_max: Some(per_buyer_max),
                quantity_max: Some(quantity_max),
                hold_ttl_ms: Some(hold_ttl_ms),
                idem_window_ms: Some(idem_window_ms),
                opens_at_ms: Some(opens_at_ms),
                closes_at_ms: Some(closes_at_ms),
                reservations_max: Some(reservations_max),
                admit_per_s: Some(admit_per_s),
                prequeue_ms: Some(prequeue_ms),
                ticket_ttl_ms: Some(ticket_ttl_ms),
                attempts_per_window_max: Some(attempts_per_window_max),
                attempt_window_ms: Some(attempt_window_ms),
                pow: Some(pow),
                face: Some(config.face.clone()),
                ..ConfigPatch::default()
            },
        )
    }

    /// Applies an admin's patch to the rules, the total and the mode
    /// together: all of it, or none if any part is refused.
    /// `per_buyer_max` may not drop below what a buyer already holds or
    /// bought, so that the per-buyer invariant keeps holding.
    pub fn configure(
        &mut self,
        archive: &dyn Archive,
        now_ms: u64,
        patch: &ConfigPatch,
    ) -> Result<(), AdminRefusal> {
        if self.is_shard() {
            return Err(AdminRefusal::NotHome);
        }
        self.settle(now_ms);
        let config = patch.apply(&self.config);
        let config_changed = config != self.config;
        if config_changed {
            config.validate().map_err(AdminRefusal::InvalidConfig)?;
            // A buyer with a slot counts all its units; one without has
            // only paid units, in storage.
            let lowered = config.per_buyer_max < self.config.per_buyer_max;
            let away = if self.archived && lowered {
                archive.paid_units_max()
            } else {
                0
            };
            let most = self.buyers.units_max().max(away);
            if config.per_buyer_max < most {
                return Err(AdminRefusal::BuyerAboveLimit { units: most });
            }
        }
        if patch.shards.is_some_and(|k| k != self.shards()) {
            return Err(AdminRefusal::ShardsFixed);
        }
        // At home, what the shards were granted is committed as far as home
        // knows: only `U` can shrink.
        let committed = match &self.escrow {
            Escrow::Home(pool) => pool.stock_total - pool.unallocated(),
            Escrow::Single | Escrow::Shard(_) => self.held + self.sold,
        };
        match patch.stock_total {
            Some(t) if t > limits::STOCK_UNITS_MAX => return Err(AdminRefusal::StockTooLarge),
            Some(t) if t < committed => return Err(AdminRefusal::BelowCommitted { committed }),
            _ => {}
        }
        if self.mode == Mode::Closed && patch.mode.is_some_and(|m| m != Mode::Closed) {
            return Err(AdminRefusal::SaleClosed);
        }

        // Every refusal is above this line. From here the update must succeed.
        if config_changed {
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
            let rules_before = self.admission_rules();
            self.redraw_if_rescheduled(now_ms, &config);
            self.config = config;
            self.dirty.config = true;
            if self.admission_rules() != rules_before {
                // What was admitted under the old rate, and what an edge's
                // snapshot says under it for the lag, stays admitted; the
                // new rate counts from then.
                let advancing = self.room.admission.advancing;
                self.room.admission.checkpoint_after_lag(
                    now_ms,
                    rules_before,
                    advancing,
                    SOLD_OUT_LAG_MS,
                );
                self.dirty.admission = true;
                self.note_watermark(now_ms);
            }
        }
        if let Some(t) = patch.stock_total.filter(|&t| t != self.product_total()) {
            match &mut self.escrow {
                Escrow::Home(pool) => {
                    let fits = pool.set_total(t);
                    assert!(fits, "a total below the escrowed units passed the check");
                    self.dirty.escrow = true;
                }
                Escrow::Single | Escrow::Shard(_) => {
                    self.escrowed = t;
                    self.available = t - committed;
                }
            }
            self.assert_stock();
            self.dirty.meta = true;
            self.emit_stock(now_ms);
            self.grow_paid_buyers(archive);
        }
        let mode_changed = patch.mode.is_some_and(|m| m != self.mode);
        if let Some(mode) = patch.mode.filter(|&m| m != self.mode) {
            self.mode = mode;
            self.dirty.meta = true;
        }
        // New rules bind every shard before the change is done: the
        // shell pushes them (`rules_behind`, `rules_bind_at`).
        if config_changed || mode_changed {
            if let Escrow::Home(pool) = &mut self.escrow {
                pool.rules_changed();
                self.dirty.escrow = true;
            }
        }
        // A shorter window may already have ended for some tombstones.
        self.settle(now_ms);
        self.sync_admission(now_ms);
        Ok(())
    }

    // ----- observation ------------------------------------------------------

    /// The sale's state and unit levels at `now_ms`.
    /// At home, the product's, summed over its shards as they last reported.
    pub fn levels(&self, now_ms: u64) -> Levels {
        let l = self.product_levels();
        Levels {
            sale_state: self.sale_state(now_ms),
            stock_total: self.product_total(),
            available: l.available,
            held: l.held,
            sold: l.sold,
        }
    }

    /// Where the sale stands for its history (`history::Mark`): as cheap
    /// as `levels`, so the object notes it after every batch.
    pub fn mark(&self, now_ms: u64) -> Mark {
        let l = self.product_levels();
        Mark {
            available: l.available,
            held: l.held,
            sold: l.sold,
            queue_reported: self.room.admission.reported(),
            queue_admitted: self
                .room
                .admission
                .admitted_milli(now_ms, self.admission_rules())
                / 1000,
            outbox_backlog: self.outbox.backlog() as u64,
            outbox_acked_seq: self.outbox.acked_seq,
        }
    }

    /// The outcome counts since this gate was created or restored.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn stats(&self, now_ms: u64) -> Stats {
        let l = self.product_levels();
        let escrow = self.escrow_overview();
        Stats {
            sale_state: self.sale_state(now_ms),
            stock_total: self.product_total(),
            available: l.available,
            held: l.held,
            sold: l.sold,
            live_holds: self.live_holds,
            tombstones: self.tombstones,
            buyers: self.buyers.with_units(),
            outbox_backlog: self.outbox.backlog() as u64,
            // At home, the shards' orders on their way count too, so the
            // drift check judges the product as one.
            outbox_backlog_units: self.outbox.backlog_units()
                + escrow.as_ref().map_or(0, |e| e.backlog_units),
            outbox_acked_seq: self.outbox.acked_seq,
            outbox_attempts: self.outbox.attempts,
            outbox_retry_at_ms: self.outbox.retry_at_ms,
            next_deadline_ms: self.poll_timeout(),
            queue_reported: self.room.admission.reported(),
            queue_admitted: self
                .room
                .admission
                .admitted_milli(now_ms, self.admission_rules())
                / 1000,
            queue_advancing: self.room.admission.advancing,
            pow: self.config.pow,
            pow_level: self.pow_level(now_ms),
            joins_per_s: self.joins_per_s(now_ms),
            counters: self.counters.clone(),
            escrow,
        }
    }
}
