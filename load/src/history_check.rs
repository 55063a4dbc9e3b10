//! The gate's history of the sale (`GET /admin/products/{id}/history`)
//! against what the run's buyers were told: read before the crowd and
//! after the settling, the difference is the run's.
//!
//! - Counts that come of a change of state (holds granted, paid,
//!   cancelled) are stored with the change: each lies between what the
//!   buyers saw and that plus the requests of its kind that got no answer
//!   (which may or may not have taken effect). Anything else is a lost or
//!   an invented count, and fails the run.
//! - Sold-out answers: an object's are counted at once, an edge's reach
//!   home with that edge's next refresh of its snapshot, and an isolate
//!   that dies loses those it had not reported. So the history may count
//!   fewer than the buyers saw (the report says how many fewer), never
//!   more than they saw plus the unanswered reserves.

use serde::{Deserialize, Serialize};

/// The figures of a history's summary the check reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Totals {
    pub reserved: u64,
    pub confirmed: u64,
    pub cancelled: u64,
    pub sold_out: u64,
}

/// A history's answer, as far as the check reads it.
#[derive(Deserialize)]
pub struct HistoryBody {
    summary: SummaryBody,
}

#[derive(Deserialize)]
struct SummaryBody {
    reserved: u64,
    confirmed: u64,
    cancelled: u64,
    refused: RefusedBody,
}

#[derive(Deserialize)]
struct RefusedBody {
    sold_out: u64,
}

impl HistoryBody {
    pub fn totals(&self) -> Totals {
        let s = &self.summary;
        Totals {
            reserved: s.reserved,
            confirmed: s.confirmed,
            cancelled: s.cancelled,
            sold_out: s.refused.sold_out,
        }
    }
}

/// What the run's buyers saw, and what they asked that got no answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Seen {
    /// Distinct reservations granted with a 2xx.
    pub reserved: u64,
    pub confirmed: u64,
    pub cancelled: u64,
    pub sold_out: u64,
    /// Reserves with no answer (a network error or a timeout).
    pub reserves_unanswered: u64,
    pub confirms_unanswered: u64,
    /// Cancels without a 2xx: some may have taken effect.
    pub cancels_not_acknowledged: u64,
}

/// The check's finding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HistoryCheck {
    /// The history's counts over the run (after minus before).
    pub history: Totals,
    pub seen: Seen,
    /// Sold-out answers the buyers saw that the history does not count
    /// yet: edges' answers not yet reported home.
    pub sold_out_unreported: u64,
    pub violations: Vec<String>,
}

/// The history over the run against what the buyers saw.
pub fn check(before: Totals, after: Totals, seen: Seen) -> HistoryCheck {
    let history = Totals {
        reserved: after.reserved.saturating_sub(before.reserved),
        confirmed: after.confirmed.saturating_sub(before.confirmed),
        cancelled: after.cancelled.saturating_sub(before.cancelled),
        sold_out: after.sold_out.saturating_sub(before.sold_out),
    };
    let mut violations = Vec::new();
    let mut within = |what: &str, got: u64, saw: u64, unanswered: u64| {
        if got < saw || got > saw + unanswered {
            violations.push(format!(
                "the history counts {got} {what}, the buyers saw {saw} (and {unanswered} got no answer)"
            ));
        }
    };
    within(
        "holds granted",
        history.reserved,
        seen.reserved,
        seen.reserves_unanswered,
    );
    within(
        "holds paid",
        history.confirmed,
        seen.confirmed,
        seen.confirms_unanswered,
    );
    within(
        "holds cancelled",
        history.cancelled,
        seen.cancelled,
        seen.cancels_not_acknowledged,
    );
    if history.sold_out > seen.sold_out + seen.reserves_unanswered {
        violations.push(format!(
            "the history counts {} sold-out answers, the buyers saw {} (and {} reserves got no answer)",
            history.sold_out, seen.sold_out, seen.reserves_unanswered
        ));
    }
    HistoryCheck {
        history,
        seen,
        sold_out_unreported: seen.sold_out.saturating_sub(history.sold_out),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(reserved: u64, confirmed: u64, cancelled: u64, sold_out: u64) -> Totals {
        Totals {
            reserved,
            confirmed,
            cancelled,
            sold_out,
        }
    }

    #[test]
    fn state_counts_must_match_within_the_unanswered_and_sold_outs_may_lag() {
        let before = totals(10, 5, 1, 100);
        let seen = Seen {
            reserved: 50,
            confirmed: 20,
            cancelled: 7,
            sold_out: 900,
            reserves_unanswered: 2,
            confirms_unanswered: 1,
            cancels_not_acknowledged: 0,
        };
        let exact = check(before, totals(60, 25, 8, 1_000), seen);
        assert_eq!(exact.violations, Vec::<String>::new());
        assert_eq!(exact.sold_out_unreported, 0);
        // Unanswered requests may have taken effect.
        let more = check(before, totals(62, 26, 8, 980), seen);
        assert_eq!(more.violations, Vec::<String>::new());
        assert_eq!(more.sold_out_unreported, 20);
        // A lost hold, an invented payment, a lost cancel, invented sold-outs.
        for (after, what) in [
            (totals(59, 25, 8, 1_000), "holds granted"),
            (totals(60, 27, 8, 1_000), "holds paid"),
            (totals(60, 25, 7, 1_000), "holds cancelled"),
            (totals(60, 25, 8, 1_003), "sold-out answers"),
        ] {
            let c = check(before, after, seen);
            assert_eq!(c.violations.len(), 1, "{what}: {:?}", c.violations);
            assert!(c.violations[0].contains(what), "{:?}", c.violations);
        }
    }
}
