//! The verdict, checked from outside: what the buyers were told against the
//! stock, against the orders the database holds, and against each other
//! (a `sold_out` answer while units were left, `sold_out`).

use std::collections::{BTreeMap, BTreeSet};

use flashgate_wire::bounds::SOLD_OUT_LAG_MS;
use serde::Serialize;

use crate::sold_out::{self, FalseSoldOut, Timeline};

/// An order as the database of record holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredOrder {
    pub reservation_id: String,
    pub quantity: u64,
    /// Accepted and not voided.
    pub counts: bool,
}

/// A reservation a client was told of, and the span of client time in
/// which it certainly held its units: from the 2xx answer (the decision
/// came before it) until the cancel was sent, or until the first attempt
/// was sent plus the hold's time to live (the decision came after it), or
/// for good once confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub id: String,
    pub quantity: u64,
    pub from_ms: u64,
    /// `None`: held for good (confirmed, or a peer's order).
    pub until_ms: Option<u64>,
}

/// The most units held at once by the spans in `held` (distinct ids).
pub fn peak_units(held: &[Held]) -> u64 {
    let mut seen = std::collections::BTreeSet::new();
    // (time, +units or -units); ends sort before starts at the same instant,
    // because a span is half-open.
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for h in held {
        if !seen.insert(h.id.as_str()) {
            continue;
        }
        match h.until_ms {
            Some(until) if until <= h.from_ms => continue,
            Some(until) => edges.push((until, -(h.quantity as i64))),
            None => {}
        }
        edges.push((h.from_ms, h.quantity as i64));
    }
    edges.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, delta) in edges {
        now += delta;
        peak = peak.max(now);
    }
    peak as u64
}

/// The product's units available, read once the buyers were done (before
/// the settling, and before the holds left expire), and when the read was
/// answered, in µs after the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndRead {
    pub available: u64,
    pub read_us: u64,
}

/// What the clients saw, and what the systems said afterwards.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub stock_total: u64,
    /// Every 2xx reservation (replays repeat an id).
    pub reserved: Vec<Held>,
    /// Reservations whose confirmation got a 2xx.
    pub confirmed: BTreeSet<String>,
    /// Reservations whose confirmation never got an answer (so the client
    /// cannot know whether it happened).
    pub confirm_unanswered: BTreeSet<String>,
    /// Reservations acknowledged with a 2xx that the system later said it
    /// did not know (a lost acknowledged unit).
    pub forgotten: BTreeSet<String>,
    /// The database's orders for the product, if it was read.
    pub orders: Option<Vec<StoredOrder>>,
    /// The reconciliation drift in units, if it was read.
    pub drift_units: Option<i64>,
    /// The reserves answered `sold_out` or served, and the units that came
    /// back, with their times.
    pub timeline: Timeline,
    pub available_at_end: Option<EndRead>,
}

/// What the run finds of the sale: oversold, lost or duplicated orders,
/// false sold-outs. (A buyer's verdict on its odds is the core's `Verdict`.)
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SaleVerdict {
    /// Units certainly held at one instant beyond the stock.
    pub oversold_units: u64,
    /// Units in counted orders beyond the stock.
    pub oversold_in_db_units: u64,
    /// Confirmations a client saw that the database does not hold.
    pub lost_orders: u64,
    /// Reservation ids the database holds more than once.
    pub duplicated_orders: u64,
    /// Counted orders no client saw confirmed (and none left unanswered).
    pub unexplained_orders: u64,
    pub drift_units: Option<i64>,
    /// Acknowledged reservations the system later did not know.
    pub forgotten_reservations: u64,
    /// Whether the database's orders were read, and so the checks on them
    /// made (a run that stopped early may not have got there).
    pub orders_checked: bool,
    /// Reserves answered `sold_out` (409).
    pub sold_out_answers: u64,
    /// Of those, the false ones (`sold_out`): a later reserve got a unit
    /// with nothing come back since the refusal, `SOLD_OUT_LAG_MS` allowed.
    pub false_sold_outs: u64,
    /// The first few, by send time.
    pub false_sold_out_examples: Vec<FalseSoldOut>,
    /// The product's units available once the buyers were done, if read.
    pub available_at_end: Option<u64>,
    /// Those units, when a buyer was refused `sold_out` and nothing came
    /// back from its refusal (`SOLD_OUT_LAG_MS` allowed) to the read: they
    /// were available when it was refused. 0 otherwise.
    pub available_while_refused: u64,
    pub violations: Vec<String>,
}

impl SaleVerdict {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

pub fn judge(seen: &Observed) -> SaleVerdict {
    let mut v = SaleVerdict {
        drift_units: seen.drift_units,
        ..SaleVerdict::default()
    };
    let peak = peak_units(&seen.reserved);
    v.oversold_units = peak.saturating_sub(seen.stock_total);
    if v.oversold_units > 0 {
        v.violations.push(format!(
            "oversold: buyers were told they hold {peak} units at once, of a stock of {}",
            seen.stock_total
        ));
    }
    v.forgotten_reservations = seen.forgotten.len() as u64;
    if let Some(id) = seen.forgotten.first() {
        v.violations.push(format!(
            "{} acknowledged reservations were later unknown, e.g. {id}",
            seen.forgotten.len()
        ));
    }
    v.orders_checked = seen.orders.is_some();
    if let Some(orders) = &seen.orders {
        let mut per_id: BTreeMap<&str, u64> = BTreeMap::new();
        for o in orders {
            *per_id.entry(o.reservation_id.as_str()).or_default() += 1;
        }
        v.duplicated_orders = per_id.values().filter(|&&n| n > 1).count() as u64;
        if v.duplicated_orders > 0 {
            v.violations.push(format!(
                "{} orders are stored more than once",
                v.duplicated_orders
            ));
        }
        let counted: BTreeSet<&str> = orders
            .iter()
            .filter(|o| o.counts)
            .map(|o| o.reservation_id.as_str())
            .collect();
        let db_units: u64 = orders.iter().filter(|o| o.counts).map(|o| o.quantity).sum();
        v.oversold_in_db_units = db_units.saturating_sub(seen.stock_total);
        if v.oversold_in_db_units > 0 {
            v.violations.push(format!(
                "oversold: the database counts {db_units} units of a stock of {}",
                seen.stock_total
            ));
        }
        let lost: Vec<&String> = seen
            .confirmed
            .iter()
            .filter(|id| !counted.contains(id.as_str()))
            .collect();
        v.lost_orders = lost.len() as u64;
        if !lost.is_empty() {
            v.violations.push(format!(
                "{} confirmed orders are not in the database, e.g. {}",
                lost.len(),
                lost[0]
            ));
        }
        let unexplained: Vec<&&str> = counted
            .iter()
            .filter(|id| !seen.confirmed.contains(**id) && !seen.confirm_unanswered.contains(**id))
            .collect();
        v.unexplained_orders = unexplained.len() as u64;
        if !unexplained.is_empty() {
            v.violations.push(format!(
                "{} orders in the database were never confirmed to a client, e.g. {}",
                unexplained.len(),
                unexplained[0]
            ));
        }
    }
    if let Some(drift) = seen.drift_units.filter(|d| *d != 0) {
        v.violations
            .push(format!("reconciliation drift is {drift} units, not 0"));
    }
    judge_sold_outs(seen, &mut v);
    v
}

/// The `sold_out` answers against what the buyers saw after them and the
/// units left at the end.
fn judge_sold_outs(seen: &Observed, v: &mut SaleVerdict) {
    let lag_us = SOLD_OUT_LAG_MS * 1000;
    v.sold_out_answers = seen.timeline.refused.len() as u64;
    let judged = sold_out::false_sold_outs(&seen.timeline, lag_us);
    v.false_sold_outs = judged.count;
    v.false_sold_out_examples = judged.examples;
    if let Some(e) = v.false_sold_out_examples.first() {
        v.violations.push(format!(
            "{} of {} sold-out answers were false (a later reserve got a unit, nothing came back \
             in between, lag {SOLD_OUT_LAG_MS} ms), e.g. buyer {} refused: sent at {:.1} ms, \
             answered at {:.1} ms; buyer {} sent a reserve at {:.1} ms and got a unit",
            v.false_sold_outs,
            v.sold_out_answers,
            e.buyer,
            e.sent_ms,
            e.answered_ms,
            e.later_buyer,
            e.later_sent_ms
        ));
    }
    let Some(end) = seen.available_at_end else {
        return;
    };
    v.available_at_end = Some(end.available);
    if end.available == 0 {
        return;
    }
    if let Some(r) = sold_out::refused_while_available(&seen.timeline, lag_us, end.read_us) {
        v.available_while_refused = end.available;
        v.violations.push(format!(
            "{} units were still available at the end (read at {:.1} ms) while buyers were \
             refused sold_out, e.g. buyer {} at {:.1} ms, with nothing come back since \
             (lag {SOLD_OUT_LAG_MS} ms)",
            end.available,
            end.read_us as f64 / 1000.0,
            r.buyer,
            r.sent_us as f64 / 1000.0
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: &str, quantity: u64) -> StoredOrder {
        StoredOrder {
            reservation_id: id.into(),
            quantity,
            counts: true,
        }
    }

    fn held(id: &str, quantity: u64, from_ms: u64, until_ms: Option<u64>) -> Held {
        Held {
            id: id.into(),
            quantity,
            from_ms,
            until_ms,
        }
    }

    #[test]
    fn units_count_only_while_certainly_held() {
        // b starts when a's span ends: never more than 2 at once.
        let spans = [
            held("a", 2, 0, Some(10)),
            held("b", 2, 10, None),
            held("c", 0, 0, None),
        ];
        assert_eq!(peak_units(&spans), 2);
        // Overlapping: 4.
        assert_eq!(
            peak_units(&[held("a", 2, 0, Some(11)), held("b", 2, 10, None)]),
            4
        );
        // A replay of an id counts once; an empty span not at all.
        assert_eq!(
            peak_units(&[
                held("a", 2, 0, None),
                held("a", 2, 5, None),
                held("z", 9, 7, Some(7))
            ]),
            2
        );
    }

    fn clean() -> Observed {
        Observed {
            stock_total: 3,
            reserved: vec![
                held("a", 1, 0, None),
                held("b", 2, 1, None),
                held("a", 1, 2, None),
            ],
            confirmed: ["a".to_string(), "b".to_string()].into(),
            orders: Some(vec![order("a", 1), order("b", 2)]),
            drift_units: Some(0),
            ..Observed::default()
        }
    }

    #[test]
    fn a_clean_run_passes_and_replays_count_once() {
        let v = judge(&clean());
        assert!(v.passed(), "{v:?}");
    }

    #[test]
    fn each_violation_is_named() {
        let mut o = clean();
        o.reserved.push(held("c", 1, 5, None));
        assert_eq!(judge(&o).oversold_units, 1);
        // The same unit again after a cancel is not an oversell.
        let mut o = clean();
        o.reserved[1].until_ms = Some(4);
        o.reserved.push(held("c", 2, 5, None));
        assert_eq!(judge(&o).oversold_units, 0);

        let mut o = clean();
        o.orders = Some(vec![order("a", 1)]);
        assert_eq!(judge(&o).lost_orders, 1);

        let mut o = clean();
        o.orders = Some(vec![order("a", 1), order("b", 2), order("b", 2)]);
        let v = judge(&o);
        assert_eq!((v.duplicated_orders, v.oversold_in_db_units), (1, 2));

        let mut o = clean();
        o.orders = Some(vec![order("a", 1), order("b", 2), order("z", 1)]);
        assert_eq!(judge(&o).unexplained_orders, 1);
        o.confirm_unanswered.insert("z".into());
        // An order whose confirmation lost its answer may exist; it still
        // oversells here, since the stock is 3.
        let v = judge(&o);
        assert_eq!((v.unexplained_orders, v.oversold_in_db_units), (0, 1));

        let mut o = clean();
        o.forgotten.insert("a".into());
        assert_eq!(judge(&o).forgotten_reservations, 1);

        let mut o = clean();
        o.drift_units = Some(-1);
        assert!(!judge(&o).passed());
        assert_eq!(judge(&o).violations.len(), 1);
    }

    fn timeline() -> Timeline {
        use crate::sold_out::{Refused, Served};
        // a got a unit, b was refused, then c got one.
        Timeline {
            served: vec![
                Served {
                    buyer: "a".into(),
                    sent_us: 0,
                    answered_us: 10_000,
                },
                Served {
                    buyer: "c".into(),
                    sent_us: 5_000_000,
                    answered_us: 5_010_000,
                },
            ],
            refused: vec![Refused {
                buyer: "b".into(),
                sent_us: 3_000_000,
                received_us: 3_010_000,
            }],
            returned_us: vec![],
        }
    }

    #[test]
    fn a_false_sold_out_fails_the_verdict_and_names_its_buyers() {
        let mut o = clean();
        o.timeline = timeline();
        let v = judge(&o);
        assert_eq!((v.sold_out_answers, v.false_sold_outs), (1, 1));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].contains("buyer b refused: sent at 3000.0 ms, answered at 3010.0 ms; buyer c sent a reserve at 5000.0 ms"),
            "{v:?}"
        );
        // A unit back within the lag before the refusal explains it.
        o.timeline.returned_us.push(2_500_000);
        let v = judge(&o);
        assert!(v.passed(), "{v:?}");
        assert_eq!((v.sold_out_answers, v.false_sold_outs), (1, 0));
    }

    #[test]
    fn units_left_while_a_buyer_was_refused_fail_the_verdict() {
        let mut o = clean();
        o.timeline = timeline();
        o.timeline.served.pop();
        let end = |available| {
            Some(EndRead {
                available,
                read_us: 9_000_000,
            })
        };
        o.available_at_end = end(2);
        let v = judge(&o);
        assert_eq!(
            (v.available_at_end, v.available_while_refused),
            (Some(2), 2)
        );
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].starts_with("2 units were still available at the end"),
            "{v:?}"
        );
        // None left, or a unit back after the refusal (a cancel the
        // buyers made), or nobody refused: it passes.
        o.available_at_end = end(0);
        assert!(judge(&o).passed());
        o.available_at_end = end(2);
        o.timeline.returned_us.push(8_000_000);
        assert!(judge(&o).passed());
        let v = judge(&Observed {
            available_at_end: end(2),
            ..clean()
        });
        assert!(v.passed(), "{v:?}");
        assert_eq!(
            (v.available_at_end, v.available_while_refused),
            (Some(2), 0)
        );
    }

    #[test]
    fn voided_orders_do_not_count() {
        let mut o = clean();
        o.confirmed.clear();
        o.orders = Some(vec![StoredOrder {
            counts: false,
            ..order("a", 1)
        }]);
        assert!(judge(&o).passed());
    }
}
