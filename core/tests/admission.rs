//! Property tests of the waiting room's order: whatever the arrivals (ties
//! in time and in tiebreak included), the pre-queue, the reports' timing
//! and lateness, the rate and the pauses, the admitted tickets are always a
//! prefix of the queue's order (FIFO), nobody admitted is ever turned back,
//! nothing is admitted before the opening, and everyone reported is
//! admitted once enough time has passed. proptest prints the failing case.

use flashgate_core::{Admission, Arrivals, QueueKey, Rules, Ticket};
use proptest::prelude::*;

const OPEN: u64 = 100_000;

#[derive(Clone, Debug)]
struct Case {
    rate: u32,
    prequeue_ms: u64,
    /// (arrival offset from the opening, may be negative; tiebreak)
    tickets: Vec<(i64, u32)>,
    /// How late each report comes, in ms.
    report_lag_ms: u64,
    /// Instants (offsets from the opening) where selling stops or resumes.
    toggles: Vec<i64>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..200,
        0u64..20_000,
        prop::collection::vec(
            (
                -20_000i64..40_000,
                // Few distinct tiebreaks, so that ties happen.
                prop_oneof![0u32..4, any::<u32>()],
            ),
            0..120,
        ),
        0u64..3_000,
        prop::collection::vec(-5_000i64..60_000, 0..6),
    )
        .prop_map(|(rate, prequeue_ms, tickets, report_lag_ms, mut toggles)| {
            // Pre-queue arrivals only inside the pre-queue window; the edge
            // issues no ticket before it.
            let tickets = tickets
                .into_iter()
                .filter(|&(at, _)| at >= -(prequeue_ms as i64))
                .collect();
            toggles.sort_unstable();
            Case {
                rate,
                prequeue_ms,
                tickets,
                report_lag_ms,
                toggles,
            }
        })
}

fn at(offset: i64) -> u64 {
    (OPEN as i64 + offset) as u64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn admission_is_fifo_monotone_and_complete(c in case()) {
        let rules = Rules { admit_per_s: c.rate, opens_at_ms: Some(OPEN) };
        let tickets: Vec<Ticket> = c
            .tickets
            .iter()
            .map(|&(off, tiebreak)| Ticket { arrived_ms: at(off), tiebreak, infinite_queue: false })
            .collect();
        let mut a = Admission::default();
        let start = at(-(c.prequeue_ms as i64)) - 1;
        a.checkpoint(start, rules, true);
        let mut reported = vec![false; tickets.len()];
        let mut admitted = vec![false; tickets.len()];
        let mut toggles = c.toggles.iter().map(|&o| at(o)).peekable();
        let mut advancing = true;
        let mut now = start;
        while now < at(40_000) + c.report_lag_ms + 1_000 {
            now += 250;
            while toggles.peek().is_some_and(|&t| t <= now) {
                toggles.next();
                advancing = !advancing;
                a.checkpoint(now, rules, advancing);
            }
            // Report what arrived at least `report_lag_ms` ago.
            let mut arrivals = Arrivals::default();
            for (i, t) in tickets.iter().enumerate() {
                if !reported[i] && t.arrived_ms + c.report_lag_ms <= now {
                    reported[i] = true;
                    arrivals.add(t, rules.opens_at_ms);
                }
            }
            a.record(now, rules, &arrivals);

            let w = a.watermark(now, rules);
            for (i, t) in tickets.iter().enumerate() {
                let key = t.key(rules.opens_at_ms);
                let now_in = w.admits(key);
                // Monotone: nobody admitted is turned back.
                prop_assert!(!admitted[i] || now_in, "ticket {i} {key:?} un-admitted at {now}");
                admitted[i] = now_in;
                if now < OPEN {
                    prop_assert!(!now_in, "ticket {i} admitted before the opening");
                }
            }
            // FIFO: the admitted reported tickets are a prefix of the order.
            let mut order: Vec<(QueueKey, bool)> = tickets
                .iter()
                .enumerate()
                .filter(|&(i, _)| reported[i])
                .map(|(i, t)| (t.key(rules.opens_at_ms), admitted[i]))
                .collect();
            order.sort();
            let first_out = order.iter().position(|&(_, inn)| !inn).unwrap_or(order.len());
            prop_assert!(
                order[first_out..].iter().all(|&(_, inn)| !inn),
                "an admitted ticket after a waiting one at {now}: {order:?}"
            );
            // The count never runs ahead of the reports.
            prop_assert!(a.admitted_milli(now, rules) <= a.reported() * 1000);
        }
        // Complete: selling the whole time, everyone reported gets in.
        if c.toggles.is_empty() {
            let late = now + 1_000 * (tickets.len() as u64 / u64::from(c.rate) + 2);
            let w = a.watermark(late, rules);
            for t in &tickets {
                prop_assert!(w.admits(t.key(rules.opens_at_ms)), "{t:?} never admitted");
            }
        }
    }

    #[test]
    fn a_position_counts_down_to_admission(c in case()) {
        let rules = Rules { admit_per_s: c.rate, opens_at_ms: Some(OPEN) };
        let mut a = Admission::default();
        a.checkpoint(0, rules, true);
        let mut arrivals = Arrivals::default();
        let tickets: Vec<Ticket> = c
            .tickets
            .iter()
            .map(|&(off, tiebreak)| Ticket { arrived_ms: at(off), tiebreak, infinite_queue: false })
            .collect();
        for t in &tickets {
            arrivals.add(t, rules.opens_at_ms);
        }
        a.record(at(-(c.prequeue_ms as i64)), rules, &arrivals);
        for t in &tickets {
            let key = t.key(rules.opens_at_ms);
            let mut last = u64::MAX;
            let mut now = OPEN;
            while !a.watermark(now, rules).admits(key) {
                let p = a.position(key, now, rules);
                prop_assert!(p <= last, "position rose from {last} to {p}");
                prop_assert!(p <= a.reported());
                last = p;
                now += 100;
                prop_assert!(now < OPEN + 10_000_000, "never admitted");
            }
        }
    }
}

// A buyer who joins again, in the same report or a later one, before the
// opening or after, is counted once; merging reports keeps the counts and
// names at most `limits::ARRIVALS_NAMED_MAX`; and the names go on the wire
// as pairs, left out when there are none.
mod rejoins {
    use flashgate_core::bloom::Bloom;
    use flashgate_core::{limits, Arrivals, Named, Ticket};

    const OPEN: u64 = 100_000;

    fn ticket(arrived_ms: u64, tiebreak: u32) -> Ticket {
        Ticket {
            arrived_ms,
            tiebreak,
            infinite_queue: false,
        }
    }

    #[test]
    fn a_buyer_who_joins_again_is_counted_once() {
        let mut joined = Bloom::with_capacity(limits::JOINED_SIZED_FOR);
        let mut first = Arrivals::default();
        // Buyer 7 three times (twice in the pre-queue, once after the
        // opening), buyer 9 once.
        first.add(&ticket(OPEN - 500, 7), Some(OPEN));
        first.add(&ticket(OPEN - 100, 7), Some(OPEN));
        first.add(&ticket(OPEN + 1_500, 7), Some(OPEN));
        first.add(&ticket(OPEN + 1_600, 9), Some(OPEN));
        assert_eq!(
            (first.prequeue, first.per_second.clone()),
            (2, vec![(101, 2)])
        );
        assert_eq!(first.forget_rejoins(&mut joined), 2);
        assert_eq!(
            (first.prequeue, first.per_second.clone()),
            (1, vec![(101, 1)])
        );
        assert!(first.named.is_empty(), "the names are consumed");
        // A later report: 9 again, and a new buyer.
        let mut later = Arrivals::default();
        later.add(&ticket(OPEN + 2_000, 9), Some(OPEN));
        later.add(&ticket(OPEN + 2_100, 11), Some(OPEN));
        assert_eq!(later.forget_rejoins(&mut joined), 1);
        assert_eq!(later.per_second, vec![(102, 1)]);
    }

    #[test]
    fn a_report_that_names_more_than_it_counts_takes_out_no_more_than_it_counted() {
        // Only the edge sends reports, and it names only what it counted;
        // one that says otherwise still cannot drive a count below zero.
        let mut joined = Bloom::with_capacity(16);
        let mut odd = Arrivals {
            prequeue: 0,
            per_second: vec![(5, 1)],
            named: vec![
                Named(1, Some(5)),
                Named(1, Some(5)),
                Named(1, Some(5)),
                Named(1, Some(6)),
                Named(1, None),
            ],
            ..Arrivals::default()
        };
        assert_eq!(odd.forget_rejoins(&mut joined), 1);
        assert_eq!((odd.prequeue, odd.per_second), (0, vec![(5, 0)]));
    }

    #[test]
    fn merging_reports_keeps_every_count_and_names_at_most_the_limit() {
        let mut a = Arrivals::default();
        let mut b = Arrivals::default();
        let n = limits::ARRIVALS_NAMED_MAX as u64;
        for i in 0..n {
            a.add(&ticket(OPEN + i, i as u32), Some(OPEN));
            b.add(&ticket(OPEN - 1 - i, i as u32), Some(OPEN));
        }
        b.add(&ticket(OPEN + 9_000, 1), Some(OPEN));
        assert_eq!(
            b.named.len(),
            limits::ARRIVALS_NAMED_MAX,
            "add names at most the limit"
        );
        a.merge(&b);
        assert_eq!(a.prequeue, n);
        assert_eq!(a.per_second.iter().map(|(_, c)| c).sum::<u64>(), n + 1);
        assert_eq!(a.named.len(), limits::ARRIVALS_NAMED_MAX);
    }

    #[test]
    fn names_travel_as_pairs_and_are_left_out_when_none() {
        let mut a = Arrivals::default();
        a.add(&ticket(OPEN + 1_000, 3), Some(OPEN));
        a.add(&ticket(OPEN - 1, 4), Some(OPEN));
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(
            text,
            r#"{"prequeue":1,"per_second":[[101,1]],"named":[[3,101],[4,null]]}"#
        );
        assert_eq!(serde_json::from_str::<Arrivals>(&text).unwrap(), a);
        let old = r#"{"prequeue":2,"per_second":[]}"#;
        let parsed: Arrivals = serde_json::from_str(old).unwrap();
        assert!(parsed.named.is_empty());
        assert_eq!(serde_json::to_string(&parsed).unwrap(), old);
    }
}

mod lottery {
    use flashgate_core::{Arrivals, ConfigPatch, Gate, LotteryKey, NoArchive, Published, Ticket};

    const NOW: u64 = 1_000_000;

    fn patch(opens_at_ms: u64) -> ConfigPatch {
        ConfigPatch {
            stock_total: Some(10),
            admit_per_s: Some(5),
            opens_at_ms: Some(Some(opens_at_ms)),
            prequeue_ms: Some(60_000),
            ..ConfigPatch::default()
        }
    }

    #[test]
    fn a_key_is_drawn_once_and_redrawn_only_while_nobody_could_have_joined() {
        let mut g = Gate::create(NOW, &patch(NOW + 3_600_000)).unwrap();
        assert!(g.lottery_wanted(), "a new room wants a key");
        g.handle_lottery_key(LotteryKey([1; 32]));
        assert!(!g.lottery_wanted());
        // A second key is not taken: the first may order tickets already.
        g.handle_lottery_key(LotteryKey([2; 32]));
        assert_eq!(g.admission().lottery.key, Some(LotteryKey([1; 32])));
        let opens = NOW + 3_600_000;
        assert_eq!(
            g.admission().lottery.published(NOW, Some(opens)),
            Published::Commitment(LotteryKey([1; 32]))
        );
        // Rescheduled before its pre-queue opened: a new key for the new
        // schedule.
        g.configure(&NoArchive, NOW + 1, &patch(opens + 1_000))
            .unwrap();
        assert!(
            g.lottery_wanted(),
            "a reschedule before anyone joined redraws"
        );
        g.handle_lottery_key(LotteryKey([3; 32]));
        // Once the pre-queue is open and a ticket is counted, the key stays.
        let in_prequeue = opens + 1_000 - 30_000;
        let mut a = Arrivals::default();
        a.add(
            &Ticket {
                arrived_ms: in_prequeue,
                tiebreak: 7,
                infinite_queue: false,
            },
            Some(opens + 1_000),
        );
        g.handle_arrivals(in_prequeue, &a);
        g.configure(&NoArchive, in_prequeue + 1, &patch(opens + 60_000))
            .unwrap();
        assert!(!g.lottery_wanted());
        assert_eq!(g.admission().lottery.key, Some(LotteryKey([3; 32])));
        // No room, no key wanted.
        let none = Gate::create(
            NOW,
            &ConfigPatch {
                stock_total: Some(1),
                ..ConfigPatch::default()
            },
        )
        .unwrap();
        assert!(!none.lottery_wanted());
    }
}

mod pow_rate {
    use flashgate_core::{Arrivals, ConfigPatch, Gate, Pow, PowMode, Ticket};

    const NOW: u64 = 1_000_000;

    fn ticket(arrived_ms: u64, tiebreak: u32) -> Ticket {
        Ticket {
            arrived_ms,
            tiebreak,
            infinite_queue: false,
        }
    }

    /// An adaptive level follows the tickets the room counts, each buyer
    /// once: joins refused or sent to the infinite queue, and a buyer's
    /// rejoins, cost nothing, and raise the price for nobody.
    #[test]
    fn only_counted_tickets_raise_an_adaptive_level() {
        let mut g = Gate::create(
            NOW,
            &ConfigPatch {
                stock_total: Some(10),
                admit_per_s: Some(1),
                pow: Some(Pow {
                    mode: PowMode::Adaptive,
                    level: 1,
                    infinite_queue: true,
                }),
                ..ConfigPatch::default()
            },
        )
        .unwrap();
        assert_eq!(g.pow_level(NOW), Some(1));
        // A flood of free joins, and one buyer rejoining 200 times.
        let mut free = Arrivals {
            pow_required: 10_000,
            pow_infinite_queued: 10_000,
            ..Arrivals::default()
        };
        for _ in 0..200 {
            free.add(&ticket(NOW, 7), None);
        }
        g.handle_arrivals(NOW, &free);
        assert_eq!(
            g.joins_per_s(NOW),
            0,
            "the buyer is counted once: 1 in 10 s"
        );
        assert_eq!(g.pow_level(NOW), Some(1));
        let stats = g.stats(NOW);
        assert_eq!(
            (
                stats.counters.pow_required,
                stats.counters.pow_infinite_queued
            ),
            (10_000, 10_000),
            "the stats still count them"
        );
        // 200 buyers, each once: 20 a second over the window, past 16 times
        // the admission rate.
        let mut crowd = Arrivals::default();
        for i in 0..200 {
            crowd.add(&ticket(NOW + 1, 100 + i), None);
        }
        g.handle_arrivals(NOW + 1, &crowd);
        assert_eq!(g.joins_per_s(NOW + 1), 20);
        assert_eq!(g.pow_level(NOW + 1), Some(4));
    }
}
