//! The gate as rows: the changes since the last write, every row, and the
//! rebuild of a gate from its rows (the persistence contract of `rows.rs`).

use crate::config::limits;
use crate::gate::{field_ok, paid_of, Gate};
use crate::outbox::{Outbox, OutboxEvent};
use crate::outcome::ReservationId;
use crate::rows::{Change, ItemKey, MetaRow, ReservationRow, RestoreError, Row, RowKey};
use crate::sharded::Escrow;
use crate::store::{HoldState, Reservation};

impl Gate {
    /// The rows to write for everything that changed since the last call, in
    /// key order, each once. Deleted rows come as `Change::Delete`.
    ///
    /// An archived gate forgets each paid record whose row it hands over
    /// here: from now on it is read back from storage (`archive.rs`). So the
    /// caller must write every change it takes, or discard the gate.
    pub fn poll_changes(&mut self) -> Vec<Change> {
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
        if std::mem::take(&mut self.dirty.admission) {
            out.push(Change::Put(Row::Admission(self.room.admission.clone())));
        }
        if std::mem::take(&mut self.dirty.escrow) && self.escrow != Escrow::Single {
            out.push(Change::Put(Row::Escrow(Box::new(self.escrow.clone()))));
        }
        for key in keys {
            let row = match key {
                ItemKey::Reservation(id) => self.store.get(id).map(|_| self.reservation_row(id)),
                ItemKey::Outbox(seq) => self.outbox.get(seq).cloned().map(Row::Outbox),
            };
            if let (ItemKey::Reservation(id), Some(Row::Reservation(r))) = (key, &row) {
                if self.archived && r.state.paid() {
                    let record = self.store.remove(id);
                    self.buyers.archive(record.buyer);
                }
            }
            out.push(match row {
                Some(row) => Change::Put(row),
                None => Change::Delete(key),
            });
        }
        out
    }

    /// True when changes are waiting to be taken.
    pub fn has_changes(&self) -> bool {
        self.dirty.meta
            || self.dirty.config
            || self.dirty.admission
            || self.dirty.escrow
            || !self.dirty.keys.is_empty()
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
            voided_at_ms: paid.and_then(|p| p.void).map(|v| v.voided_at_ms),
            void_seq: paid.and_then(|p| p.void).map(|v| v.outbox_seq),
        })
    }

    fn meta_row(&self) -> MetaRow {
        MetaRow {
            escrowed: self.escrowed,
            mode: self.mode,
            next_reservation_id: self.next_id,
            outbox_acked_seq: self.outbox.acked_seq,
            outbox_attempts: self.outbox.attempts,
            outbox_retry_at_ms: self.outbox.retry_at_ms,
        }
    }

    /// Every row the gate holds in memory, in key order: what storage holds
    /// once every change has been written, less the paid records an
    /// archived gate has handed over.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = vec![
            Row::Meta(self.meta_row()),
            Row::Config(self.config.clone()),
            Row::Admission(self.room.admission.clone()),
        ];
        if self.escrow != Escrow::Single {
            rows.push(Row::Escrow(Box::new(self.escrow.clone())));
        }
        rows.extend(self.store.iter().map(|(id, _)| self.reservation_row(id)));
        rows.extend(self.outbox.iter().cloned().map(Row::Outbox));
        rows
    }

    /// Rebuilds a gate from its rows, checking that they are consistent.
    /// The rows may come in any order. The gate keeps every record in
    /// memory; `Restorer::archived` builds one that leaves paid records in
    /// storage.
    pub fn restore(rows: impl IntoIterator<Item = Row>) -> Result<Gate, RestoreError> {
        Self::restore_into(Restorer::default(), rows)
    }

    /// As `restore`, with paid records left in storage (an archived gate).
    pub fn restore_archived(rows: impl IntoIterator<Item = Row>) -> Result<Gate, RestoreError> {
        Self::restore_into(Restorer::archived(), rows)
    }

    fn restore_into(
        mut restorer: Restorer,
        rows: impl IntoIterator<Item = Row>,
    ) -> Result<Gate, RestoreError> {
        let mut rows: Vec<Row> = rows.into_iter().collect();
        // The restorer takes the singletons first, then reservations by id
        // (for an archived gate, those that stay in storage last, by buyer),
        // then the outbox.
        let archive = restorer.archive;
        rows.sort_by(|a, b| {
            let key = |r: &Row| match r {
                Row::Meta(_) | Row::Config(_) | Row::Admission(_) | Row::Escrow(_) => (0, None, 0),
                Row::Reservation(r) if archive && r.state.paid() => {
                    (2, Some(r.buyer.clone()), r.id)
                }
                Row::Reservation(r) => (1, None, r.id),
                Row::Outbox(e) => (3, None, e.seq),
            };
            key(a).cmp(&key(b))
        });
        for row in rows {
            restorer.push(row)?;
        }
        restorer.finish()
    }
}

/// Rebuilds a gate from a stream of rows, one at a time, so that a restore
/// never holds the rows and the gate at once: the object feeds it straight
/// from the SQL cursor. The singletons (meta, config, admission) come
/// first and reservations in ascending id order, as `sql::load` reads them;
/// for an archived gate, the paid reservations (which stay in storage) come
/// after all others, ordered by buyer. A reservation that arrives before
/// the singletons waits for them.
#[derive(Default)]
pub struct Restorer {
    meta: Option<MetaRow>,
    config: Option<crate::config::Config>,
    admission: Option<crate::admission::Admission>,
    escrow: Option<Escrow>,
    gate: Option<Gate>,
    next_reservation_id: ReservationId,
    window: u64,
    last_id: Option<ReservationId>,
    early: Vec<ReservationRow>,
    outbox: Vec<crate::outbox::OutboxEntry>,
    /// Build an archived gate: paid records stay in storage.
    archive: bool,
    /// The paid records left in storage whose order or void may still be
    /// in the outbox, for the links the outbox is checked against.
    links: hashbrown::HashMap<ReservationId, Link>,
    /// The buyer whose paid rows are being read (archived, no slot), with
    /// the units they hold so far. `Some` once the paid rows began.
    away: Option<(String, u32)>,
}

/// What an outbox entry about a paid record must agree with: the
/// sequence numbers the record names, and the facts the entry repeats. An
/// entry that names the right record but carries another buyer, quantity,
/// payment or time would forward something the gate never decided.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Link {
    order_seq: u64,
    void_seq: Option<u64>,
    buyer: Box<str>,
    quantity: u32,
    payment_ref: Box<str>,
    confirmed_at_ms: u64,
    voided_at_ms: Option<u64>,
}

impl Link {
    /// Whether `event`, at `seq`, is this record's order or void.
    fn agrees(&self, seq: u64, event: &OutboxEvent) -> bool {
        match event {
            OutboxEvent::Stock { .. } => false,
            OutboxEvent::Order {
                buyer,
                quantity,
                payment_ref,
                confirmed_at_ms,
                ..
            } => {
                self.order_seq == seq
                    && self.buyer == *buyer
                    && self.quantity == *quantity
                    && self.payment_ref == *payment_ref
                    && self.confirmed_at_ms == *confirmed_at_ms
            }
            OutboxEvent::Void {
                quantity,
                voided_at_ms,
                ..
            } => {
                self.void_seq == Some(seq)
                    && self.quantity == *quantity
                    && self.voided_at_ms == Some(*voided_at_ms)
            }
        }
    }
}

impl Restorer {
    /// A restorer of an archived gate (`Gate::set_archived`): paid records
    /// are checked and counted, and left in storage.
    pub fn archived() -> Restorer {
        Restorer {
            archive: true,
            ..Restorer::default()
        }
    }

    /// Takes one row; checks what can be checked of it alone.
    pub fn push(&mut self, row: Row) -> Result<(), RestoreError> {
        match row {
            Row::Meta(m) => {
                if self.gate.is_some() || self.meta.replace(m).is_some() {
                    return Err(RestoreError::DuplicateKey(RowKey::Meta));
                }
            }
            Row::Config(c) => {
                if self.gate.is_some() || self.config.replace(c).is_some() {
                    return Err(RestoreError::DuplicateKey(RowKey::Config));
                }
            }
            Row::Admission(a) => {
                if self.gate.is_some() || self.admission.replace(a).is_some() {
                    return Err(RestoreError::DuplicateKey(RowKey::Admission));
                }
            }
            Row::Escrow(e) => {
                let mut e = *e;
                e.forget_memory();
                let twice = match &mut self.gate {
                    Some(gate) => std::mem::replace(&mut gate.escrow, e) != Escrow::Single,
                    None => self.escrow.replace(e).is_some(),
                };
                if twice {
                    return Err(RestoreError::DuplicateKey(RowKey::Escrow));
                }
            }
            Row::Reservation(r) => {
                if self.gate.is_none() && !self.ready() {
                    self.early.push(r);
                    return Ok(());
                }
                self.start()?;
                self.reservation(r)?;
            }
            Row::Outbox(e) => self.outbox.push(e),
        }
        Ok(())
    }

    fn ready(&self) -> bool {
        self.meta.is_some() && self.config.is_some() && self.admission.is_some()
    }

    /// Builds the empty gate once the singletons are in, and applies the
    /// reservations that came before them.
    fn start(&mut self) -> Result<(), RestoreError> {
        if self.gate.is_some() {
            return Ok(());
        }
        let meta = self.meta.clone().ok_or(RestoreError::MissingMeta)?;
        let config = self.config.clone().ok_or(RestoreError::MissingConfig)?;
        config.validate().map_err(RestoreError::InvalidConfig)?;
        let admission = self
            .admission
            .take()
            .ok_or(RestoreError::MissingAdmission)?;
        check_admission(&admission)?;
        self.window = config.idem_window_ms;
        self.next_reservation_id = meta.next_reservation_id;
        let mut gate = Gate::empty(
            config,
            meta.mode,
            meta.escrowed,
            meta.next_reservation_id,
            Outbox::restored(
                meta.outbox_acked_seq,
                meta.outbox_attempts,
                meta.outbox_retry_at_ms,
            ),
        );
        gate.room.admission = admission;
        gate.escrow = self.escrow.take().unwrap_or_default();
        gate.archived = self.archive;
        self.gate = Some(gate);
        let mut early = std::mem::take(&mut self.early);
        let archive = self.archive;
        early.sort_by(|a, b| {
            let key = |r: &ReservationRow| {
                let stays = archive && r.state.paid();
                (stays, stays.then(|| r.buyer.clone()), r.id)
            };
            key(a).cmp(&key(b))
        });
        for r in early {
            self.reservation(r)?;
        }
        Ok(())
    }

    fn reservation(&mut self, row: ReservationRow) -> Result<(), RestoreError> {
        let window = self.window;
        let id = row.id;
        let bad = |why| Err(RestoreError::BadReservation(id, why));
        let stays_in_storage = self.archive && row.state.paid();
        if stays_in_storage {
            // The second part of an archived restore: paid rows by buyer,
            // so that each buyer's are counted together.
            if self.away.as_ref().is_some_and(|(b, _)| *b > row.buyer) {
                return bad("paid reservations out of buyer order");
            }
        } else {
            if self.away.is_some() {
                return bad("a reservation in memory after the paid ones");
            }
            match self.last_id {
                Some(last) if last == id => {
                    return Err(RestoreError::DuplicateKey(RowKey::Reservation(id)))
                }
                Some(last) if last > id => return bad("reservations out of id order"),
                _ => {}
            }
            self.last_id = Some(id);
        }
        let gate = self.gate.as_mut().expect("started before any reservation");
        if id >= self.next_reservation_id {
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
        // Keys of archived records are not indexed in memory; storage's
        // unique index over (buyer, key) keeps them apart.
        if known.is_some_and(|slot| gate.store.find_idem(slot, &row.idem_key).is_some()) {
            return bad("idempotency key used twice");
        }
        let paid = match paid_of(&row) {
            Ok(paid) => paid,
            Err(why) => return bad(why),
        };
        let quantity = u64::from(row.quantity);
        let units = if row.state == HoldState::Held || row.state == HoldState::Confirmed {
            row.quantity
        } else {
            0
        };
        match row.state {
            HoldState::Held => {
                gate.expiry.insert((row.expires_at_ms, id));
                gate.held += quantity;
                gate.live_holds += 1;
            }
            HoldState::Confirmed => gate.sold += quantity,
            // A voided order's units are back in stock: neither held
            // nor sold, and no longer the buyer's.
            HoldState::Voided => {}
            HoldState::Cancelled | HoldState::Expired => {
                gate.purge
                    .insert((row.expires_at_ms.saturating_add(window), id));
                gate.tombstones += 1;
            }
        }
        if stays_in_storage {
            let p = paid.expect("a paid row has its payment");
            let acked = gate.outbox.acked_seq;
            let void_seq = p.void.map(|v| v.outbox_seq);
            if p.outbox_seq > acked || void_seq.is_some_and(|s| s > acked) {
                self.links.insert(
                    id,
                    Link {
                        order_seq: p.outbox_seq,
                        void_seq,
                        buyer: row.buyer.as_str().into(),
                        quantity: row.quantity,
                        payment_ref: p.payment_ref.clone(),
                        confirmed_at_ms: p.confirmed_at_ms,
                        voided_at_ms: p.void.map(|v| v.voided_at_ms),
                    },
                );
            }
            gate.paid_buyers.insert(&row.buyer);
            match known {
                // The buyer has records in memory: its slot counts these.
                Some(slot) => {
                    gate.buyers.restock(slot, units);
                    gate.buyers.restore_archived(slot);
                }
                // Otherwise nothing of the buyer stays in memory but the
                // filter, and the count of such buyers with units.
                None => match &mut self.away {
                    Some((b, n)) if *b == row.buyer => *n += units,
                    group => {
                        if group.as_ref().is_some_and(|(_, n)| *n > 0) {
                            gate.buyers.restore_away();
                        }
                        *group = Some((row.buyer, units));
                    }
                },
            }
            return Ok(());
        }
        let buyer = gate.buyers.acquire(&row.buyer, Some(known));
        gate.buyers.restock(buyer, units);
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
        Ok(())
    }

    /// Checks what only the whole can show, and hands over the gate.
    pub fn finish(mut self) -> Result<Gate, RestoreError> {
        self.start()?;
        let mut gate = self.gate.take().expect("started");
        if self.away.as_ref().is_some_and(|(_, n)| *n > 0) {
            gate.buyers.restore_away();
        }
        let mut outbox = std::mem::take(&mut self.outbox);
        let committed = gate.held + gate.sold;
        if committed > gate.escrowed || gate.escrowed > limits::STOCK_UNITS_MAX {
            return Err(RestoreError::Oversold {
                committed,
                escrowed: gate.escrowed,
            });
        }
        gate.available = gate.escrowed - committed;
        check_escrow(&gate)?;
        outbox.sort_unstable_by_key(|e| e.seq);
        for entry in outbox {
            let expected = gate.outbox.next_seq();
            if entry.seq != expected {
                return Err(RestoreError::OutboxGap {
                    expected,
                    found: entry.seq,
                });
            }
            // Each order and void names its reservation, which must name it
            // back by the same sequence number and agree with what it says.
            let linked = match &entry.event {
                OutboxEvent::Stock { stock_total, .. } => *stock_total <= limits::STOCK_UNITS_MAX,
                OutboxEvent::Order { reservation_id, .. }
                | OutboxEvent::Void { reservation_id, .. } => {
                    let link = resident_link(&gate, *reservation_id)
                        .or_else(|| self.links.get(reservation_id).cloned());
                    link.is_some_and(|l| l.agrees(entry.seq, &entry.event))
                }
            };
            if !linked {
                return Err(RestoreError::BadReservation(
                    entry.event.reservation_id().unwrap_or(0),
                    "outbox entry without its reservation",
                ));
            }
            let pushed = gate.outbox.push_restored(entry);
            debug_assert!(pushed, "the sequence was checked above");
        }
        // And the other way: every order and void not yet acked has its
        // entry, so no stored sale or refund can miss the origin.
        let acked = gate.outbox.acked_seq;
        let resident = gate.store.iter().filter_map(|(id, _)| {
            let p = gate.store.paid(id)?;
            Some((id, (p.outbox_seq, p.void.map(|v| v.outbox_seq))))
        });
        let paid: Vec<_> = resident
            .chain(
                self.links
                    .iter()
                    .map(|(&id, l)| (id, (l.order_seq, l.void_seq))),
            )
            .collect();
        for (id, (order_seq, void_seq)) in paid {
            let mut links = vec![(order_seq, "confirmed reservation without its outbox entry")];
            if let Some(v) = void_seq {
                links.push((v, "voided reservation without its outbox entry"));
            }
            for (seq, why) in links {
                let entry_ok = gate
                    .outbox
                    .get(seq)
                    .is_some_and(|e| e.event.reservation_id() == Some(id));
                if seq > acked && !entry_ok {
                    return Err(RestoreError::BadReservation(id, why));
                }
            }
        }
        gate.assert_stock();
        Ok(gate)
    }
}

/// The link of a paid record the gate keeps in memory.
fn resident_link(gate: &Gate, id: ReservationId) -> Option<Link> {
    let r = gate.store.get(id)?;
    let p = gate.store.paid(id)?;
    Some(Link {
        order_seq: p.outbox_seq,
        void_seq: p.void.map(|v| v.outbox_seq),
        buyer: gate.buyers.id(r.buyer).into(),
        quantity: r.quantity,
        payment_ref: p.payment_ref.clone(),
        confirmed_at_ms: p.confirmed_at_ms,
        voided_at_ms: p.void.map(|v| v.voided_at_ms),
    })
}

/// The gate's own stock is its escrow: for home, what its account says it
/// holds of a pool that itself holds no more than the total; for a shard,
/// its grants applied less its returns sent.
fn check_escrow(gate: &Gate) -> Result<(), RestoreError> {
    let bad = |why| Err(RestoreError::BadEscrow(why));
    match &gate.escrow {
        Escrow::Single => Ok(()),
        Escrow::Home(pool) => {
            let count = pool.shards.len();
            if !(2..=usize::from(crate::escrow::limits::SHARDS_MAX)).contains(&count) {
                return bad("a shard count out of range");
            }
            if pool.shards.iter().any(|s| s.returned > s.granted) {
                return bad("a shard returned more than it was granted");
            }
            let escrowed: u64 = pool.shards.iter().map(|s| s.granted - s.returned).sum();
            if escrowed > pool.stock_total || pool.stock_total > limits::STOCK_UNITS_MAX {
                return bad("more escrowed than the stock total");
            }
            if pool.shards[0].granted - pool.shards[0].returned != gate.escrowed {
                return bad("home's stock is not its escrow");
            }
            Ok(())
        }
        Escrow::Shard(ledger) => {
            if ledger.index == 0
                || ledger.index >= ledger.count
                || ledger.count > crate::escrow::limits::SHARDS_MAX
            {
                return bad("a shard index out of range");
            }
            if ledger.returns_sent > ledger.grants_applied
                || ledger.grants_applied - ledger.returns_sent != gate.escrowed
            {
                return bad("a shard's stock is not its escrow");
            }
            Ok(())
        }
    }
}

fn check_admission(a: &crate::admission::Admission) -> Result<(), RestoreError> {
    let bad = |why| Err(RestoreError::BadAdmission(why));
    if a.buckets.values().any(|&n| n == 0) {
        return bad("an empty arrival second");
    }
    if a.buckets
        .keys()
        .next()
        .is_some_and(|&s| s < a.folded_until_s)
    {
        return bad("an arrival second inside the fold");
    }
    if a.buckets.len() > limits::QUEUE_BUCKETS_MAX {
        return bad("more arrival seconds than kept");
    }
    if a.base_milli > a.reported().saturating_mul(1000) {
        return bad("more admitted than reported");
    }
    if a.record.check().is_err() {
        return bad("an admission record out of order or past its bound");
    }
    Ok(())
}
