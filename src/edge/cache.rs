//! What the edge knows of a product between trips to its object: a
//! snapshot, fetched at most about once a second per isolate, and the
//! answers the edge gives from it. Pure, so every rule is tested natively;
//! the Worker holds one `EdgeCache` per isolate.
//!
//! A hot product gets far more requests than its one object can take, so
//! the edge answers what it can without it:
//! - product reads, from the snapshot's product view;
//! - waiting-room polls (position, ETA, admitted or not), from the
//!   snapshot's admission state, with the same code the object decides by;
//! - reserves on a sold-out product from buyers with no units (the
//!   snapshot's buyer filter), with `sold_out`;
//! - reserves whose ticket has not been admitted, with `not_admitted`.
//!
//! Everything else goes to the object, which decides. A snapshot older
//! than `SNAPSHOT_FRESH_MS` answers nothing but reads served while one
//! refresh is in flight, and tickets issued here are reported to the
//! object with the next refresh (they place its watermark).

use std::collections::HashMap;
use std::rc::Rc;

use flashgate_core::{odds, Arrivals, QueueKey, Ticket};
use flashgate_wire::SaleState;

use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::http::time::rfc3339;
use crate::limits::{
    EDGE_NAMED_MAX, EDGE_PRODUCTS_MAX, REFRESH_AHEAD_MS, REFRESH_WAIT_MAX_MS, SNAPSHOT_FRESH_MS,
    SNAPSHOT_STALE_MAX_MS,
};
use crate::protocol::buyer_filter::BuyerFilter;
use crate::protocol::snapshot::{RoomSnapshot, Snapshot, Standing};

impl Snapshot {
    /// A snapshot as the object sent it, its buyer filter decoded. `None`
    /// if it is not one (the edge then answers nothing from it).
    /// A snapshot as the object sent it, asked for at `fetched_at_ms`, its
    /// buyer filters decoded. `None` if it is not one (the edge then
    /// answers nothing from it).
    pub fn parse(bytes: &[u8], fetched_at_ms: u64) -> Option<Snapshot> {
        let mut s: Snapshot = serde_json::from_slice(bytes).ok()?;
        if let Some(sold_out) = s.sold_out.as_mut() {
            let filters = std::mem::take(&mut sold_out.buyers);
            sold_out.buyers = filters
                .into_iter()
                .map(BuyerFilter::decode)
                .collect::<Option<Vec<_>>>()?;
        }
        s.fetched_at_ms = fetched_at_ms;
        Some(s)
    }

    /// How old the snapshot's word that nothing is left is at `now_ms`:
    /// the proof's age when it was taken, and the snapshot's own since.
    /// `None` if it says no such thing.
    pub fn sold_out_age(&self, now_ms: u64) -> Option<u64> {
        let s = self.sold_out.as_ref()?;
        Some(now_ms.saturating_sub(self.fetched_at_ms) + s.age_ms)
    }

    /// The edge's own answer to a reserve, if it can give one: `sold_out`
    /// to a buyer with no units in `shard` (its own) on an open product
    /// with nothing left anywhere, within `SOLD_OUT_LAG_MS`; or
    /// `not_admitted` to a ticket whose turn has not come.
    pub fn reserve_answer(
        &self,
        buyer: &str,
        shard: u16,
        ticket: Option<&Ticket>,
        now_ms: u64,
    ) -> Option<Problem> {
        if self.state == SaleState::Open
            && self
                .sold_out_age(now_ms)
                .is_some_and(|age| age < SNAPSHOT_FRESH_MS)
        {
            let filter = self
                .sold_out
                .as_ref()
                .and_then(|s| s.buyers.get(usize::from(shard)));
            if filter.is_some_and(|f| !f.may_contain(buyer)) {
                return Some(Problem::new(
                    ProblemCode::SoldOut,
                    "no unit is available anywhere: every unit is held or sold",
                ));
            }
        }
        if let (Some(q), Some(t)) = (&self.room, ticket) {
            let standing = self.standing(q, t, None, now_ms);
            if !standing.admitted && self.state == SaleState::Open {
                return Some(Problem::not_admitted(
                    standing.position.max(1),
                    standing.eta_s,
                ));
            }
        }
        None
    }

    /// Where a ticket stands, as the object would decide it now, counting
    /// too the tickets this isolate issued that no snapshot has yet
    /// (`unreported`): those that arrived in an earlier second (or in the
    /// pre-queue) are ahead of a regular ticket. Without them a join's first
    /// standing could say 1 and the next poll 3.
    pub fn standing(
        &self,
        q: &RoomSnapshot,
        ticket: &Ticket,
        unreported: Option<&Arrivals>,
        now_ms: u64,
    ) -> Standing {
        let rules = q.rules();
        let key = ticket.key(rules.opens_at_ms);
        // The infinite queue's tickets wait as any other, for ever.
        let admitted = !ticket.infinite_queue && q.admission.watermark(now_ms, rules).admits(key);
        let ahead_unreported = match (key, unreported) {
            (
                QueueKey::Regular {
                    arrived_ms,
                    tiebreak,
                },
                Some(a),
            ) => {
                let second = arrived_ms / 1000;
                // Those of its own second are placed as the object will
                // place them once reported: spread evenly over the second,
                // so the share before this ticket's point is ahead of it.
                let point = (u128::from(arrived_ms % 1000) << 32) | u128::from(tiebreak);
                a.prequeue
                    + a.per_second
                        .iter()
                        .map(|&(s, n)| match s.cmp(&second) {
                            std::cmp::Ordering::Less => n,
                            std::cmp::Ordering::Equal => {
                                (u128::from(n) * point / (1000u128 << 32)) as u64
                            }
                            std::cmp::Ordering::Greater => 0,
                        })
                        .sum::<u64>()
            }
            _ => 0,
        };
        // Not admitted means someone is still ahead, whatever the counts say.
        let position = if admitted {
            0
        } else {
            (q.admission.position(key, now_ms, rules) + ahead_unreported).max(1)
        };
        let advancing = q.admission.advancing && self.state != SaleState::Closed;
        let eta_s = (advancing && q.admit_per_s > 0).then(|| {
            let wait_open = rules
                .opens_at_ms
                .map_or(0, |o| o.saturating_sub(now_ms).div_ceil(1000));
            wait_open + position.div_ceil(u64::from(q.admit_per_s))
        });
        let ahead = if admitted { 0 } else { position };
        Standing {
            admitted,
            position,
            eta_s,
            odds: odds(self.available, self.held, ahead, q.uptake),
        }
    }

    /// The room closes once the sale is open and no unit is available or
    /// held: no hold can expire and return one, so waiting is pointless,
    /// and every poll says `sold_out` (a restock opens it again).
    pub fn room_closed(&self) -> bool {
        self.state == SaleState::Open && self.available == 0 && self.held == 0
    }

    /// Whether a buyer may join the waiting room now.
    pub fn may_join(&self, now_ms: u64) -> Result<&RoomSnapshot, Problem> {
        let Some(q) = &self.room else {
            return Err(Problem::new(
                ProblemCode::NoWaitingRoom,
                "this product has no waiting room: reserve directly",
            ));
        };
        if self.state == SaleState::Closed {
            return Err(Problem::new(ProblemCode::Closed, "the sale is over"));
        }
        if self.room_closed() {
            return Err(Problem::new(
                ProblemCode::SoldOut,
                "every unit is sold and none is held: nothing can come back",
            ));
        }
        if let Some(opens) = q.opens_at_ms {
            let queue_opens = opens.saturating_sub(q.prequeue_ms);
            if now_ms < queue_opens {
                return Err(Problem::new(
                    ProblemCode::NotOpen,
                    format!("the waiting room opens at {}", rfc3339(queue_opens)),
                )
                .with("opens_at", rfc3339(queue_opens))
                .with("opens_at_ms", queue_opens));
            }
        }
        Ok(q)
    }
}

/// What the edge knows of one product.
#[derive(Clone)]
pub enum Known {
    Product {
        snapshot: Rc<Snapshot>,
        /// The product view, rendered once per snapshot.
        body: Rc<Vec<u8>>,
    },
    /// The object has no such product.
    Unknown,
}

pub struct Entry {
    pub fetched_at_ms: u64,
    pub known: Known,
}

/// The isolate's snapshots, and the tickets issued here that the object
/// has not been told of yet.
#[derive(Default)]
pub struct EdgeCache {
    entries: HashMap<String, Entry>,
    pending: HashMap<String, Arrivals>,
    /// Reports sent with a refresh whose snapshot has not come back: the
    /// snapshot in hand does not count them yet, so standings still must.
    in_flight: HashMap<String, Arrivals>,
    /// Snapshot fetches in flight: product id -> when it started. One per
    /// product per isolate at a time; the others wait for it (`lookup`).
    refreshing: HashMap<String, u64>,
    /// Per product, the stock shards this isolate sent a reserve to, a bit
    /// each: such a shard exists (its first reserve made it) even before a
    /// snapshot says so.
    routed: HashMap<String, u64>,
}

/// What a request that needs a product's snapshot does next.
#[derive(Clone)]
pub enum Lookup {
    /// Answer from this.
    Known(Known),
    /// Another request's fetch, started at `started_ms`, is in flight:
    /// wait until it lands (or `SNAPSHOT_RECHECK_MS`), then ask `waited`.
    Wait { started_ms: u64 },
    /// Fetch one (`begin_refresh`, then `end_refresh`).
    Fetch,
}

impl EdgeCache {
    /// The single flight's first step: a fresh snapshot, a fetch to wait
    /// for, or a fetch to make.
    ///
    /// Refresh ahead: the first request to find the snapshot in the last
    /// `REFRESH_AHEAD_MS` of its freshness fetches the next one, while the
    /// others go on answering from this one, so that under a steady crowd
    /// no request waits for a fetch. A sharded product's fetch waits for
    /// home's drains of its shards. Measured with `BENCH_RUNS=3
    /// BENCH_SHARDS=1,8 BENCH_WORKLOADS=1,2 node bench/shards.mjs`, CPU
    /// per request K = 8 / K = 1: without it 1.12 on the sell-out and 1.46
    /// after it; with it 0.93 to 1.00 and 1.11 to 1.25. It costs a
    /// sold-out K = 8 product about twice the fetches (each drains the
    /// shards whose proof is older than `PROOF_FRESH_MS`).
    pub fn lookup(&self, product_id: &str, now_ms: u64) -> Lookup {
        if let Some(e) = self.fresh(product_id, now_ms) {
            let left = SNAPSHOT_FRESH_MS.saturating_sub(Self::age(e, now_ms));
            if left <= REFRESH_AHEAD_MS && !self.refreshing.contains_key(product_id) {
                return Lookup::Fetch;
            }
            return Lookup::Known(e.known.clone());
        }
        match self.refreshing.get(product_id) {
            Some(&started_ms) => Lookup::Wait { started_ms },
            None => Lookup::Fetch,
        }
    }

    /// After a wait for the fetch that started at `started_ms`: its
    /// snapshot if it landed; another wait while it may still land in
    /// `REFRESH_WAIT_MAX_MS`; once it is that slow, a snapshot a few seconds
    /// old (`usable`) rather than one more fetch from every waiting
    /// request; and a fetch of its own if the other ended with nothing.
    pub fn waited(&self, product_id: &str, started_ms: u64, now_ms: u64) -> Lookup {
        if let Some(e) = self.fresh(product_id, now_ms) {
            return Lookup::Known(e.known.clone());
        }
        if self.refreshing.get(product_id) != Some(&started_ms) {
            return Lookup::Fetch;
        }
        if now_ms.saturating_sub(started_ms) < REFRESH_WAIT_MAX_MS {
            return Lookup::Wait { started_ms };
        }
        match self.usable(product_id, now_ms) {
            Some(e) => Lookup::Known(e.known.clone()),
            None => Lookup::Fetch,
        }
    }

    /// Starts a fetch: marks it in flight and takes the tickets to report
    /// with it. A fetch whose request was dropped is forgotten once the
    /// map is full and it is older than any wait for it.
    pub fn begin_refresh(&mut self, product_id: &str, now_ms: u64) -> Arrivals {
        if self.refreshing.len() >= EDGE_PRODUCTS_MAX {
            self.refreshing
                .retain(|_, t| now_ms.saturating_sub(*t) < REFRESH_WAIT_MAX_MS);
        }
        self.refreshing.insert(product_id.to_string(), now_ms);
        self.take_report(product_id)
    }

    /// Ends the fetch that started at `started_ms`: its snapshot, or, if it
    /// brought none, its report goes back to go with the next one.
    pub fn end_refresh(
        &mut self,
        product_id: &str,
        started_ms: u64,
        known: Option<Known>,
        report: Arrivals,
        now_ms: u64,
    ) {
        // Dated from when it was asked for: it says what was true then.
        let _ = now_ms;
        match known {
            Some(known) => self.insert(
                product_id,
                Entry {
                    fetched_at_ms: started_ms,
                    known,
                },
            ),
            None => self.return_report(product_id, report),
        }
        if self.refreshing.get(product_id) == Some(&started_ms) {
            self.refreshing.remove(product_id);
        }
    }

    /// The snapshot of `product_id`, if it is fresh: younger than
    /// `SNAPSHOT_FRESH_MS`, or, when it says nothing is left, while that
    /// word is (so that the crowd after a sell-out fetches a new one
    /// rather than reach the shards).
    pub fn fresh(&self, product_id: &str, now_ms: u64) -> Option<&Entry> {
        self.entries
            .get(product_id)
            .filter(|e| Self::age(e, now_ms) < SNAPSHOT_FRESH_MS)
    }

    /// How old what `e` says is at `now_ms`: its own age, and that of the
    /// sold-out proof it carries when it was taken.
    fn age(e: &Entry, now_ms: u64) -> u64 {
        let proof_age = match &e.known {
            Known::Product { snapshot, .. } => snapshot.sold_out.as_ref().map_or(0, |s| s.age_ms),
            Known::Unknown => 0,
        };
        now_ms.saturating_sub(e.fetched_at_ms) + proof_age
    }

    /// The snapshot of `product_id` if it is at most `SNAPSHOT_STALE_MAX_MS`
    /// old (and was not invalidated): for a request that waited for another
    /// request's fetch in vain. A few seconds old is better than a fetch of
    /// its own, which under a crowd on a slow object is one per request.
    pub fn usable(&self, product_id: &str, now_ms: u64) -> Option<&Entry> {
        self.entries
            .get(product_id)
            .filter(|e| now_ms.saturating_sub(e.fetched_at_ms) < SNAPSHOT_STALE_MAX_MS)
    }

    /// Marks the snapshot stale, so that the next request fetches one.
    pub fn invalidate(&mut self, product_id: &str) {
        if let Some(e) = self.entries.get_mut(product_id) {
            e.fetched_at_ms = 0;
        }
    }

    pub fn insert(&mut self, product_id: &str, entry: Entry) {
        // The snapshot came back from the refresh that carried the report,
        // so it counts those tickets now.
        self.in_flight.remove(product_id);
        if self.entries.len() >= EDGE_PRODUCTS_MAX && !self.entries.contains_key(product_id) {
            // Full: first forget the ids that name no product, and the
            // snapshots too old to be used, so that a flood of made-up ids
            // (one unknown entry each) cannot push the real products'
            // snapshots out, which would send their crowds to the objects.
            let now_ms = entry.fetched_at_ms;
            self.entries.retain(|_, e| {
                matches!(e.known, Known::Product { .. })
                    && now_ms.saturating_sub(e.fetched_at_ms) < SNAPSHOT_STALE_MAX_MS
            });
            if self.entries.len() >= EDGE_PRODUCTS_MAX {
                self.entries.clear();
            }
        }
        self.entries.insert(product_id.to_string(), entry);
    }

    /// A reserve went to stock shard `index` of `product_id`.
    pub fn routed(&mut self, product_id: &str, index: u16) {
        if index == 0 || index >= 64 {
            return;
        }
        if self.routed.len() >= EDGE_PRODUCTS_MAX && !self.routed.contains_key(product_id) {
            self.routed.clear();
        }
        *self.routed.entry(product_id.to_string()).or_default() |= 1 << index;
    }

    /// The stock shards this isolate sent reserves to, a bit each.
    pub fn routed_to(&self, product_id: &str) -> u64 {
        self.routed.get(product_id).copied().unwrap_or(0)
    }

    /// Counts a ticket issued here, for the next report.
    pub fn issued(&mut self, product_id: &str, ticket: &Ticket, opens_at_ms: Option<u64>) {
        if self.pending.len() >= EDGE_PRODUCTS_MAX && !self.pending.contains_key(product_id) {
            // Losing a report only slows the room down a little; an
            // unbounded map would be worse.
            self.pending.clear();
        }
        let named: usize = self
            .pending
            .values()
            .chain(self.in_flight.values())
            .map(|a| a.named.len())
            .sum();
        let report = self.pending.entry(product_id.to_string()).or_default();
        let before = report.named.len();
        report.add(ticket, opens_at_ms);
        if named >= EDGE_NAMED_MAX {
            // Counted, but not named: the isolate holds its most names.
            report.named.truncate(before);
        }
    }

    /// Counts a join refused for want of a valid proof of work, for the
    /// next report.
    pub fn pow_required(&mut self, product_id: &str) {
        self.report_mut(product_id).pow_required += 1;
    }

    /// Counts a ticket of the infinite queue, for the next report (it is
    /// not counted as a ticket: it must not move the watermark).
    pub fn pow_infinite_queued(&mut self, product_id: &str) {
        self.report_mut(product_id).pow_infinite_queued += 1;
    }

    /// Counts a reserve the edge refused itself (`code`: sold out or not
    /// admitted from the snapshot, or over the buyer's rate limit), for the
    /// next report and so the product's history. Only for a product this
    /// isolate holds a snapshot of: a script's requests for ids nobody
    /// lists must not crowd the real products' reports out of the map.
    pub fn edge_refused(&mut self, product_id: &str, code: ProblemCode) {
        if !self.entries.contains_key(product_id) {
            return;
        }
        // Looked up before it is made: a sold-out crowd's clicks allocate
        // no key.
        let report = match self.pending.contains_key(product_id) {
            true => self.pending.get_mut(product_id),
            false => Some(self.report_mut(product_id)),
        };
        let Some(report) = report else { return };
        match code {
            ProblemCode::SoldOut => report.edge_sold_out += 1,
            ProblemCode::NotAdmitted => report.edge_not_admitted += 1,
            ProblemCode::RateLimited => report.edge_rate_limited += 1,
            _ => {}
        }
    }

    fn report_mut(&mut self, product_id: &str) -> &mut Arrivals {
        if self.pending.len() >= EDGE_PRODUCTS_MAX && !self.pending.contains_key(product_id) {
            self.pending.clear();
        }
        self.pending.entry(product_id.to_string()).or_default()
    }

    /// The tickets issued here for `product_id` that the snapshot in hand
    /// does not count: those no refresh has reported yet, and those of a
    /// report whose snapshot is still on its way. Without the second, a
    /// join answered while a refresh is in flight said 1 and the next poll
    /// 3.
    pub fn unreported(&self, product_id: &str) -> Option<Arrivals> {
        let mut all = self.pending.get(product_id).cloned().unwrap_or_default();
        if let Some(sent) = self.in_flight.get(product_id) {
            all.merge(sent);
        }
        (!all.is_empty()).then_some(all)
    }

    /// The report to send with the next refresh; it counts as in flight
    /// until its snapshot is inserted or the report is returned.
    pub fn take_report(&mut self, product_id: &str) -> Arrivals {
        let report = self.pending.remove(product_id).unwrap_or_default();
        if self.in_flight.len() >= EDGE_PRODUCTS_MAX && !self.in_flight.contains_key(product_id) {
            self.in_flight.clear();
        }
        self.in_flight
            .entry(product_id.to_string())
            .or_default()
            .merge(&report);
        report
    }

    /// A report that did not reach the object goes with the next refresh.
    pub fn return_report(&mut self, product_id: &str, report: Arrivals) {
        self.in_flight.remove(product_id);
        if report.is_nothing() {
            return;
        }
        self.pending
            .entry(product_id.to_string())
            .or_default()
            .merge(&report);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::snapshot::SoldOut;
    use flashgate_core::{Admission, Rules, Uptake, Verdict};
    use serde_json::json;

    const OPEN: u64 = 1_000_000;

    fn snapshot(available: u64, buyers: &[&str], room: Option<RoomSnapshot>) -> Snapshot {
        Snapshot {
            at_ms: OPEN,
            product: json!({}),
            available,
            held: 0,
            state: SaleState::Open,
            room,
            sold_out: (available == 0).then(|| SoldOut {
                age_ms: 0,
                buyers: vec![BuyerFilter::build(buyers.iter().copied())],
            }),
            shards: 1,
            existing: 1,
            fetched_at_ms: OPEN,
        }
    }

    fn room(admission: Admission) -> RoomSnapshot {
        RoomSnapshot {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
            prequeue_ms: 60_000,
            ticket_ttl_ms: 3_600_000,
            admission,
            uptake: Uptake::default(),
            pow: None,
        }
    }

    #[test]
    fn sold_out_is_answered_at_the_edge_except_for_buyers_with_units() {
        let s = snapshot(0, &["alice"], None);
        // Through JSON, as it travels.
        let s = Snapshot::parse(&serde_json::to_vec(&s).unwrap(), OPEN).unwrap();
        let p = s
            .reserve_answer("mallory", 0, None, OPEN)
            .expect("answered");
        assert_eq!(p.code, ProblemCode::SoldOut);
        assert!(
            s.reserve_answer("alice", 0, None, OPEN).is_none(),
            "a replay must reach the object"
        );
        assert!(snapshot(3, &[], None)
            .reserve_answer("mallory", 0, None, OPEN)
            .is_none());
        let closed = Snapshot {
            state: SaleState::Closed,
            ..snapshot(0, &[], None)
        };
        assert!(
            closed.reserve_answer("mallory", 0, None, OPEN).is_none(),
            "the object says closed"
        );
        // Only within the lag: a snapshot as old as it is no answer.
        let late = OPEN + SNAPSHOT_FRESH_MS;
        assert!(s.reserve_answer("mallory", 0, None, late - 1).is_some());
        assert!(s.reserve_answer("mallory", 0, None, late).is_none());
    }

    #[test]
    fn over_k_shards_each_buyer_is_looked_up_in_its_own_shards_filter_within_the_proofs_age() {
        let proof_age = 300;
        let s = Snapshot {
            sold_out: Some(SoldOut {
                age_ms: proof_age,
                buyers: vec![
                    BuyerFilter::build(["at-home"].into_iter()),
                    BuyerFilter::build(["at-one"].into_iter()),
                    BuyerFilter::build(std::iter::empty()),
                ],
            }),
            shards: 3,
            existing: 0b011,
            ..snapshot(0, &[], None)
        };
        let s = Snapshot::parse(&serde_json::to_vec(&s).unwrap(), OPEN).unwrap();
        assert!(
            s.reserve_answer("at-one", 1, None, OPEN).is_none(),
            "its shard's replay"
        );
        assert!(s.reserve_answer("at-home", 0, None, OPEN).is_none());
        // Filters are per shard: a buyer is looked up in its own only.
        assert!(s.reserve_answer("at-one", 2, None, OPEN).is_some());
        assert!(s.reserve_answer("anyone", 1, None, OPEN).is_some());
        // The proof's age counts against the lag.
        let last = OPEN + SNAPSHOT_FRESH_MS - proof_age - 1;
        assert!(s.reserve_answer("anyone", 1, None, last).is_some());
        assert!(s.reserve_answer("anyone", 1, None, last + 1).is_none());
        // And so does the cache's freshness: such a snapshot is fetched
        // anew sooner.
        let mut c = EdgeCache::default();
        c.insert(
            "p",
            Entry {
                fetched_at_ms: OPEN,
                known: Known::Product {
                    snapshot: Rc::new(s),
                    body: Rc::new(Vec::new()),
                },
            },
        );
        assert!(c.fresh("p", last).is_some());
        assert!(c.fresh("p", last + 1).is_none());
    }

    #[test]
    fn the_edge_places_a_ticket_as_the_object_would() {
        let rules = Rules {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
        };
        let mut a = Admission::default();
        a.checkpoint(OPEN - 60_000, rules, true);
        let tickets: Vec<Ticket> = (0..100)
            .map(|i| Ticket {
                arrived_ms: OPEN + i * 10,
                tiebreak: 0,
                infinite_queue: false,
            })
            .collect();
        let mut arrivals = Arrivals::default();
        for t in &tickets {
            arrivals.add(t, rules.opens_at_ms);
        }
        a.record(OPEN, rules, &arrivals);
        let s = snapshot(5, &[], Some(room(a)));
        let q = s.room.as_ref().unwrap();
        let first = s.standing(q, &tickets[0], None, OPEN + 500);
        assert!(first.admitted);
        let last = s.standing(q, &tickets[99], None, OPEN + 500);
        assert!(!last.admitted);
        assert!(last.position > 90, "{last:?}");
        // Tickets issued here and not yet reported count ahead of a later
        // arrival: those of earlier seconds, and of its own second the
        // share before its point (here, none: it arrived at the second's
        // start).
        let late = Ticket {
            arrived_ms: OPEN + 5_000,
            tiebreak: 0,
            infinite_queue: false,
        };
        let mut unreported = Arrivals::default();
        for ms in [OPEN + 2_000, OPEN + 3_000, OPEN + 3_500, OPEN + 5_000] {
            unreported.add(
                &Ticket {
                    arrived_ms: ms,
                    tiebreak: 0,
                    infinite_queue: false,
                },
                rules.opens_at_ms,
            );
        }
        let alone = s.standing(q, &late, None, OPEN + 500).position;
        let counted = s.standing(q, &late, Some(&unreported), OPEN + 500).position;
        assert_eq!(counted, alone + 3, "{alone} {counted}");
        // Ten unreported in the second of a ticket that arrived halfway
        // through it: five are ahead, as the object will place them.
        let mid = Ticket {
            arrived_ms: OPEN + 6_500,
            tiebreak: 0,
            infinite_queue: false,
        };
        let mut same = Arrivals::default();
        for i in 0..10 {
            same.add(
                &Ticket {
                    arrived_ms: OPEN + 6_000 + i * 100,
                    tiebreak: 0,
                    infinite_queue: false,
                },
                rules.opens_at_ms,
            );
        }
        let alone = s.standing(q, &mid, None, OPEN + 500).position;
        let counted = s.standing(q, &mid, Some(&same), OPEN + 500).position;
        assert_eq!(counted, alone + 5, "{alone} {counted}");
        assert_eq!(last.eta_s, Some(last.position.div_ceil(10)));
        let p = s
            .reserve_answer("x", 0, Some(&tickets[99]), OPEN + 500)
            .unwrap();
        assert_eq!(p.code, ProblemCode::NotAdmitted);
        assert!(s
            .reserve_answer("x", 0, Some(&tickets[0]), OPEN + 500)
            .is_none());
    }

    #[test]
    fn a_report_in_flight_still_counts_until_its_snapshot_arrives() {
        let mut c = EdgeCache::default();
        let t = |ms| Ticket {
            arrived_ms: ms,
            tiebreak: 0,
            infinite_queue: false,
        };
        c.issued("p", &t(OPEN + 1_000), Some(OPEN));
        c.issued("p", &t(OPEN + 2_000), Some(OPEN));
        let report = c.take_report("p");
        assert_eq!(report.per_second.iter().map(|(_, n)| n).sum::<u64>(), 2);
        // While the refresh is on its way, a new ticket adds to the sent ones.
        c.issued("p", &t(OPEN + 3_000), Some(OPEN));
        let all = c.unreported("p").unwrap();
        assert_eq!(all.per_second.iter().map(|(_, n)| n).sum::<u64>(), 3);
        // A failed refresh gives the report back: still 3, none twice.
        c.return_report("p", report);
        let all = c.unreported("p").unwrap();
        assert_eq!(all.per_second.iter().map(|(_, n)| n).sum::<u64>(), 3);
        // A refresh that arrives counts the report; only later tickets stay.
        let report = c.take_report("p");
        c.issued("p", &t(OPEN + 4_000), Some(OPEN));
        c.insert(
            "p",
            Entry {
                fetched_at_ms: OPEN,
                known: Known::Unknown,
            },
        );
        let left = c.unreported("p").unwrap();
        assert_eq!(left.per_second, vec![((OPEN + 4_000) / 1000, 1)]);
        assert_eq!(report.per_second.iter().map(|(_, n)| n).sum::<u64>(), 3);
    }

    #[test]
    fn an_isolate_names_at_most_its_bound_of_tickets_and_counts_every_one() {
        let mut c = EdgeCache::default();
        let per_report = flashgate_core::limits::ARRIVALS_NAMED_MAX;
        let products = EDGE_NAMED_MAX / per_report + 2;
        for p in 0..products {
            for i in 0..per_report + 10 {
                let t = Ticket {
                    arrived_ms: OPEN + i as u64,
                    tiebreak: i as u32,
                    infinite_queue: false,
                };
                c.issued(&format!("p{p}"), &t, Some(OPEN));
            }
        }
        let mut named = 0;
        for p in 0..products {
            let report = c.unreported(&format!("p{p}")).unwrap();
            let counted: u64 = report.per_second.iter().map(|(_, n)| n).sum();
            assert_eq!(counted, (per_report + 10) as u64, "every ticket counted");
            assert!(report.named.len() <= per_report);
            named += report.named.len();
        }
        assert_eq!(named, EDGE_NAMED_MAX);
    }

    #[test]
    fn made_up_ids_cannot_push_a_real_products_snapshot_out() {
        let mut c = EdgeCache::default();
        let product = |at| Entry {
            fetched_at_ms: at,
            known: Known::Product {
                snapshot: Rc::new(snapshot(5, &[], None)),
                body: Rc::new(b"{}".to_vec()),
            },
        };
        let unknown = |at| Entry {
            fetched_at_ms: at,
            known: Known::Unknown,
        };
        c.insert("real", product(OPEN));
        c.insert("old", product(OPEN - SNAPSHOT_STALE_MAX_MS));
        for i in 0..10 * EDGE_PRODUCTS_MAX {
            c.insert(&format!("made-up-{i}"), unknown(OPEN + i as u64 / 100));
            assert!(c.len() <= EDGE_PRODUCTS_MAX, "bounded");
        }
        assert!(
            c.fresh("real", OPEN + 500).is_some(),
            "the real product stays"
        );
        assert!(
            !c.entries.contains_key("old"),
            "a stale snapshot goes first"
        );
        // Real products alone past the bound still fit the bound.
        for i in 0..EDGE_PRODUCTS_MAX + 1 {
            c.insert(&format!("p{i}"), product(OPEN));
        }
        assert!(c.len() <= EDGE_PRODUCTS_MAX);
    }

    /// A line three times the stock: the back of it hears `unlikely` at
    /// once, the front `likely`; once nothing is available the room waits
    /// for returns while units are held, and closes when none are.
    #[test]
    fn a_poll_tells_the_odds_and_the_room_closes_when_nothing_can_return() {
        let rules = Rules {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
        };
        let mut a = Admission::default();
        a.checkpoint(OPEN - 60_000, rules, true);
        // Spread over one second, as the object places them.
        let tickets: Vec<Ticket> = (0..300)
            .map(|i| Ticket {
                arrived_ms: OPEN + i * 3,
                tiebreak: 0,
                infinite_queue: false,
            })
            .collect();
        let mut arrivals = Arrivals::default();
        for t in &tickets {
            arrivals.add(t, rules.opens_at_ms);
        }
        a.record(OPEN, rules, &arrivals);
        let s = snapshot(100, &[], Some(room(a)));
        let q = s.room.as_ref().unwrap();
        let front = s.standing(q, &tickets[10], None, OPEN);
        assert_eq!(front.odds.verdict, Verdict::Likely, "{front:?}");
        assert_eq!(front.odds.ahead, front.position);
        let back = s.standing(q, &tickets[250], None, OPEN);
        assert_eq!(back.odds.verdict, Verdict::Unlikely, "{back:?}");
        assert_eq!((back.odds.available, back.odds.held), (100, 0));
        // Half of the admitted reserve: the middle of the line is likely.
        let q_half = RoomSnapshot {
            uptake: Uptake {
                admitted: 1_000,
                units: 500,
            },
            ..q.clone()
        };
        let mid = s.standing(&q_half, &tickets[150], None, OPEN);
        assert_eq!(mid.odds.verdict, Verdict::Likely, "{mid:?}");
        // Nothing available, some held: waiting for returns, still open.
        let held = Snapshot {
            held: 4,
            ..snapshot(0, &[], Some(q.clone()))
        };
        let w = held.standing(q, &tickets[10], None, OPEN);
        assert!(w.odds.waiting_for_returns, "{w:?}");
        assert_eq!((w.odds.verdict, w.odds.held), (Verdict::Unlikely, 4));
        assert!(!held.room_closed());
        assert!(held.may_join(OPEN).is_ok());
        // Nothing held either: sold out for every ticket, and no join.
        let gone = snapshot(0, &[], Some(q.clone()));
        assert!(gone.room_closed());
        for t in [&tickets[0], &tickets[299]] {
            let g = gone.standing(q, t, None, OPEN);
            assert_eq!(g.odds.verdict, Verdict::SoldOut, "{g:?}");
            assert!(!g.odds.waiting_for_returns);
        }
        assert_eq!(gone.may_join(OPEN).unwrap_err().code, ProblemCode::SoldOut);
        // Before the opening a product with nothing left is not closed yet.
        let scheduled = Snapshot {
            state: SaleState::Scheduled,
            ..snapshot(0, &[], Some(q.clone()))
        };
        assert!(!scheduled.room_closed());
    }

    #[test]
    fn joining_needs_a_room_that_is_open_for_arrivals() {
        assert_eq!(
            snapshot(5, &[], None).may_join(OPEN).unwrap_err().code,
            ProblemCode::NoWaitingRoom
        );
        let s = snapshot(5, &[], Some(room(Admission::default())));
        assert_eq!(
            s.may_join(OPEN - 61_000).unwrap_err().code,
            ProblemCode::NotOpen
        );
        assert!(s.may_join(OPEN - 59_000).is_ok());
    }

    #[test]
    fn reports_wait_for_the_next_refresh_and_survive_a_failed_one() {
        let mut c = EdgeCache::default();
        let t = Ticket {
            arrived_ms: OPEN + 1_500,
            tiebreak: 1,
            infinite_queue: false,
        };
        c.issued("p", &t, Some(OPEN));
        c.issued("p", &t, Some(OPEN));
        let report = c.take_report("p");
        assert_eq!(report.per_second, vec![(1_001, 2)]);
        assert!(c.take_report("p").is_empty());
        c.return_report("p", report.clone());
        c.issued("p", &t, Some(OPEN));
        assert_eq!(c.take_report("p").per_second, vec![(1_001, 3)]);
    }

    #[test]
    fn a_stale_snapshot_is_usable_for_a_while_unless_invalidated() {
        const T: u64 = 1_800_000_000_000;
        let mut c = EdgeCache::default();
        c.insert(
            "p",
            Entry {
                fetched_at_ms: T,
                known: Known::Unknown,
            },
        );
        assert!(c.fresh("p", T + SNAPSHOT_FRESH_MS - 1).is_some());
        assert!(c.fresh("p", T + SNAPSHOT_FRESH_MS).is_none());
        assert!(c.usable("p", T + SNAPSHOT_STALE_MAX_MS - 1).is_some());
        assert!(c.usable("p", T + SNAPSHOT_STALE_MAX_MS).is_none());
        c.invalidate("p");
        assert!(c.usable("p", T + 1).is_none());
    }

    #[test]
    fn one_fetch_per_product_and_the_others_wait_for_it() {
        let mut c = EdgeCache::default();
        let t0 = OPEN;
        assert!(matches!(c.lookup("p", t0), Lookup::Fetch));
        let report = c.begin_refresh("p", t0);
        // A second request meanwhile waits for the first one's fetch.
        let Lookup::Wait { started_ms } = c.lookup("p", t0 + 1) else {
            panic!("a second fetch while one is in flight")
        };
        assert_eq!(started_ms, t0);
        assert!(matches!(c.waited("p", t0, t0 + 5), Lookup::Wait { .. }));
        c.end_refresh("p", t0, Some(Known::Unknown), report, t0 + 6);
        assert!(matches!(
            c.waited("p", t0, t0 + 7),
            Lookup::Known(Known::Unknown)
        ));
        assert!(matches!(c.lookup("p", t0 + 8), Lookup::Known(_)));
    }

    #[test]
    fn one_request_refreshes_ahead_while_the_others_answer_from_the_snapshot() {
        let mut c = EdgeCache::default();
        let t0 = OPEN;
        let r = c.begin_refresh("p", t0);
        c.end_refresh("p", t0, Some(Known::Unknown), r, t0);
        let ahead = t0 + SNAPSHOT_FRESH_MS - REFRESH_AHEAD_MS;
        assert!(matches!(c.lookup("p", ahead - 1), Lookup::Known(_)));
        // The first request in the last stretch fetches; the others,
        // meanwhile, answer from the snapshot while it is fresh.
        assert!(matches!(c.lookup("p", ahead), Lookup::Fetch));
        let r = c.begin_refresh("p", ahead);
        assert!(matches!(c.lookup("p", ahead + 1), Lookup::Known(_)));
        let end = t0 + SNAPSHOT_FRESH_MS;
        assert!(matches!(c.lookup("p", end - 1), Lookup::Known(_)));
        // Past its freshness they wait for the fetch, as before.
        assert!(matches!(c.lookup("p", end), Lookup::Wait { .. }));
        // The new one is dated from when it was asked for, and is fetched
        // ahead in its turn.
        c.end_refresh("p", ahead, Some(Known::Unknown), r, end);
        assert!(c.fresh("p", ahead + SNAPSHOT_FRESH_MS - 1).is_some());
        assert!(matches!(c.lookup("p", end - 1), Lookup::Known(_)));
        assert!(matches!(c.lookup("p", end + 1), Lookup::Fetch));
    }

    #[test]
    fn a_slow_fetch_sends_waiters_to_a_stale_snapshot_or_their_own_fetch() {
        let mut c = EdgeCache::default();
        let t0 = OPEN;
        let r = c.begin_refresh("p", t0);
        c.end_refresh("p", t0, Some(Known::Unknown), r, t0);
        let t1 = t0 + SNAPSHOT_FRESH_MS + 1;
        assert!(matches!(c.lookup("p", t1), Lookup::Fetch));
        let r = c.begin_refresh("p", t1);
        assert!(matches!(c.waited("p", t1, t1 + 10), Lookup::Wait { .. }));
        // Past the wait, a snapshot a few seconds old answers.
        let late = t1 + REFRESH_WAIT_MAX_MS;
        assert!(matches!(c.waited("p", t1, late), Lookup::Known(_)));
        // Too old to use: the waiter fetches itself.
        let later = t0 + SNAPSHOT_STALE_MAX_MS + REFRESH_WAIT_MAX_MS;
        assert!(matches!(c.waited("p", t1, later), Lookup::Fetch));
        // A fetch that brought nothing gives its report back, and the
        // waiters fetch (the one they waited for is over).
        c.end_refresh("p", t1, None, r, late);
        assert!(matches!(
            c.waited("p", t1, late + 1),
            Lookup::Fetch | Lookup::Known(_)
        ));
        assert!(matches!(c.lookup("p", later), Lookup::Fetch));
    }
}
