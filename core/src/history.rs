//! A product's sale over time, bounded: what happened in each time bucket
//! (every outcome's count, as `stats::Counters` counts them) and where the
//! stock and the queue stood at its end (`Mark`).
//!
//! Old buckets coarsen as the admission record's points do
//! (`lottery::AdmissionRecord`): at most `limits::HISTORY_BUCKETS_MAX` buckets, each
//! `step_ms` wide and aligned to it, the step doubling (and each pair of
//! buckets merging into one) whenever the bound is reached. So a product's
//! history stays under a stated size however long it lives, and a short
//! sale keeps one-second buckets from its first click to its last.
//!
//! The object notes its gate's counters' totals after each batch of
//! decisions (`History::note`); the bucket of that moment gets what was
//! counted since the last note. A quiet product notes nothing, and its
//! history has gaps where nothing happened: the mark of the bucket before a
//! gap holds through it.
//!
//! The history is written beside the gate's rows, not among them
//! (`History::poll_write`): with every batch that writes rows anyway, so a
//! count that comes of a change of state (a reserve, a confirm, a cancel,
//! an expiry) is stored in the transaction that stores the change and
//! survives any crash; otherwise at most `limits::HISTORY_FLUSH_MS` after
//! the oldest unwritten note, so a refusal, which changes no row, costs no
//! write of its own, and a crash loses at most that long's refusals.

use crate::config::limits;
use crate::outcome::ReserveKind;
use crate::stats::Counters;

/// Where the sale stood at the end of a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    /// The waiting room's tickets reported by the edges, and admitted, so
    /// far: the queue is their difference, and a bucket's joins and
    /// admissions the change from the bucket before.
    pub queue_reported: u64,
    pub queue_admitted: u64,
    /// Orders and voids not yet acknowledged by the origin, and the last
    /// one acknowledged: a bucket's deliveries are its change.
    pub outbox_backlog: u64,
    pub outbox_acked_seq: u64,
}

/// One time bucket: `[start_ms, start_ms + step_ms)` of its history's step.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bucket {
    pub start_ms: u64,
    /// What was counted in the bucket.
    pub counts: Counters,
    /// The last mark noted in the bucket.
    pub mark: Mark,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub step_ms: u64,
    /// In time order, each start a multiple of `step_ms`.
    pub buckets: Vec<Bucket>,
    /// The counters' totals at the last note: the next note counts from
    /// here. Counters restart from zero when a gate is restored, and so
    /// does this.
    noted: Counters,
    /// The buckets noted since the last write: from this index on, or all
    /// of them when the step doubled since (`restepped`), since every
    /// stored bucket then has a stale start.
    unwritten_from: Option<usize>,
    restepped: bool,
    /// When the oldest unwritten note was taken.
    unwritten_since_ms: Option<u64>,
}

/// A history as an object serves it to the edge, which merges a product's
/// objects' (`merge`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Served {
    pub step_ms: u64,
    pub buckets: Vec<Bucket>,
}

/// What the object writes of its history (`History::poll_write`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryWrite {
    pub step_ms: u64,
    /// Delete every stored bucket before writing these: the step doubled.
    pub replace: bool,
    /// Upserts, by start.
    pub buckets: Vec<Bucket>,
}

impl Default for History {
    fn default() -> History {
        History {
            step_ms: limits::HISTORY_STEP_MS,
            buckets: Vec::new(),
            noted: Counters::default(),
            unwritten_from: None,
            restepped: false,
            unwritten_since_ms: None,
        }
    }
}

/// Why a history cannot be the one a gate kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryFault {
    /// Past its bound, or a step that is not the base step doubled.
    Shape,
    /// A bucket not aligned to the step, or not after the one before it.
    Order { index: usize },
}

impl History {
    /// Notes the counters' totals and the mark at `now_ms`: what was counted
    /// since the last note goes to `now_ms`'s bucket, whose mark becomes
    /// `mark`. A note earlier than the last bucket (a clock that stepped
    /// back) counts in the last bucket.
    pub fn note(&mut self, now_ms: u64, totals: &Counters, mark: Mark) {
        let counted = totals.since(&self.noted);
        self.noted.clone_from(totals);
        let last_mark = self.buckets.last().map(|b| b.mark);
        if counted.is_zero() && last_mark == Some(mark) {
            return;
        }
        let bucket = self.bucket(now_ms);
        bucket.counts.add(&counted);
        bucket.mark = mark;
        let last = self.buckets.len() - 1;
        self.unwritten_from = Some(self.unwritten_from.map_or(last, |i| i.min(last)));
        self.unwritten_since_ms.get_or_insert(now_ms);
    }

    /// The buckets to write now, if any: those noted since the last write,
    /// when the caller `writing` anyway or the oldest of them has waited
    /// `limits::HISTORY_FLUSH_MS`. The caller must write what it takes, or
    /// discard the history and restore it from storage.
    pub fn poll_write(&mut self, now_ms: u64, writing: bool) -> Option<HistoryWrite> {
        let from = self.unwritten_from?;
        if !writing && self.flush_at().is_some_and(|at| now_ms < at) {
            return None;
        }
        let replace = std::mem::take(&mut self.restepped);
        let from = if replace { 0 } else { from };
        self.unwritten_from = None;
        self.unwritten_since_ms = None;
        Some(HistoryWrite {
            step_ms: self.step_ms,
            replace,
            buckets: self.buckets[from..].to_vec(),
        })
    }

    /// When the buckets noted and not written must be: the object's alarm
    /// covers it.
    pub fn flush_at(&self) -> Option<u64> {
        self.unwritten_since_ms
            .map(|t| t.saturating_add(limits::HISTORY_FLUSH_MS))
    }

    /// The history as stored: every bucket `step_ms` wide, in any order.
    /// Its counters start from zero, as a restored gate's do.
    pub fn restore(step_ms: u64, mut buckets: Vec<Bucket>) -> Result<History, HistoryFault> {
        buckets.sort_by_key(|b| b.start_ms);
        let h = History {
            step_ms,
            buckets,
            ..History::default()
        };
        h.check()?;
        Ok(h)
    }

    /// The history as the object serves it.
    pub fn served(&self) -> Served {
        Served {
            step_ms: self.step_ms,
            buckets: self.buckets.clone(),
        }
    }

    /// Forgets the totals noted: the gate's counters restarted from zero
    /// (a restore), and the next note counts from there.
    pub fn counters_restarted(&mut self) {
        self.noted = Counters::default();
    }

    /// The bucket `now_ms` falls in, made if need be (coarsening first if
    /// the history is full).
    fn bucket(&mut self, now_ms: u64) -> &mut Bucket {
        if !self.last_covers(now_ms) && self.buckets.len() >= limits::HISTORY_BUCKETS_MAX {
            self.coarsen();
        }
        // Coarsening may have made the last bucket cover now.
        if !self.last_covers(now_ms) {
            let mark = self.buckets.last().map(|b| b.mark).unwrap_or_default();
            self.buckets.push(Bucket {
                start_ms: now_ms - now_ms % self.step_ms,
                counts: Counters::default(),
                mark,
            });
        }
        self.buckets.last_mut().expect("a bucket was made")
    }

    /// Whether a note at `now_ms` goes to the last bucket: it is `now_ms`'s
    /// bucket, or a later one (a clock that stepped back).
    fn last_covers(&self, now_ms: u64) -> bool {
        let start = now_ms - now_ms % self.step_ms;
        self.buckets.last().is_some_and(|b| start <= b.start_ms)
    }

    /// Doubles the step: each pair of buckets that now share a start
    /// merges, their counts summed and the later mark kept.
    fn coarsen(&mut self) {
        self.step_ms = self.step_ms.saturating_mul(2);
        self.restepped = true;
        let step = self.step_ms;
        let mut merged: Vec<Bucket> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for b in self.buckets.drain(..) {
            let start = b.start_ms - b.start_ms % step;
            match merged.last_mut() {
                Some(m) if m.start_ms == start => {
                    m.counts.add(&b.counts);
                    m.mark = b.mark;
                }
                _ => merged.push(Bucket {
                    start_ms: start,
                    ..b
                }),
            }
        }
        self.buckets = merged;
    }

    /// Everything counted over the history.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for b in &self.buckets {
            t.add(&b.counts);
        }
        t
    }

    /// Checks what every history the gate keeps satisfies.
    pub fn check(&self) -> Result<(), HistoryFault> {
        let doubled = self.step_ms >= limits::HISTORY_STEP_MS
            && self.step_ms.is_multiple_of(limits::HISTORY_STEP_MS)
            && (self.step_ms / limits::HISTORY_STEP_MS).is_power_of_two();
        if self.buckets.len() > limits::HISTORY_BUCKETS_MAX || !doubled {
            return Err(HistoryFault::Shape);
        }
        let mut after = None;
        for (index, b) in self.buckets.iter().enumerate() {
            let aligned = b.start_ms.is_multiple_of(self.step_ms);
            if !aligned || after.is_some_and(|a| b.start_ms <= a) {
                return Err(HistoryFault::Order { index });
            }
            after = Some(b.start_ms);
        }
        Ok(())
    }
}

/// One bucket of a product's history as the admin reads it: summed over
/// the product's objects (`merge`), each change of a mark turned into what
/// happened in the bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Period {
    pub start_ms: u64,
    /// Every outcome counted in the bucket, by every object.
    pub counts: Counters,
    /// The product's stock at the bucket's end, as its home knew it.
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    /// The waiting room: tickets waiting at the bucket's end, and tickets
    /// reported and admitted in it.
    pub queue: u64,
    pub joined: u64,
    pub admitted: u64,
    /// The outbox, over every object: entries not yet at the origin at the
    /// bucket's end, and entries the origin acknowledged in it.
    pub outbox_backlog: u64,
    pub delivered: u64,
}

/// A product's history: its objects' merged, at the coarsest step of any.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Timeline {
    pub step_ms: u64,
    pub periods: Vec<Period>,
}

/// One object's buckets at `step_ms` (a multiple of its own): counts
/// summed and the last mark kept, as `History::coarsen` would.
fn at_step(h: &History, step_ms: u64) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::with_capacity(h.buckets.len());
    for b in &h.buckets {
        let start_ms = b.start_ms - b.start_ms % step_ms;
        match out.last_mut() {
            Some(last) if last.start_ms == start_ms => {
                last.counts.add(&b.counts);
                last.mark = b.mark;
            }
            _ => out.push(Bucket {
                start_ms,
                ..b.clone()
            }),
        }
    }
    out
}

/// A product's history from its objects' (home's first, then its stock
/// shards'), merged when it is read rather than sent home on every
/// report, so that it costs the sale nothing and sums what each object
/// stored, exactly. Counts and deliveries are summed; the stock and the
/// waiting room are home's (its levels are the product's); a quiet
/// object's mark holds through the buckets where it noted nothing.
pub fn merge(objects: &[History]) -> Timeline {
    let step_ms = objects
        .iter()
        .map(|h| h.step_ms)
        .max()
        .unwrap_or(limits::HISTORY_STEP_MS);
    let each: Vec<Vec<Bucket>> = objects.iter().map(|h| at_step(h, step_ms)).collect();
    let mut starts: Vec<u64> = each.iter().flatten().map(|b| b.start_ms).collect();
    starts.sort_unstable();
    starts.dedup();
    // Per object: the next bucket to take, and the mark it last had.
    let mut next = vec![0usize; each.len()];
    let mut marks = vec![Mark::default(); each.len()];
    let mut periods = Vec::with_capacity(starts.len());
    for start_ms in starts {
        let mut p = Period {
            start_ms,
            ..Period::default()
        };
        for (i, buckets) in each.iter().enumerate() {
            let before = marks[i];
            if let Some(b) = buckets.get(next[i]).filter(|b| b.start_ms == start_ms) {
                next[i] += 1;
                p.counts.add(&b.counts);
                marks[i] = b.mark;
            }
            let now = marks[i];
            p.outbox_backlog += now.outbox_backlog;
            p.delivered += now.outbox_acked_seq.saturating_sub(before.outbox_acked_seq);
            if i == 0 {
                p.available = now.available;
                p.held = now.held;
                p.sold = now.sold;
                p.queue = now.queue_reported.saturating_sub(now.queue_admitted);
                p.joined = now.queue_reported.saturating_sub(before.queue_reported);
                p.admitted = now.queue_admitted.saturating_sub(before.queue_admitted);
            }
        }
        periods.push(p);
    }
    Timeline { step_ms, periods }
}

/// Reserves refused, by why, over the history: at the edge and at the
/// objects together.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Refusals {
    pub rate_limited: u64,
    /// Joins refused for want of a valid proof of work, and those sent to
    /// the infinite queue.
    pub proof_of_work: u64,
    pub infinite_queue: u64,
    pub not_admitted: u64,
    pub sold_out: u64,
    /// Reserves the gate could not decide in time (`unavailable`, and
    /// `overloaded` at the records' cap): asked to try again, not refused.
    pub unavailable: u64,
    /// Every other refusal of a reserve (a buyer's limit, a closed sale, a
    /// bad request).
    pub other: u64,
}

/// What a shop asks of a sale afterwards, from its timeline.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The start of the first bucket with a reserve, and the end of the
    /// first where a buyer was told sold out or no unit was left available
    /// (home's levels follow its shards' reports, so they may never show
    /// the moment); the time between them, to a bucket's width. `None`
    /// while the sale has not begun or not sold out.
    pub first_click_ms: Option<u64>,
    pub sold_out_at_ms: Option<u64>,
    pub sell_out_ms: Option<u64>,
    /// Reserves, answered at the edge or by an object, in all and in the
    /// busiest bucket (per second of it), and the share the edges answered.
    pub clicks: u64,
    pub peak_clicks_per_s: u64,
    pub peak_at_ms: Option<u64>,
    pub answered_at_edge: u64,
    pub edge_share: f64,
    pub reserved: u64,
    pub confirmed: u64,
    pub cancelled: u64,
    pub expired: u64,
    pub refused: Refusals,
    /// Orders and voids the origin acknowledged, and those on their way.
    pub delivered: u64,
    pub outbox_backlog: u64,
}

/// Reserves in `c`: those the objects answered and those the edges did.
fn clicks(c: &Counters) -> u64 {
    let at_objects: u64 = ReserveKind::ALL.iter().map(|&k| c.reserve(k)).sum();
    at_objects + at_edge(c)
}

fn at_edge(c: &Counters) -> u64 {
    c.edge_sold_out + c.edge_not_admitted + c.edge_rate_limited
}

impl Timeline {
    pub fn summary(&self) -> Summary {
        let mut total = Counters::default();
        let mut s = Summary::default();
        let mut peak = 0;
        for p in &self.periods {
            total.add(&p.counts);
            let n = clicks(&p.counts);
            if n > 0 && s.first_click_ms.is_none() {
                s.first_click_ms = Some(p.start_ms);
            }
            if n > peak {
                peak = n;
                s.peak_at_ms = Some(p.start_ms);
            }
            let said = p.counts.reserve(ReserveKind::SoldOut) + p.counts.edge_sold_out > 0;
            if s.first_click_ms.is_some()
                && s.sold_out_at_ms.is_none()
                && (said || p.available == 0)
            {
                s.sold_out_at_ms = Some(p.start_ms + self.step_ms);
            }
            s.delivered += p.delivered;
        }
        s.sell_out_ms = s.first_click_ms.zip(s.sold_out_at_ms).map(|(a, b)| b - a);
        s.peak_clicks_per_s = peak * 1_000 / self.step_ms.max(1);
        s.clicks = clicks(&total);
        s.answered_at_edge = at_edge(&total);
        s.edge_share = (s.answered_at_edge * 1_000)
            .checked_div(s.clicks)
            .map_or(0.0, |permille| permille as f64 / 1_000.0);
        s.reserved = total.reserve(ReserveKind::Reserved);
        s.confirmed = total.holds_confirmed;
        s.cancelled = total.holds_cancelled;
        s.expired = total.holds_expired;
        let r = |k| total.reserve(k);
        s.refused = Refusals {
            rate_limited: r(ReserveKind::RateLimited) + total.edge_rate_limited,
            proof_of_work: total.pow_required,
            infinite_queue: total.pow_infinite_queued,
            not_admitted: r(ReserveKind::NotAdmitted) + total.edge_not_admitted,
            sold_out: r(ReserveKind::SoldOut) + total.edge_sold_out,
            unavailable: r(ReserveKind::Unavailable) + r(ReserveKind::Overloaded),
            other: 0,
        };
        let named = r(ReserveKind::Reserved)
            + r(ReserveKind::Replayed)
            + r(ReserveKind::RateLimited)
            + r(ReserveKind::NotAdmitted)
            + r(ReserveKind::SoldOut)
            + r(ReserveKind::Unavailable)
            + r(ReserveKind::Overloaded);
        let at_objects: u64 = ReserveKind::ALL.iter().map(|&k| r(k)).sum();
        s.refused.other = at_objects - named;
        s.outbox_backlog = self.periods.last().map_or(0, |p| p.outbox_backlog);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ReserveKind;
    use crate::splitmix64;

    fn counted(reserved: u64, sold_out: u64) -> Counters {
        let mut c = Counters::default();
        for _ in 0..reserved {
            c.count_reserve(ReserveKind::Reserved);
        }
        for _ in 0..sold_out {
            c.count_reserve(ReserveKind::SoldOut);
        }
        c
    }

    fn mark(available: u64) -> Mark {
        Mark {
            available,
            ..Mark::default()
        }
    }

    #[test]
    fn each_note_counts_what_came_since_the_last_in_its_own_bucket() {
        let mut h = History::default();
        h.note(1_200, &counted(1, 0), mark(9));
        h.note(1_900, &counted(2, 3), mark(8));
        h.note(4_100, &counted(2, 10), mark(8));
        let starts: Vec<u64> = h.buckets.iter().map(|b| b.start_ms).collect();
        assert_eq!(starts, [1_000, 4_000]);
        assert_eq!(h.buckets[0].counts, counted(2, 3));
        assert_eq!(h.buckets[0].mark, mark(8));
        assert_eq!(h.buckets[1].counts, counted(0, 7));
        assert_eq!(h.total(), counted(2, 10));
        // Nothing new and the same mark: no bucket for a quiet moment.
        h.note(9_000, &counted(2, 10), mark(8));
        assert_eq!(h.buckets.len(), 2);
        // After a restore the counters start again from zero.
        h.counters_restarted();
        h.note(9_500, &counted(1, 0), mark(7));
        assert_eq!(h.total(), counted(3, 10));
        assert_eq!(h.check(), Ok(()));
    }

    /// A simulated week of a busy product, one note every few seconds at
    /// random: the history stays within its bound and well formed after
    /// every note, loses no count, and its last mark is the last noted.
    #[test]
    fn a_week_of_notes_stays_bounded_and_loses_no_count() {
        let seed = 7;
        let mut h = History::default();
        let mut totals = Counters::default();
        let mut now = 1_000_000u64;
        let mut state = seed;
        let mut x = 0;
        let week_ms = 7 * 24 * 3_600 * 1_000;
        let mut notes = 0;
        while now < 1_000_000 + week_ms {
            x = splitmix64(&mut state);
            now += 1 + x % 20_000;
            let (r, s) = (x % 3, (x >> 8) % 50);
            totals.add(&counted(r, s));
            h.note(now, &totals, mark(x % 1_000));
            notes += 1;
            assert!(
                h.buckets.len() <= limits::HISTORY_BUCKETS_MAX,
                "seed {seed}, note {notes}"
            );
            if notes % 997 == 0 {
                assert_eq!(h.check(), Ok(()), "seed {seed}, note {notes}");
            }
        }
        assert_eq!(h.check(), Ok(()));
        assert_eq!(h.total(), totals, "seed {seed}");
        assert_eq!(h.buckets.last().unwrap().mark, mark(x % 1_000));
        assert!(
            h.step_ms >= week_ms / limits::HISTORY_BUCKETS_MAX as u64,
            "{}",
            h.step_ms
        );
    }

    /// Storage as the object keeps it: buckets by start, with their step.
    fn apply(
        stored: &mut std::collections::BTreeMap<u64, Bucket>,
        step: &mut u64,
        w: HistoryWrite,
    ) {
        if w.replace {
            stored.clear();
        }
        *step = w.step_ms;
        for b in w.buckets {
            stored.insert(b.start_ms, b);
        }
    }

    /// Notes at random for a simulated day, some with a write of rows
    /// anyway, some without, and the alarm's flush when it is due: after
    /// every poll, nothing has waited unwritten past the flush interval,
    /// storage restores to a well-formed history, and after a write that
    /// history is the one in memory, bucket for bucket.
    #[test]
    fn what_is_written_restores_to_what_was_noted() {
        let seed = 11;
        let mut state = seed;
        let mut h = History::default();
        let mut stored = std::collections::BTreeMap::new();
        let mut step = limits::HISTORY_STEP_MS;
        let mut totals = Counters::default();
        let mut now = 5_000u64;
        for i in 0..20_000 {
            let x = splitmix64(&mut state);
            now += 1 + x % 9_000;
            totals.add(&counted(x % 2, (x >> 4) % 20));
            h.note(now, &totals, mark((x >> 12) % 50));
            let writing = (x >> 20).is_multiple_of(4);
            // The alarm fires at the flush deadline or later.
            let at = if writing {
                now
            } else {
                h.flush_at().map_or(now, |t| t.max(now))
            };
            if let Some(w) = h.poll_write(at, writing || at > now) {
                apply(&mut stored, &mut step, w);
                let back = History::restore(step, stored.values().cloned().collect())
                    .unwrap_or_else(|e| panic!("seed {seed}, note {i}: {e:?}"));
                assert_eq!(back.buckets, h.buckets, "seed {seed}, note {i}");
            }
            assert!(
                h.flush_at().is_none_or(|t| t > at),
                "seed {seed}, note {i}: a note waits past its flush"
            );
        }
        assert!(h.step_ms > limits::HISTORY_STEP_MS, "the history coarsened");
    }

    #[test]
    fn a_refusal_waits_for_a_write_or_its_flush() {
        let mut h = History::default();
        h.note(1_000, &counted(0, 5), mark(0));
        assert_eq!(h.flush_at(), Some(1_000 + limits::HISTORY_FLUSH_MS));
        assert_eq!(h.poll_write(2_000, false), None);
        h.note(3_000, &counted(0, 9), mark(0));
        // The deadline is the oldest unwritten note's.
        assert_eq!(h.flush_at(), Some(1_000 + limits::HISTORY_FLUSH_MS));
        let w = h
            .poll_write(1_000 + limits::HISTORY_FLUSH_MS, false)
            .expect("due");
        assert_eq!(w.buckets.len(), 2);
        assert!(!w.replace);
        assert_eq!((h.flush_at(), h.poll_write(20_000, true)), (None, None));
        // A batch that writes anyway takes the history with it at once.
        h.note(20_500, &counted(1, 9), mark(0));
        let w = h.poll_write(20_500, true).expect("with the rows");
        assert_eq!(w.buckets[0].start_ms, 20_000);
        assert_eq!(w.buckets[0].counts, counted(1, 0));
    }

    #[test]
    fn a_misshapen_history_fails_its_check() {
        let mut h = History::default();
        h.note(3_000, &counted(1, 0), mark(1));
        h.note(5_000, &counted(2, 0), mark(1));
        let mut bad = h.clone();
        bad.buckets[1].start_ms = 3_000;
        assert_eq!(bad.check(), Err(HistoryFault::Order { index: 1 }));
        let mut bad = h.clone();
        bad.buckets[0].start_ms = 3_500;
        assert_eq!(bad.check(), Err(HistoryFault::Order { index: 0 }));
        let mut bad = h;
        bad.step_ms = 3 * limits::HISTORY_STEP_MS;
        assert_eq!(bad.check(), Err(HistoryFault::Shape));
    }

    fn shipped(available: u64, backlog: u64, acked: u64) -> Mark {
        Mark {
            available,
            outbox_backlog: backlog,
            outbox_acked_seq: acked,
            ..Mark::default()
        }
    }

    /// Home and a shard, the shard's history coarser: the product's
    /// buckets are at the shard's step; counts and deliveries are summed,
    /// the stock is home's, and a quiet object's backlog holds through the
    /// buckets where it noted nothing.
    #[test]
    fn a_products_objects_merge_at_the_coarsest_step() {
        let mut home = History::default();
        home.note(1_000, &counted(1, 0), shipped(9, 1, 0));
        home.note(2_500, &counted(2, 4), shipped(8, 0, 2));
        home.note(6_100, &counted(2, 9), shipped(8, 0, 2));
        let mut shard = History::default();
        shard.note(1_200, &counted(3, 0), shipped(5, 3, 0));
        shard.coarsen();
        shard.note(3_900, &counted(3, 1), shipped(5, 1, 2));
        assert_eq!(shard.step_ms, 2_000);
        let t = merge(&[home, shard]);
        assert_eq!(t.step_ms, 2_000);
        let starts: Vec<u64> = t.periods.iter().map(|p| p.start_ms).collect();
        assert_eq!(starts, [0, 2_000, 6_000]);
        let [a, b, c] = &t.periods[..] else {
            panic!("{t:?}")
        };
        assert_eq!(a.counts, counted(4, 0));
        assert_eq!((a.available, a.outbox_backlog, a.delivered), (9, 4, 0));
        assert_eq!(b.counts, counted(1, 5));
        assert_eq!((b.available, b.outbox_backlog, b.delivered), (8, 1, 4));
        assert_eq!(c.counts, counted(0, 5));
        // The shard noted nothing after 3.9 s: its backlog of 1 holds.
        assert_eq!((c.available, c.outbox_backlog, c.delivered), (8, 1, 0));
    }

    /// Random histories of a home and three shards: the merged counts are
    /// the objects' counts summed, bucket by bucket and in all, and the
    /// deliveries sum to each object's last acknowledged entry.
    #[test]
    fn merging_loses_and_invents_no_count() {
        for seed in 0..40u64 {
            let mut state = seed;
            let mut objects = vec![History::default(); 4];
            let mut totals = vec![Counters::default(); 4];
            let mut acked = [0u64; 4];
            let mut now = 0u64;
            for _ in 0..3_000 {
                let x = splitmix64(&mut state);
                now += x % 700;
                let i = (x >> 16) as usize % 4;
                totals[i].add(&counted(x >> 20 & 3, x >> 24 & 7));
                acked[i] += x >> 28 & 1;
                objects[i].note(now, &totals[i], shipped(x % 50, x >> 32 & 3, acked[i]));
            }
            let t = merge(&objects);
            let mut merged = Counters::default();
            let mut delivered = 0;
            for p in &t.periods {
                assert!(p.start_ms.is_multiple_of(t.step_ms), "seed {seed}");
                merged.add(&p.counts);
                delivered += p.delivered;
            }
            let mut want = Counters::default();
            for c in &totals {
                want.add(c);
            }
            assert_eq!(merged, want, "seed {seed}");
            assert_eq!(delivered, acked.iter().sum::<u64>(), "seed {seed}");
        }
    }

    #[test]
    fn the_summary_says_when_it_sold_out_and_why_clicks_were_refused() {
        let mut home = History::default();
        let mut c = counted(0, 0);
        home.note(500, &c, shipped(10, 0, 0));
        c.add(&counted(4, 0));
        home.note(3_200, &c, shipped(6, 0, 0));
        c.add(&counted(6, 20));
        c.edge_sold_out = 70;
        c.edge_rate_limited = 5;
        c.pow_required = 3;
        c.holds_confirmed = 8;
        home.note(5_900, &c, shipped(0, 2, 6));
        let s = merge(&[home]).summary();
        assert_eq!(s.first_click_ms, Some(3_000));
        assert_eq!(s.sold_out_at_ms, Some(6_000));
        assert_eq!(s.sell_out_ms, Some(3_000));
        assert_eq!(s.clicks, 4 + 26 + 75);
        assert_eq!((s.peak_clicks_per_s, s.peak_at_ms), (101, Some(5_000)));
        assert_eq!(s.answered_at_edge, 75);
        assert_eq!(s.edge_share, 0.714);
        assert_eq!((s.reserved, s.confirmed), (10, 8));
        assert_eq!(s.refused.sold_out, 90);
        assert_eq!(s.refused.rate_limited, 5);
        assert_eq!(s.refused.proof_of_work, 3);
        assert_eq!(s.refused.other, 0);
        assert_eq!((s.delivered, s.outbox_backlog), (6, 2));
    }

    #[test]
    fn counts_travel_by_name_and_an_unknown_name_is_refused() {
        let mut c = counted(2, 1);
        c.edge_sold_out = 4;
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"reserve.reserved":2,"reserve.sold_out":1,"edge_sold_out":4}"#
        );
        assert_eq!(serde_json::from_str::<Counters>(&json).unwrap(), c);
        assert!(serde_json::from_str::<Counters>(r#"{"reserve.stolen":1}"#).is_err());
        assert!(serde_json::from_str::<Counters>(r#"{"reserve.reserved":-1}"#).is_err());
    }
}
