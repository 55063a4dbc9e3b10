//! The full audit of a gate: every invariant checked against the whole
//! state. O(n), for tests, the simulator and debugging; never a request path.

use std::collections::BTreeSet;

use hashbrown::HashMap;

use crate::archive::Archive;
use crate::gate::{paid_of, Gate};
use crate::outbox::OutboxEvent;
use crate::outcome::ReservationId;
use crate::store::{HoldState, Paid};

/// One record as the audit reads it, from memory or from the archive.
/// What a buyer holds: (units, records in memory, archived records).
type Usage = HashMap<String, (u32, u32, u32)>;

struct Audited {
    id: ReservationId,
    buyer: String,
    quantity: u32,
    state: HoldState,
    expires_at_ms: u64,
    paid: Option<Paid>,
    in_memory: bool,
}

impl Gate {
    /// Every record, in memory and (for an archived gate) in `archive`, in
    /// id order. A record in memory shadows its row in storage. A gate that
    /// is not archived holds every record, so storage adds nothing.
    fn audited(&self, archive: &dyn Archive) -> Result<Vec<Audited>, String> {
        let mut all: Vec<Audited> = self
            .store
            .iter()
            .map(|(id, r)| Audited {
                id,
                buyer: self.buyers.id(r.buyer).to_string(),
                quantity: r.quantity,
                state: r.state,
                expires_at_ms: r.expires_at_ms,
                paid: self.store.paid(id).cloned(),
                in_memory: true,
            })
            .collect();
        if self.archived {
            for row in archive.all_paid() {
                if self.store.get(row.id).is_some() {
                    continue;
                }
                let paid = paid_of(&row).map_err(|e| format!("archived {}: {e}", row.id))?;
                all.push(Audited {
                    id: row.id,
                    buyer: row.buyer.clone(),
                    quantity: row.quantity,
                    state: row.state,
                    expires_at_ms: row.expires_at_ms,
                    paid,
                    in_memory: false,
                });
            }
        }
        all.sort_unstable_by_key(|a| a.id);
        Ok(all)
    }

    /// Checks every invariant against the full state, the archived records
    /// included. O(n): for tests, the simulator and debugging, never a
    /// request path.
    pub fn audit(&self, archive: &dyn Archive) -> Result<(), String> {
        if self.available + self.held + self.sold != self.escrowed {
            return Err(format!(
                "I1: available {} + held {} + sold {} != escrowed {}",
                self.available, self.held, self.sold, self.escrowed
            ));
        }
        // A shard's waiting room is home's copy, not its own to keep.
        let own_room = !matches!(self.escrow, crate::sharded::Escrow::Shard(_));
        let advancing = self.product_available() > 0 && self.mode == crate::config::Mode::Active;
        if own_room && self.room.admission.advancing != advancing {
            return Err(format!(
                "the waiting room advances ({}) while the gate can sell ({advancing})",
                self.room.admission.advancing
            ));
        }
        if self.room.admission.base_milli > self.room.admission.reported().saturating_mul(1000) {
            return Err("the waiting room admitted more than was reported".into());
        }
        self.store.audit()?;
        self.buyers.audit()?;
        let records = self.audited(archive)?;
        let usage = self.audit_records(&records)?;
        self.audit_buyers(&usage)?;
        self.audit_outbox(&records)
    }

    /// The records against the counters and the indexes; what each buyer
    /// holds, by id: (units, records in memory, archived records).
    fn audit_records(&self, records: &[Audited]) -> Result<Usage, String> {
        let (mut held, mut sold, mut live, mut tomb) = (0u64, 0u64, 0u32, 0u32);
        let mut expiry = BTreeSet::new();
        let mut purge = BTreeSet::new();
        let mut usage: HashMap<String, (u32, u32, u32)> = HashMap::new();
        for r in records {
            let id = r.id;
            if id >= self.next_id {
                return Err(format!(
                    "reservation {id} at or above next id {}",
                    self.next_id
                ));
            }
            if r.paid.is_some() != r.state.paid() {
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
                HoldState::Voided => {
                    if r.paid.as_ref().and_then(|p| p.void).is_none() {
                        return Err(format!("voided reservation {id} has no void"));
                    }
                }
                HoldState::Cancelled | HoldState::Expired => {
                    tomb += 1;
                    purge.insert((r.expires_at_ms + self.config.idem_window_ms, id));
                }
            }
            let (units, refs, archived) = usage.entry(r.buyer.clone()).or_default();
            if r.in_memory {
                *refs += 1;
            } else {
                *archived += 1;
            }
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
        Ok(usage)
    }

    /// The buyers' slots, the paid buyers' filter and the per-buyer limit
    /// against what the records say each buyer holds.
    fn audit_buyers(&self, usage: &Usage) -> Result<(), String> {
        let slots: Vec<_> = self.buyers.iter().collect();
        // A buyer has a slot exactly while a record in memory names it, and
        // the slot counts the buyer's units and archived records; a buyer
        // with only archived records has none, is in the paid buyers'
        // filter, and is counted away if those hold units.
        let resident = usage.values().filter(|&&(_, refs, _)| refs > 0).count();
        if slots.len() != resident
            || slots.iter().any(|&(_, id, units, refs, archived)| {
                usage.get(id) != Some(&(units, refs, archived))
            })
        {
            return Err("per-buyer units or references disagree with records".into());
        }
        let mut away = 0;
        for (id, &(units, refs, _)) in usage {
            if refs == 0 {
                if !self.paid_buyers.may_contain(id) {
                    return Err(format!(
                        "buyer {id} has paid records but is not in the filter"
                    ));
                }
                away += u64::from(units > 0);
            }
        }
        if away != self.buyers.away() {
            return Err(format!(
                "{away} buyers have only paid units, but {} are counted",
                self.buyers.away()
            ));
        }
        if let Some((b, (u, _, _))) = usage.iter().find(|(_, u)| u.0 > self.config.per_buyer_max) {
            return Err(format!(
                "buyer {b} has {u} units, above per_buyer_max {}",
                self.config.per_buyer_max
            ));
        }
        Ok(())
    }

    /// Every order and void not yet acked is in the outbox under its own
    /// sequence, and only those (and stock totals) are.
    fn audit_outbox(&self, records: &[Audited]) -> Result<(), String> {
        let mut pending = 0;
        for r in records {
            let id = r.id;
            let Some(p) = &r.paid else {
                continue;
            };
            let order = (p.outbox_seq, "order");
            let void = p.void.map(|v| (v.outbox_seq, "void"));
            for (seq, what) in std::iter::once(order).chain(void) {
                if seq <= self.outbox.acked_seq {
                    continue;
                }
                pending += 1;
                let ok = match self.outbox.get(seq).map(|e| &e.event) {
                    Some(OutboxEvent::Order {
                        reservation_id,
                        quantity,
                        ..
                    }) => what == "order" && *reservation_id == id && *quantity == r.quantity,
                    Some(OutboxEvent::Void {
                        reservation_id,
                        quantity,
                        ..
                    }) => what == "void" && *reservation_id == id && *quantity == r.quantity,
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "the {what} of reservation {id} is missing from the outbox"
                    ));
                }
            }
        }
        let stock = self
            .outbox
            .iter()
            .filter(|e| matches!(e.event, OutboxEvent::Stock { .. }))
            .count();
        if pending + stock != self.outbox.backlog() {
            return Err("the outbox holds entries with no order or void".into());
        }
        Ok(())
    }
}
