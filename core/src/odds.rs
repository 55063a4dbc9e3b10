//! Honest odds: what a buyer in the waiting room is told about their
//! chance, beside their position and ETA.
//!
//! The gate knows its stock, so a buyer need not wait half an hour for
//! units that sold out long ago. The verdict compares the units the buyers
//! ahead are expected to take with the units left: the buyers ahead, times
//! the units an admitted ticket has taken so far, as the object observes it
//! ([`Uptake`]). Until few tickets have been admitted, a prior of one unit
//! per ticket stands in (`limits::UPTAKE_PRIOR_TICKETS`), so that the first
//! answers err towards `unlikely` rather than raise false hopes.

use serde::{Deserialize, Serialize};

use crate::config::limits;

/// The plain answer to "will I get one?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The buyers ahead are expected to leave a unit.
    Likely,
    /// They are expected to take every unit left; only returns (holds that
    /// expire or are cancelled) could still reach this buyer.
    Unlikely,
    /// Nothing is available and nothing is held: nothing can come back.
    SoldOut,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Likely => "likely",
            Verdict::Unlikely => "unlikely",
            Verdict::SoldOut => "sold_out",
        }
    }
}

/// What the object has seen admitted tickets take (`Gate::uptake`): the
/// tickets admitted so far, and the product's units held or sold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uptake {
    pub admitted: u64,
    /// Units held or sold. Units a buyer gave back (a hold that expired or
    /// was cancelled) are on sale again, so they are not counted.
    pub units: u64,
}

impl Uptake {
    /// Units an admitted ticket takes, in thousandths: the observation,
    /// blended with a prior of one unit per ticket.
    pub fn units_per_ticket_milli(&self) -> u64 {
        let prior = limits::UPTAKE_PRIOR_TICKETS;
        let units = self.units.saturating_add(prior).saturating_mul(1000);
        units / self.admitted.saturating_add(prior)
    }
}

/// A ticket's odds at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Odds {
    /// Units on sale now.
    pub available: u64,
    /// Units held by buyers who have not paid: they return if the hold
    /// expires or is cancelled.
    pub held: u64,
    /// Buyers ahead of this ticket and not yet admitted.
    pub ahead: u64,
    pub verdict: Verdict,
    /// Nothing is available but some units are held: the buyer waits for
    /// returns, of which there are at most `held`.
    pub waiting_for_returns: bool,
}

/// The odds of a ticket with `ahead` buyers before it.
pub fn odds(available: u64, held: u64, ahead: u64, uptake: Uptake) -> Odds {
    let verdict = if available == 0 && held == 0 {
        Verdict::SoldOut
    } else {
        // Units the buyers ahead are expected to take; this buyer needs one
        // more to be left.
        let wanted_milli = u128::from(ahead) * u128::from(uptake.units_per_ticket_milli());
        if wanted_milli < u128::from(available) * 1000 {
            Verdict::Likely
        } else {
            Verdict::Unlikely
        }
    };
    Odds {
        available,
        held,
        ahead,
        verdict,
        waiting_for_returns: available == 0 && held > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(admitted: u64, units: u64) -> Uptake {
        Uptake { admitted, units }
    }

    /// `(available, held, ahead, uptake, verdict, waiting for returns)`.
    #[test]
    fn verdicts() {
        let none = Uptake::default();
        let half = seen(1_000, 500);
        let table = [
            (0, 0, 0, none, Verdict::SoldOut, false),
            (0, 0, 5_000, half, Verdict::SoldOut, false),
            (0, 3, 0, none, Verdict::Unlikely, true),
            (0, 3, 10, half, Verdict::Unlikely, true),
            // Nobody ahead and a unit left.
            (1, 0, 0, none, Verdict::Likely, false),
            // The prior: one unit per ticket.
            (10, 0, 9, none, Verdict::Likely, false),
            (10, 0, 10, none, Verdict::Unlikely, false),
            // Half of the admitted reserve: 19 ahead take about 10.
            (10, 0, 19, half, Verdict::Likely, false),
            (10, 0, 21, half, Verdict::Unlikely, false),
            // Held units do not count as left.
            (1, 50, 1, none, Verdict::Unlikely, false),
        ];
        for (available, held, ahead, uptake, verdict, returns) in table {
            let o = odds(available, held, ahead, uptake);
            let case = format!("available {available} held {held} ahead {ahead} {uptake:?}");
            assert_eq!(o.verdict, verdict, "{case}");
            assert_eq!(o.waiting_for_returns, returns, "{case}");
            assert_eq!((o.available, o.held, o.ahead), (available, held, ahead));
        }
    }

    #[test]
    fn the_prior_fades_as_tickets_are_admitted() {
        assert_eq!(Uptake::default().units_per_ticket_milli(), 1000);
        let p = limits::UPTAKE_PRIOR_TICKETS;
        assert_eq!(seen(p, 0).units_per_ticket_milli(), 500);
        assert_eq!(seen(1_000_000, 2_000_000).units_per_ticket_milli(), 1999);
        // No overflow at the extremes.
        let o = odds(u64::MAX, 0, u64::MAX, seen(u64::MAX, u64::MAX));
        assert_eq!(o.verdict, Verdict::Likely);
        let o = odds(1, 0, u64::MAX, seen(0, u64::MAX));
        assert_eq!(o.verdict, Verdict::Unlikely);
    }
}
