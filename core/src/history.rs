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
//! The gate notes its counters' totals after each batch of decisions
//! (`History::note`); the bucket of that moment gets what was counted since
//! the last note. A quiet product notes nothing, and its history has gaps
//! where nothing happened: the mark of the bucket before a gap holds
//! through it.

use crate::config::limits;
use crate::stats::Counters;

/// Where the sale stood at the end of a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    /// Tickets reported and not yet admitted.
    pub waiting: u64,
    /// Orders and voids not yet acknowledged by the origin.
    pub outbox_backlog: u64,
}

/// One time bucket: `[start_ms, start_ms + step_ms)` of its history's step.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

impl Default for History {
    fn default() -> History {
        History {
            step_ms: limits::HISTORY_STEP_MS,
            buckets: Vec::new(),
            noted: Counters::default(),
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
}
