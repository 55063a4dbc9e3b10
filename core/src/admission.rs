//! The waiting room: who may reserve, in what order, and when.
//!
//! Tickets are issued at the edge, with no round trip to the product's
//! object: a ticket names its buyer, when the buyer arrived, and a
//! tiebreak (a keyed hash of the buyer, which the buyer cannot choose or
//! re-roll). Every ticket has a place in one total order, its [`QueueKey`]:
//! - arrivals during the pre-queue, before `opens_at_ms`, come first, in
//!   the order of their tiebreaks: a lottery, since arriving early in the
//!   pre-queue must not pay (docs/admission.md, "The waiting room",
//!   says why);
//! - later arrivals follow, first come first served, ties by tiebreak.
//!
//! The object keeps a watermark in that order: every ticket below it is
//! admitted. The watermark advances by `admit_per_s` tickets per second,
//! and only while there is stock to sell and the sale is open. The object
//! never sees the tickets themselves, so the edges report how many they
//! issued (per arrival second, and in the pre-queue); the watermark is
//! placed by those counts, assuming tiebreaks are uniform (they are hash
//! outputs). Admission is therefore exact in order (FIFO: no ticket is
//! admitted before an earlier one) and approximate only in how many pass
//! per second.
//!
//! The state changes only at checkpoints (a report, a change of rate or of
//! whether the gate can sell), so a stored copy and the live one agree at
//! every instant: the admitted count in between is a function of the time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bloom::Bloom;
use crate::config::limits;
use crate::lottery::{AdmissionRecord, Lottery};
use crate::pow::JoinRate;

/// A ticket as the edge verified it: when its buyer arrived, and its
/// tiebreak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub arrived_ms: u64,
    pub tiebreak: u32,
    /// A ticket of the infinite queue (`crate::pow`): issued to a join
    /// without a valid proof of work, never admitted, never counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", alias = "shadow")]
    pub infinite_queue: bool,
}

/// A ticket's place in the queue's total order. The derived order is the
/// queue's: every pre-queue key before every regular one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum QueueKey {
    /// Arrived in the pre-queue: ordered by tiebreak, a lottery.
    Prequeue { tiebreak: u32, arrived_ms: u64 },
    /// Arrived once the sale opened: by arrival, ties by tiebreak.
    Regular { arrived_ms: u64, tiebreak: u32 },
}

impl QueueKey {
    /// The first key of all: a watermark here admits nobody.
    pub const MIN: QueueKey = QueueKey::Prequeue {
        tiebreak: 0,
        arrived_ms: 0,
    };
}

impl Ticket {
    pub fn key(&self, opens_at_ms: Option<u64>) -> QueueKey {
        if opens_at_ms.is_some_and(|o| self.arrived_ms < o) {
            QueueKey::Prequeue {
                tiebreak: self.tiebreak,
                arrived_ms: self.arrived_ms,
            }
        } else {
            QueueKey::Regular {
                arrived_ms: self.arrived_ms,
                tiebreak: self.tiebreak,
            }
        }
    }
}

/// What an edge counted since its last report: the tickets it issued, the
/// joins it refused, and the reserves it answered itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrivals {
    /// Arrivals before the opening.
    pub prequeue: u64,
    /// Later arrivals, as `(arrival second, count)`.
    pub per_second: Vec<(u64, u64)>,
    /// The first `limits::ARRIVALS_NAMED_MAX` of the tickets counted above, each by
    /// its buyer's tiebreak and where it was counted, so that the object
    /// counts a buyer who joins again only once (`forget_rejoins`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub named: Vec<Named>,
    /// Joins without a valid proof of work: answered with a fresh
    /// challenge, and sent to the infinite queue (a ticket never admitted,
    /// not counted above). They are counted in the stats, and do not raise
    /// an adaptive proof of work's level (`crate::pow`): they cost their
    /// senders nothing (a join without a payload is a challenge fetch), so
    /// counting them would let anyone raise the price for everyone.
    #[serde(default, skip_serializing_if = "is_zero", alias = "pow_refused")]
    pub pow_required: u64,
    #[serde(default, skip_serializing_if = "is_zero", alias = "pow_shadowed")]
    pub pow_infinite_queued: u64,
    /// Reserves the edge answered from its snapshot, and refused over the
    /// buyer's rate limit: for the product's history (`stats::Counters`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_sold_out: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_not_admitted: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_rate_limited: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A counted ticket: its tiebreak (a keyed hash of its buyer, which the
/// buyer cannot choose) and its arrival second, or `None` for the
/// pre-queue. A pair on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named(pub u32, pub Option<u64>);

impl Arrivals {
    /// No ticket to count (joins refused aside).
    pub fn is_empty(&self) -> bool {
        self.prequeue == 0 && self.per_second.iter().all(|&(_, n)| n == 0)
    }

    /// Nothing at all to report.
    pub fn is_nothing(&self) -> bool {
        self.is_empty()
            && self.pow_required == 0
            && self.pow_infinite_queued == 0
            && self.edge_sold_out == 0
            && self.edge_not_admitted == 0
            && self.edge_rate_limited == 0
    }

    /// The tickets of the report: joins refused or sent to the infinite
    /// queue are not among them.
    pub fn tickets(&self) -> u64 {
        let regular: u64 = self.per_second.iter().map(|&(_, n)| n).sum();
        self.prequeue.saturating_add(regular)
    }

    /// Counts one ticket.
    pub fn add(&mut self, ticket: &Ticket, opens_at_ms: Option<u64>) {
        let second = match ticket.key(opens_at_ms) {
            QueueKey::Prequeue { .. } => None,
            QueueKey::Regular { arrived_ms, .. } => Some(arrived_ms / 1000),
        };
        self.count(second, 1);
        if self.named.len() < limits::ARRIVALS_NAMED_MAX {
            self.named.push(Named(ticket.tiebreak, second));
        }
    }

    /// Adds `n` tickets of `second` (`None`: the pre-queue).
    fn count(&mut self, second: Option<u64>, n: u64) {
        match second {
            None => self.prequeue += n,
            Some(second) => match self.per_second.iter_mut().find(|(s, _)| *s == second) {
                Some((_, m)) => *m += n,
                None => self.per_second.push((second, n)),
            },
        }
    }

    /// Adds another report's tickets to this one, naming at most
    /// `limits::ARRIVALS_NAMED_MAX`.
    pub fn merge(&mut self, more: &Arrivals) {
        self.prequeue += more.prequeue;
        self.pow_required = self.pow_required.saturating_add(more.pow_required);
        self.pow_infinite_queued = self
            .pow_infinite_queued
            .saturating_add(more.pow_infinite_queued);
        self.edge_sold_out = self.edge_sold_out.saturating_add(more.edge_sold_out);
        self.edge_not_admitted = self
            .edge_not_admitted
            .saturating_add(more.edge_not_admitted);
        self.edge_rate_limited = self
            .edge_rate_limited
            .saturating_add(more.edge_rate_limited);
        for &(second, n) in &more.per_second {
            self.count(Some(second), n);
        }
        let room = limits::ARRIVALS_NAMED_MAX.saturating_sub(self.named.len());
        self.named.extend(more.named.iter().take(room));
    }

    /// Takes out the named tickets of buyers `joined` already holds (who
    /// joined before: a rejoin must not slow the room for everyone, as
    /// each counted ticket moves the watermark back), and adds the others'
    /// tiebreaks to it. Returns how many were taken out. The names are
    /// consumed: the object keeps only the counts.
    pub fn forget_rejoins(&mut self, joined: &mut Bloom) -> u64 {
        let mut forgotten = 0;
        for Named(tiebreak, second) in std::mem::take(&mut self.named) {
            let name = tiebreak.to_le_bytes();
            if !joined.may_contain_bytes(&name) {
                joined.insert_bytes(&name);
                continue;
            }
            let counted = match second {
                None => Some(&mut self.prequeue),
                Some(second) => self
                    .per_second
                    .iter_mut()
                    .find(|(s, _)| *s == second)
                    .map(|(_, n)| n),
            };
            // A named ticket was counted where it names, so its count is
            // there; a report that says otherwise loses nothing real.
            if let Some(n) = counted.filter(|n| **n > 0) {
                *n -= 1;
                forgotten += 1;
            }
        }
        forgotten
    }
}

/// The waiting room's rates and window, from the product's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub admit_per_s: u32,
    pub opens_at_ms: Option<u64>,
}

/// The watermark: every ticket whose key is below `below` is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermark {
    pub below: QueueKey,
}

impl Watermark {
    pub fn admits(&self, key: QueueKey) -> bool {
        key < self.below
    }
}

/// A map keyed by a second, read back from JSON whichever way its keys
/// come. JSON writes them as strings. Read straight into the map, serde
/// turns them into numbers; read as part of a message serde buffers first
/// (an internally tagged enum, such as the `Command::Push` that carries
/// home's rules and waiting room to a stock shard), the key reaches the
/// map as the string, which a `u64` key refuses: the shard could not read
/// home's push while any ticket waited, so every drain failed and a
/// sharded product with a waiting room never proved itself sold out.
mod seconds {
    use std::collections::BTreeMap;

    use serde::de::{Deserializer, Error, Visitor};
    use serde::Deserialize;

    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Second(u64);

    impl<'de> Deserialize<'de> for Second {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Second, D::Error> {
            struct Key;
            impl Visitor<'_> for Key {
                type Value = Second;

                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a second, as a number or a string of digits")
                }

                fn visit_u64<E: Error>(self, v: u64) -> Result<Second, E> {
                    Ok(Second(v))
                }

                fn visit_i64<E: Error>(self, v: i64) -> Result<Second, E> {
                    u64::try_from(v).map(Second).map_err(E::custom)
                }

                fn visit_str<E: Error>(self, v: &str) -> Result<Second, E> {
                    v.parse().map(Second).map_err(E::custom)
                }
            }
            d.deserialize_any(Key)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<u64, u64>, D::Error> {
        let map = BTreeMap::<Second, u64>::deserialize(d)?;
        Ok(map.into_iter().map(|(Second(s), n)| (s, n)).collect())
    }
}

/// The waiting room as a gate keeps it: its progress, which is stored, and
/// what it reckons in memory of who joined and how fast.
#[derive(Debug, Default)]
pub struct Room {
    /// The counts and progress (stored).
    pub(crate) admission: Admission,
    /// The tiebreaks of the buyers whose tickets the room counted, so that
    /// one who joins again is not counted again. Memory only, made at the
    /// first named report: after a reload, a buyer's next join is counted
    /// once more.
    pub(crate) joined: Option<Bloom>,
    /// The joins the edges reported lately, which an adaptive proof of
    /// work's level follows (`pow.rs`). Memory only.
    pub(crate) joins: JoinRate,
}

impl Room {
    /// An edge's report of the tickets it issued, each buyer counted once:
    /// every counted ticket moves the watermark back for everyone after it,
    /// so a buyer rejoining in a loop (at the buyers' rate limit) would
    /// slow the room for all. Returns the rejoins left uncounted, and
    /// whether the stored progress changed.
    pub(crate) fn note_arrivals(
        &mut self,
        now_ms: u64,
        rules: Rules,
        arrivals: &Arrivals,
    ) -> (u64, bool) {
        let mut arrivals = arrivals.clone();
        let mut forgotten = 0;
        if !arrivals.named.is_empty() {
            let joined = self
                .joined
                .get_or_insert_with(|| Bloom::with_capacity(limits::JOINED_SIZED_FOR));
            forgotten = arrivals.forget_rejoins(joined);
        }
        // The join rate an adaptive proof of work follows is the tickets
        // counted, each buyer once: a rejoin and a join without a valid
        // solution cost nothing, and must not raise the price for all.
        self.joins.note(now_ms, arrivals.tickets());
        let changed = !arrivals.is_empty();
        if changed {
            self.admission.record(now_ms, rules, &arrivals);
        }
        (forgotten, changed)
    }

    /// Joins per second the edges reported over the last
    /// `POW_RATE_WINDOW_S`.
    pub fn joins_per_s(&self, now_ms: u64) -> u64 {
        self.joins.per_s(now_ms)
    }
}

/// The waiting room's counts and admission progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// Tickets reported from the pre-queue.
    pub prequeue: u64,
    /// Regular tickets whose seconds were folded away (all admitted, or
    /// past `QUEUE_BUCKETS_MAX` seconds): all before `folded_until_s`.
    pub folded: u64,
    pub folded_until_s: u64,
    /// Regular tickets reported, per arrival second.
    #[serde(deserialize_with = "seconds::deserialize")]
    pub buckets: BTreeMap<u64, u64>,
    /// Admitted tickets, in thousandths, as of `base_at_ms`.
    pub base_milli: u64,
    pub base_at_ms: u64,
    /// Whether the count grows after `base_at_ms` (stock to sell, and the
    /// sale not paused or closed).
    pub advancing: bool,
    /// The highest watermark given out before the last report. A report
    /// that arrives late (tickets from a second the watermark has passed,
    /// or from the pre-queue after the opening) moves the count-based
    /// watermark back; this floor keeps everyone admitted admitted.
    pub floor: Option<QueueKey>,
    /// The sale's lottery key, whose hash orders the pre-queue
    /// (`lottery.rs`).
    #[serde(default)]
    pub lottery: Lottery,
    /// The watermark over time, for anyone to check the order by.
    #[serde(default)]
    pub record: AdmissionRecord,
}

impl Admission {
    /// Every ticket reported.
    pub fn reported(&self) -> u64 {
        self.prequeue + self.folded + self.buckets.values().sum::<u64>()
    }

    /// Admitted tickets at `now_ms`, in thousandths: the base, plus
    /// `admit_per_s` per second since then while advancing (and the sale is
    /// open), never more than were reported, so that no credit is banked
    /// for a burst later.
    pub fn admitted_milli(&self, now_ms: u64, rules: Rules) -> u64 {
        let cap = self.reported().saturating_mul(1000);
        if !self.advancing || rules.admit_per_s == 0 {
            return self.base_milli.min(cap);
        }
        let from = self.base_at_ms.max(rules.opens_at_ms.unwrap_or(0));
        let grown = u64::from(rules.admit_per_s).saturating_mul(now_ms.saturating_sub(from));
        self.base_milli
            .saturating_add(grown)
            .min(cap.max(self.base_milli))
    }

    /// Fixes the admitted count at `now_ms` under the rules that held until
    /// now, and from now on advances or not.
    pub fn checkpoint(&mut self, now_ms: u64, rules: Rules, advancing: bool) {
        self.base_milli = self.admitted_milli(now_ms, rules);
        self.base_at_ms = self.base_at_ms.max(now_ms);
        self.advancing = advancing;
    }

    /// A checkpoint for a change that may admit more slowly from now on
    /// (the room stops, or the admin changed its rules): the count first
    /// grows under `rules_before` for `lag_ms` more, then follows the new
    /// state. An edge's snapshot taken before `now_ms` goes on telling
    /// buyers they are admitted under the old rules for up to `lag_ms`
    /// (the snapshot's freshness), and a buyer a poll called admitted must
    /// be admitted when they reserve. The cost: at most `lag_ms` of the old
    /// rate admitted at once, to a room that is stopping.
    pub fn checkpoint_after_lag(
        &mut self,
        now_ms: u64,
        rules_before: Rules,
        advancing: bool,
        lag_ms: u64,
    ) {
        let promised = self.admitted_milli(now_ms.saturating_add(lag_ms), rules_before);
        self.checkpoint(now_ms, rules_before, advancing);
        if promised > self.base_milli {
            self.base_milli = promised;
            // Flat until the promise runs out: the new rules count from
            // there.
            self.base_at_ms = self.base_at_ms.max(now_ms.saturating_add(lag_ms));
        }
    }

    /// Adds an edge's report, after a checkpoint so that the new arrivals
    /// are not admitted by time that passed before they were reported.
    pub fn record(&mut self, now_ms: u64, rules: Rules, arrivals: &Arrivals) {
        let advancing = self.advancing;
        self.checkpoint(now_ms, rules, advancing);
        let before = self.watermark(now_ms, rules).below;
        self.floor = Some(self.floor.map_or(before, |f| f.max(before)));
        self.prequeue = self.prequeue.saturating_add(arrivals.prequeue);
        for &(second, n) in &arrivals.per_second {
            if n == 0 {
                continue;
            }
            if second < self.folded_until_s {
                // A late report for a second already folded: it joins the
                // fold (it is that old).
                self.folded = self.folded.saturating_add(n);
            } else {
                *self.buckets.entry(second).or_insert(0) += n;
            }
        }
        self.compact();
    }

    /// Folds seconds that are wholly admitted, and the oldest seconds past
    /// the bucket limit, into one count.
    fn compact(&mut self) {
        let admitted = self.base_milli / 1000;
        while let Some((&second, &n)) = self.buckets.first_key_value() {
            let before = self.prequeue + self.folded;
            let wholly_admitted = before + n <= admitted;
            if !wholly_admitted && self.buckets.len() <= limits::QUEUE_BUCKETS_MAX {
                break;
            }
            self.buckets.remove(&second);
            self.folded += n;
            self.folded_until_s = second + 1;
        }
    }

    /// The watermark at `now_ms`: never below the floor.
    pub fn watermark(&self, now_ms: u64, rules: Rules) -> Watermark {
        let counted = self.counted_watermark(now_ms, rules);
        match self.floor {
            Some(floor) if floor > counted.below => Watermark { below: floor },
            _ => counted,
        }
    }

    /// The watermark placed by the counts alone.
    fn counted_watermark(&self, now_ms: u64, rules: Rules) -> Watermark {
        let admitted = u128::from(self.admitted_milli(now_ms, rules));
        let prequeue = u128::from(self.prequeue) * 1000;
        if admitted < prequeue {
            // A share of the pre-queue's tiebreak space, which is uniform.
            let tiebreak = (admitted << 32) / prequeue;
            return Watermark {
                below: QueueKey::Prequeue {
                    tiebreak: tiebreak as u32,
                    arrived_ms: 0,
                },
            };
        }
        if self.folded == 0 && self.buckets.is_empty() {
            // No regular ticket: every pre-queue ticket (if any) is in.
            let below = if self.prequeue > 0 {
                QueueKey::Regular {
                    arrived_ms: 0,
                    tiebreak: 0,
                }
            } else {
                QueueKey::MIN
            };
            return Watermark { below };
        }
        let mut left = admitted - prequeue;
        let folded = u128::from(self.folded) * 1000;
        if left < folded || self.buckets.is_empty() {
            // Inside the fold, or everything reported: the fold's end.
            return Watermark {
                below: QueueKey::Regular {
                    arrived_ms: self.folded_until_s.saturating_mul(1000),
                    tiebreak: 0,
                },
            };
        }
        left -= folded;
        for (&second, &n) in &self.buckets {
            let bucket = u128::from(n) * 1000;
            if left < bucket {
                // A share of the second's span of (millisecond, tiebreak).
                let point = (left << 32) * 1000 / bucket;
                return Watermark {
                    below: QueueKey::Regular {
                        arrived_ms: second * 1000 + (point >> 32) as u64,
                        tiebreak: (point & 0xffff_ffff) as u32,
                    },
                };
            }
            left -= bucket;
        }
        let last = self.buckets.last_key_value().map_or(0, |(&s, _)| s);
        Watermark {
            below: QueueKey::Regular {
                arrived_ms: (last + 1) * 1000,
                tiebreak: 0,
            },
        }
    }

    /// About how many reported tickets are ahead of `key` and not yet
    /// admitted: its estimated rank, less the admitted count.
    pub fn position(&self, key: QueueKey, now_ms: u64, rules: Rules) -> u64 {
        let rank_milli: u128 = match key {
            QueueKey::Prequeue { tiebreak, .. } => {
                (u128::from(self.prequeue) * 1000 * u128::from(tiebreak)) >> 32
            }
            QueueKey::Regular {
                arrived_ms,
                tiebreak,
            } => {
                let second = arrived_ms / 1000;
                let mut rank = u128::from(self.prequeue + self.folded) * 1000;
                for (&s, &n) in self.buckets.range(..=second) {
                    let bucket = u128::from(n) * 1000;
                    if s < second {
                        rank += bucket;
                    } else {
                        let point = (u128::from(arrived_ms % 1000) << 32) | u128::from(tiebreak);
                        rank += bucket * point / (1000u128 << 32);
                    }
                }
                rank
            }
        };
        let admitted = u128::from(self.admitted_milli(now_ms, rules));
        (rank_milli.saturating_sub(admitted) / 1000) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u64 = 1_000_000;

    fn rules(rate: u32) -> Rules {
        Rules {
            admit_per_s: rate,
            opens_at_ms: Some(OPEN),
        }
    }

    #[test]
    fn nothing_is_admitted_before_the_opening_and_the_prequeue_goes_first() {
        let mut a = Admission::default();
        let r = rules(10);
        a.checkpoint(OPEN - 5_000, r, true);
        let early = Ticket {
            arrived_ms: OPEN - 4_000,
            tiebreak: 1 << 31,
            infinite_queue: false,
        };
        let late = Ticket {
            arrived_ms: OPEN + 10,
            tiebreak: 0,
            infinite_queue: false,
        };
        let mut arrivals = Arrivals::default();
        arrivals.add(&early, r.opens_at_ms);
        arrivals.add(&late, r.opens_at_ms);
        a.record(OPEN - 3_000, r, &arrivals);
        assert_eq!(a.reported(), 2);
        let w = a.watermark(OPEN - 1, r);
        assert!(!w.admits(early.key(r.opens_at_ms)));
        // 10 per second: 0.1 s admits one ticket's worth: the pre-queue's.
        let w = a.watermark(OPEN + 100, r);
        assert!(w.admits(early.key(r.opens_at_ms)));
        assert!(!w.admits(late.key(r.opens_at_ms)));
        let w = a.watermark(OPEN + 200, r);
        assert!(w.admits(late.key(r.opens_at_ms)));
    }

    /// An edge holds a copy of the room taken before it stopped, and
    /// extrapolates it for up to the lag: every ticket that copy admits,
    /// the room admits after the stop too, and after a rate cut. (The
    /// odds test saw a poll say admitted and the reserve `not_admitted`
    /// when the last unit was taken between the two.)
    #[test]
    fn what_an_edge_extrapolated_before_a_stop_stays_admitted() {
        const LAG: u64 = 1_000;
        let r = rules(10);
        let mut arrivals = Arrivals::default();
        for i in 0..1_000 {
            arrivals.add(
                &Ticket {
                    arrived_ms: OPEN + i,
                    tiebreak: 7,
                    infinite_queue: false,
                },
                r.opens_at_ms,
            );
        }
        for (stop, after) in [(true, r), (false, rules(2)), (false, rules(0))] {
            let mut room = Admission::default();
            room.checkpoint(OPEN, r, true);
            room.record(OPEN, r, &arrivals);
            let edge = room.clone();
            let at = OPEN + 3_000;
            room.checkpoint_after_lag(at, r, !stop, LAG);
            for t in (at..=at + LAG).step_by(50) {
                let promised = edge.watermark(t, r).below;
                for later in [t, t + 10_000] {
                    assert!(
                        room.watermark(later, after).below >= promised,
                        "stop {stop}, rules after {after:?}: the edge's {promised:?} at {t}"
                    );
                }
            }
            // Then the new state: no growth while stopped, the new rate
            // from the end of the lag.
            let flat = room.admitted_milli(at + LAG, after);
            assert_eq!(flat, edge.admitted_milli(at + LAG, r));
            let grown = room.admitted_milli(at + LAG + 1_000, after);
            assert_eq!(
                grown - flat,
                if stop {
                    0
                } else {
                    u64::from(after.admit_per_s) * 1_000
                }
            );
        }
    }

    /// The infinite queue's flag and count were called `shadow`: a ticket
    /// or a report written under the old names reads the same.
    #[test]
    fn the_old_names_of_the_infinite_queue_still_read() {
        let t: Ticket =
            serde_json::from_str(r#"{"arrived_ms":1,"tiebreak":2,"shadow":true}"#).unwrap();
        assert!(t.infinite_queue);
        let a: Arrivals =
            serde_json::from_str(r#"{"prequeue":0,"per_second":[],"pow_shadowed":3}"#).unwrap();
        assert_eq!(a.pow_infinite_queued, 3);
        let a: Arrivals =
            serde_json::from_str(r#"{"prequeue":0,"per_second":[],"pow_refused":5}"#).unwrap();
        assert_eq!(a.pow_required, 5);
        let back = serde_json::to_string(&t).unwrap();
        assert!(back.contains("\"infinite_queue\":true"), "{back}");
    }

    /// The per-second buckets read back from JSON both straight (as
    /// storage reads them) and buffered inside an internally tagged enum
    /// (as a shard reads home's `Command::Push`).
    #[test]
    fn a_room_with_tickets_waiting_reads_back_inside_a_tagged_message() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op")]
        enum Message {
            Push { admission: Admission },
        }
        let mut a = Admission::default();
        a.checkpoint(OPEN, rules(1), true);
        let mut arrivals = Arrivals::default();
        for (i, s) in [3u64, 3, 9].into_iter().enumerate() {
            let t = Ticket {
                arrived_ms: OPEN + s * 1_000,
                tiebreak: i as u32,
                infinite_queue: false,
            };
            arrivals.add(&t, Some(OPEN));
        }
        a.record(OPEN, rules(1), &arrivals);
        assert_eq!(a.buckets.len(), 2);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Admission>(&json).unwrap(), a);
        let m = Message::Push { admission: a };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
        // A key that is no second is refused.
        let bad = json.replacen("\"buckets\":{\"", "\"buckets\":{\"x", 1);
        assert!(serde_json::from_str::<Message>(&bad).is_err(), "{bad}");
    }

    #[test]
    fn no_credit_is_banked_while_the_queue_is_empty() {
        let mut a = Admission::default();
        let r = rules(1);
        a.checkpoint(OPEN, r, true);
        // An hour with nobody waiting, then a crowd of 100.
        let mut arrivals = Arrivals::default();
        for i in 0..100 {
            arrivals.add(
                &Ticket {
                    arrived_ms: OPEN + 3_600_000,
                    tiebreak: i * 1_000_000,
                    infinite_queue: false,
                },
                r.opens_at_ms,
            );
        }
        a.record(OPEN + 3_600_000, r, &arrivals);
        assert_eq!(a.admitted_milli(OPEN + 3_600_000, r), 0);
        assert_eq!(a.admitted_milli(OPEN + 3_610_000, r), 10_000);
    }

    #[test]
    fn the_watermark_stops_while_not_advancing() {
        let mut a = Admission::default();
        let r = rules(100);
        let mut arrivals = Arrivals::default();
        for i in 0..1000 {
            arrivals.add(
                &Ticket {
                    arrived_ms: OPEN + i,
                    tiebreak: 0,
                    infinite_queue: false,
                },
                r.opens_at_ms,
            );
        }
        a.record(OPEN, r, &arrivals);
        a.checkpoint(OPEN, r, true);
        a.checkpoint(OPEN + 1_000, r, false);
        assert_eq!(a.admitted_milli(OPEN + 60_000, r), 100_000);
        a.checkpoint(OPEN + 60_000, r, true);
        assert_eq!(a.admitted_milli(OPEN + 61_000, r), 200_000);
        assert_eq!(
            a.position(
                Ticket {
                    arrived_ms: OPEN + 500,
                    tiebreak: 0,
                    infinite_queue: false
                }
                .key(r.opens_at_ms),
                OPEN + 61_000,
                r
            ),
            300
        );
    }
}
