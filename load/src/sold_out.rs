//! Whether each `sold_out` answer was true, judged from outside by what the
//! buyers were told and when.
//!
//! A false sold-out is a `sold_out` reserve answer (409, code `sold_out`)
//! that arrived before another reserve was sent, when that later reserve
//! got a unit (201), and no unit came back in between: no cancel, expiry,
//! void or restock whose time falls in [the sold-out request's send time −
//! the lag, the later reserve's answer] (it was decided at some instant
//! before its answer arrived, so a unit back while it was on its way may
//! be the one it got). The lag is the gate's stated
//! promise, `flashgate_wire::bounds::SOLD_OUT_LAG_MS`: a unit that came
//! back that recently may still be answered `sold_out`.
//!
//! The returns a run knows are its own: each cancel at the time it was
//! sent (the earliest instant its unit could have come back), and the
//! expiry of each hold it abandoned or failed to pay for in time, at the
//! hold's `expires_at_ms`. The tool neither voids nor restocks, and a void
//! or a restock by anyone else during a run is unknown to it: a run judges
//! a product of its own.
//!
//! Times are microseconds after the run's start, on one monotonic clock
//! (the gate's `expires_at_ms` is placed on it through the clock's anchor
//! to the Unix epoch).

use serde::Serialize;

/// A reserve answered `sold_out`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub buyer: String,
    /// When the refused request was sent, and when its answer arrived.
    pub sent_us: u64,
    pub received_us: u64,
}

/// A reserve that got a unit (201).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub buyer: String,
    /// When its first attempt was sent: a retried reserve (the same
    /// idempotency key) may have been decided at any attempt.
    pub sent_us: u64,
    /// When its 201 arrived: it was decided at some instant before, so a
    /// unit that came back while it was on its way may be the one it got.
    pub answered_us: u64,
}

/// Everything the run saw that bears on its `sold_out` answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    pub refused: Vec<Refused>,
    pub served: Vec<Served>,
    /// When a unit came back (a cancel sent, a hold's expiry), in any order.
    pub returned_us: Vec<u64>,
}

/// One false sold-out, as the report shows it: who was refused and when,
/// and the later buyer who got a unit with nothing come back in between.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FalseSoldOut {
    pub buyer: String,
    /// The refused reserve's send and answer, in ms after the run's start.
    pub sent_ms: f64,
    pub answered_ms: f64,
    /// The first reserve sent after that answer that got a unit.
    pub later_buyer: String,
    pub later_sent_ms: f64,
}

/// The false sold-outs of a run: how many, and the first few by send time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FalseSoldOuts {
    pub count: u64,
    pub examples: Vec<FalseSoldOut>,
}

/// The examples a report shows at most.
pub const EXAMPLES_MAX: usize = 5;

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Whether a unit came back at some instant in `[from_us, to_us]`;
/// `returned_us` is sorted.
fn returned_within(returned_us: &[u64], from_us: u64, to_us: u64) -> bool {
    let first = returned_us.partition_point(|&t| t < from_us);
    returned_us.get(first).is_some_and(|&t| t <= to_us)
}

/// Counts the false sold-outs of `t` with the lag `lag_us`.
///
/// For one refusal, the later reserve to look at is the one answered
/// first among those sent after its answer: the span [sent − lag, later
/// answer] only grows with the later answer, so if any later reserve makes
/// the refusal false, that one does. Served reserves are sorted by send
/// time with the earliest answer of every suffix, returns sorted once, and
/// each refusal is two binary searches: O(n log n) in all.
pub fn false_sold_outs(t: &Timeline, lag_us: u64) -> FalseSoldOuts {
    let mut served: Vec<&Served> = t.served.iter().collect();
    served.sort_unstable_by_key(|s| s.sent_us);
    // first_answered[i]: the served reserve answered first among served[i..].
    let mut first_answered: Vec<usize> = vec![0; served.len()];
    for i in (0..served.len()).rev() {
        first_answered[i] = match first_answered.get(i + 1) {
            Some(&j) if i + 1 < served.len() && served[j].answered_us < served[i].answered_us => j,
            _ => i,
        };
    }
    let mut returned_us = t.returned_us.clone();
    returned_us.sort_unstable();
    let mut refused: Vec<&Refused> = t.refused.iter().collect();
    refused.sort_unstable_by_key(|r| (r.sent_us, r.received_us));
    let mut out = FalseSoldOuts::default();
    for r in refused {
        let next = served.partition_point(|s| s.sent_us < r.received_us);
        let Some(later) = first_answered.get(next).map(|&j| served[j]) else {
            continue;
        };
        if returned_within(
            &returned_us,
            r.sent_us.saturating_sub(lag_us),
            later.answered_us,
        ) {
            continue;
        }
        out.count += 1;
        if out.examples.len() < EXAMPLES_MAX {
            out.examples.push(FalseSoldOut {
                buyer: r.buyer.clone(),
                sent_ms: ms(r.sent_us),
                answered_ms: ms(r.received_us),
                later_buyer: later.buyer.clone(),
                later_sent_ms: ms(later.sent_us),
            });
        }
    }
    out
}

/// The refusal that the units available at `read_us` prove false, if any:
/// the last one sent, when no unit came back from its send time − the lag
/// to `read_us`. Without a return in that span the units available at the
/// read were available all along it (a reserve only takes units away), so
/// at that refusal too. An earlier refusal has a longer span, so the last
/// one is the only one to check.
pub fn refused_while_available(t: &Timeline, lag_us: u64, read_us: u64) -> Option<&Refused> {
    let last = t
        .refused
        .iter()
        .filter(|r| r.sent_us <= read_us)
        .max_by_key(|r| r.sent_us)?;
    let mut returned_us = t.returned_us.clone();
    returned_us.sort_unstable();
    (!returned_within(&returned_us, last.sent_us.saturating_sub(lag_us), read_us)).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG_US: u64 = 1_000_000;

    fn refused(buyer: &str, sent_ms: u64, received_ms: u64) -> Refused {
        Refused {
            buyer: buyer.into(),
            sent_us: sent_ms * 1000,
            received_us: received_ms * 1000,
        }
    }

    /// Served, answered 10 ms after it was sent.
    fn served(buyer: &str, sent_ms: u64) -> Served {
        Served {
            buyer: buyer.into(),
            sent_us: sent_ms * 1000,
            answered_us: (sent_ms + 10) * 1000,
        }
    }

    /// One check per case: the timeline, and the false sold-outs expected.
    fn check(case: &str, t: Timeline, expected: u64) {
        let judged = false_sold_outs(&t, LAG_US);
        assert_eq!(judged.count, expected, "{case}: {t:?} -> {judged:?}");
        assert_eq!(judged.examples.len() as u64, expected.min(5), "{case}");
    }

    #[test]
    fn a_sold_out_is_false_only_when_a_later_reserve_got_a_unit_with_nothing_back() {
        // a got the last unit, then b was refused: true.
        check(
            "true sold-out",
            Timeline {
                served: vec![served("a", 10)],
                refused: vec![refused("b", 20, 25)],
                ..Timeline::default()
            },
            0,
        );
        // b was refused, then c, sent after b's answer, got a unit.
        check(
            "false sold-out",
            Timeline {
                served: vec![served("a", 10), served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                ..Timeline::default()
            },
            1,
        );
        // A cancel sent within the lag before b's refusal: its unit may
        // have come back after the gate's view was taken.
        check(
            "exempted by a cancel within the lag",
            Timeline {
                served: vec![served("a", 10), served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![2_000 * 1000],
            },
            0,
        );
        // An expiry between the refusal and the later reserve.
        check(
            "exempted by an expiry",
            Timeline {
                served: vec![served("a", 10), served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![4_000 * 1000],
            },
            0,
        );
        // A return 1 µs before the lag's span: nothing explains c's unit.
        check(
            "a cancel just outside the lag",
            Timeline {
                served: vec![served("a", 10), served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![2_000 * 1000 - 1],
            },
            1,
        );
        // A return after the later reserve was answered explains nothing.
        check(
            "a return after the later reserve's answer",
            Timeline {
                served: vec![served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![5_010 * 1000 + 1],
            },
            1,
        );
        // A return while the later reserve was on its way may be its unit.
        check(
            "a return while the later reserve was on its way",
            Timeline {
                served: vec![served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![5_005 * 1000],
            },
            0,
        );
        // A later reserve answered first decides, though sent after another.
        check(
            "the later reserve answered first",
            Timeline {
                served: vec![
                    Served {
                        buyer: "c".into(),
                        sent_us: 4_000_000,
                        answered_us: 9_000_000,
                    },
                    served("d", 5_000),
                ],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![6_000 * 1000],
            },
            1,
        );
        // The span's ends are in it.
        for at_ms in [2_000, 5_010] {
            check(
                "a return at an end of the span",
                Timeline {
                    served: vec![served("c", 5_000)],
                    refused: vec![refused("b", 3_000, 3_010)],
                    returned_us: vec![at_ms * 1000],
                },
                0,
            );
        }
        // A reserve sent before the refusal's answer arrived may have been
        // decided first: it proves nothing.
        check(
            "a reserve sent before the answer",
            Timeline {
                served: vec![served("c", 3_005)],
                refused: vec![refused("b", 3_000, 3_010)],
                ..Timeline::default()
            },
            0,
        );
        // Sent the very instant the answer arrived (one connection, one
        // after the other): after it.
        check(
            "a reserve sent as the answer arrived",
            Timeline {
                served: vec![served("c", 3_010)],
                refused: vec![refused("b", 3_000, 3_010)],
                ..Timeline::default()
            },
            1,
        );
    }

    #[test]
    fn the_first_later_reserve_decides_and_the_examples_are_the_first_few() {
        // A return between the first and the second later reserve: the
        // first already proves the refusal false.
        check(
            "a return after the first later reserve",
            Timeline {
                served: vec![served("d", 9_000), served("c", 5_000)],
                refused: vec![refused("b", 3_000, 3_010)],
                returned_us: vec![6_000 * 1000],
            },
            1,
        );
        // Sequential buyers, every fifth refused with units left: 20 false
        // sold-outs, 5 examples, the earliest first.
        let mut t = Timeline::default();
        for i in 0..100u64 {
            let (sent, received) = (i * 10, i * 10 + 5);
            if i % 5 == 4 {
                t.refused.push(refused(&format!("b{i}"), sent, received));
            } else {
                t.served.push(served(&format!("b{i}"), sent));
            }
        }
        t.refused.reverse();
        let judged = false_sold_outs(&t, LAG_US);
        assert_eq!(judged.count, 19, "the last refusal has no later reserve");
        assert_eq!(
            judged.examples[0],
            FalseSoldOut {
                buyer: "b4".into(),
                sent_ms: 40.0,
                answered_ms: 45.0,
                later_buyer: "b5".into(),
                later_sent_ms: 50.0,
            }
        );
        assert_eq!(judged.examples.len(), EXAMPLES_MAX);
    }

    #[test]
    fn units_available_at_the_end_prove_the_last_refusal_false_unless_one_came_back() {
        let t = Timeline {
            served: vec![served("a", 10)],
            refused: vec![refused("b", 3_000, 3_010), refused("c", 4_000, 4_010)],
            returned_us: vec![],
        };
        let read_us = 10_000 * 1000;
        assert_eq!(
            refused_while_available(&t, LAG_US, read_us).map(|r| r.buyer.as_str()),
            Some("c")
        );
        // A cancel sent within the lag before c's refusal, or after it,
        // up to the read, may be what is available.
        for at_ms in [3_000, 3_500, 9_999, 10_000] {
            let t = Timeline {
                returned_us: vec![at_ms * 1000],
                ..t.clone()
            };
            assert_eq!(
                refused_while_available(&t, LAG_US, read_us),
                None,
                "{at_ms}"
            );
        }
        // Before the lag's span, or after the read: it explains nothing.
        for at_us in [3_000 * 1000 - 1, read_us + 1] {
            let t = Timeline {
                returned_us: vec![at_us],
                ..t.clone()
            };
            assert!(
                refused_while_available(&t, LAG_US, read_us).is_some(),
                "{at_us}"
            );
        }
        assert_eq!(
            refused_while_available(&Timeline::default(), LAG_US, read_us),
            None
        );
    }
}
