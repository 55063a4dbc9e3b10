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
    /// Holds confirmed and cancelled: changes of state, where a confirm or
    /// a cancel answered again (`confirm.confirmed` of a record already
    /// confirmed) counts once among the outcomes and not here.
    pub holds_confirmed: u64,
    pub holds_cancelled: u64,
    /// Tickets of buyers who had joined the waiting room before, reported
    /// by the edges and not counted again.
    pub rejoins_uncounted: u64,
    /// Joins the edges refused for want of a valid proof of work, and
    /// those they sent to the infinite queue (`pow.rs`).
    pub pow_required: u64,
    pub pow_infinite_queued: u64,
    /// Reserves the edges answered themselves, from their snapshot
    /// (`sold_out`, `not_admitted`), and those they refused over the
    /// buyer's rate limit: reported with the edges' refreshes, so they
    /// reach home up to a refresh late, and an isolate that dies loses
    /// those it had not reported.
    pub edge_sold_out: u64,
    pub edge_not_admitted: u64,
    pub edge_rate_limited: u64,
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
            holds_confirmed,
            holds_cancelled,
            rejoins_uncounted,
            pow_required,
            pow_infinite_queued,
            edge_sold_out,
            edge_not_admitted,
            edge_rate_limited,
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
        f(holds_confirmed, other.holds_confirmed);
        f(holds_cancelled, other.holds_cancelled);
        f(rejoins_uncounted, other.rejoins_uncounted);
        f(pow_required, other.pow_required);
        f(pow_infinite_queued, other.pow_infinite_queued);
        f(edge_sold_out, other.edge_sold_out);
        f(edge_not_admitted, other.edge_not_admitted);
        f(edge_rate_limited, other.edge_rate_limited);
    }

    /// Every nonzero count with its name: `operation.code` for an
    /// outcome's (`reserve.sold_out`), the field's name for the others.
    /// The form a history bucket's counts are stored and served in.
    pub fn named(&self) -> Vec<(String, u64)> {
        let outcomes = self.iter().map(|(op, code, n)| (format!("{op}.{code}"), n));
        let others = self
            .others()
            .into_iter()
            .map(|(name, n)| (name.to_string(), n));
        outcomes.chain(others).filter(|&(_, n)| n > 0).collect()
    }

    /// Sets the count `name` (as `named` names it); false for a name no
    /// counter has.
    pub fn set_named(&mut self, name: &str, n: u64) -> bool {
        let slot = match name.split_once('.') {
            Some(("reserve", code)) => ReserveKind::ALL
                .iter()
                .position(|k| k.code() == code)
                .map(|i| &mut self.reserve[i]),
            Some(("confirm", code)) => ConfirmKind::ALL
                .iter()
                .position(|k| k.code() == code)
                .map(|i| &mut self.confirm[i]),
            Some(("cancel", code)) => CancelKind::ALL
                .iter()
                .position(|k| k.code() == code)
                .map(|i| &mut self.cancel[i]),
            Some(_) => None,
            None => match name {
                "holds_expired" => Some(&mut self.holds_expired),
                "holds_confirmed" => Some(&mut self.holds_confirmed),
                "holds_cancelled" => Some(&mut self.holds_cancelled),
                "rejoins_uncounted" => Some(&mut self.rejoins_uncounted),
                // `pow_refused` is how builds before the name was the
                // answer's own stored it.
                "pow_required" | "pow_refused" => Some(&mut self.pow_required),
                "pow_infinite_queued" => Some(&mut self.pow_infinite_queued),
                "edge_sold_out" => Some(&mut self.edge_sold_out),
                "edge_not_admitted" => Some(&mut self.edge_not_admitted),
                "edge_rate_limited" => Some(&mut self.edge_rate_limited),
                _ => None,
            },
        };
        slot.map(|s| *s = n).is_some()
    }

    /// The counters that are not an outcome's, by name.
    fn others(&self) -> [(&'static str, u64); 9] {
        [
            ("holds_expired", self.holds_expired),
            ("holds_confirmed", self.holds_confirmed),
            ("holds_cancelled", self.holds_cancelled),
            ("rejoins_uncounted", self.rejoins_uncounted),
            ("pow_required", self.pow_required),
            ("pow_infinite_queued", self.pow_infinite_queued),
            ("edge_sold_out", self.edge_sold_out),
            ("edge_not_admitted", self.edge_not_admitted),
            ("edge_rate_limited", self.edge_rate_limited),
        ]
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

/// Counters travel and are stored as an object of their nonzero counts by
/// name (`named`): `{"reserve.reserved": 3, "pow_required": 1}`. A name no
/// counter has is refused, so a stored history read by an older build
/// fails loudly rather than dropping counts.
impl serde::Serialize for Counters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let named = self.named();
        let mut m = s.serialize_map(Some(named.len()))?;
        for (name, n) in &named {
            m.serialize_entry(name, n)?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for Counters {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Counters, D::Error> {
        struct Named;
        impl<'de> serde::de::Visitor<'de> for Named {
            type Value = Counters;
            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("counts by name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Counters, A::Error> {
                let mut c = Counters::default();
                while let Some((name, n)) = a.next_entry::<String, u64>()? {
                    if !c.set_named(&name, n) {
                        return Err(serde::de::Error::custom(format!(
                            "no counter is named {name}"
                        )));
                    }
                }
                Ok(c)
            }
        }
        d.deserialize_map(Named)
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
    pub escrow: Option<crate::escrow::Overview>,
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

    /// Every slot has a name that reads back into the same slot: fill each
    /// with a distinct count (through `each_mut`, the one list of fields),
    /// name them, and read the names into empty counters.
    #[test]
    fn every_slot_is_named_and_reads_back() {
        let mut c = Counters::default();
        let next = std::cell::Cell::new(0u64);
        c.each_mut(&Counters::default(), |a, _| {
            next.set(next.get() + 1);
            *a = next.get();
        });
        let named = c.named();
        assert_eq!(named.len() as u64, next.get(), "{named:?}");
        let mut back = Counters::default();
        for (name, n) in &named {
            assert!(back.set_named(name, *n), "{name}");
        }
        assert_eq!(back, c);
        assert!(!back.set_named("reserve.no_such_code", 1));
        assert!(!back.set_named("no_such_counter", 1));
        assert!(!back.set_named("refund.reserved", 1));
    }

    /// Counters stored before the proof-of-work refusals took their
    /// answer's name read into the same slot, and are written back new.
    #[test]
    fn the_old_name_of_the_proof_of_work_refusals_still_reads() {
        let c: Counters = serde_json::from_str(r#"{"pow_refused":4}"#).unwrap();
        assert_eq!(c.pow_required, 4);
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"pow_required":4}"#);
    }
}
