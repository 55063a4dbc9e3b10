//! The sale a run simulates, decided before the first request: the system
//! it runs against, when each buyer arrives and what each does with a unit
//! it gets. Pure and seeded, so
//! `--seed` replays the same crowd.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What the run talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    /// The flashgate gate: sessions, waiting room, holds, signed confirmations.
    Flashgate,
    /// A peer of `bench/peers`: the order is made at the reserve.
    Peer,
    /// The runtime ceiling (`bench/baseline/ceiling.js`): each buyer sends
    /// one POST to the URL as given. It keeps no stock, so there is no
    /// verdict; only throughput and latency.
    Ceiling,
}

impl System {
    /// Its name in the report, as `--system` spells it.
    pub fn name(self) -> &'static str {
        match self {
            System::Flashgate => "flashgate",
            System::Peer => "peer",
            System::Ceiling => "ceiling",
        }
    }
}

/// How the buyers arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Everyone at the opening.
    Burst,
    /// Spread evenly over this many milliseconds.
    Ramp { over_ms: u64 },
    /// This many buyers a second, for as long as it takes.
    Steady { per_s: u64 },
}

impl Arrival {
    /// `burst`, `ramp:MS` or `steady:PER_S`.
    pub fn parse(text: &str) -> Result<Arrival, String> {
        let (kind, arg) = text.split_once(':').unwrap_or((text, ""));
        let number = || {
            arg.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{text}`: `{kind}` needs a positive number after `:`"))
        };
        match kind {
            "burst" if arg.is_empty() => Ok(Arrival::Burst),
            "ramp" => Ok(Arrival::Ramp { over_ms: number()? }),
            "steady" => Ok(Arrival::Steady { per_s: number()? }),
            _ => Err(format!("`{text}`: expected burst, ramp:MS or steady:PER_S")),
        }
    }

    /// When buyer `i` of `n` arrives, in ms after the start.
    pub fn offset_ms(self, i: u64, n: u64) -> u64 {
        match self {
            Arrival::Burst => 0,
            Arrival::Ramp { over_ms } => over_ms * i / n.max(1),
            Arrival::Steady { per_s } => i * 1000 / per_s,
        }
    }
}

/// What a buyer does with the hold it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fate {
    Pay,
    Cancel,
    /// Walks away; the hold expires.
    Abandon,
}

impl Fate {
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Pay => "pay",
            Fate::Cancel => "cancel",
            Fate::Abandon => "abandon",
        }
    }
}

/// The shares of pay, cancel and abandon, in percent; they sum to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shares {
    pub pay: u8,
    pub cancel: u8,
}

impl Shares {
    /// `PAY,CANCEL,ABANDON` in percent, summing to 100.
    pub fn parse(text: &str) -> Result<Shares, String> {
        let parts: Vec<u8> = text
            .split(',')
            .map(|p| p.trim().parse::<u8>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("`{text}`: expected three percentages, PAY,CANCEL,ABANDON"))?;
        match parts[..] {
            [pay, cancel, abandon]
                if u16::from(pay) + u16::from(cancel) + u16::from(abandon) == 100 =>
            {
                Ok(Shares { pay, cancel })
            }
            _ => Err(format!(
                "`{text}`: expected three percentages summing to 100"
            )),
        }
    }

    pub fn abandon(self) -> u8 {
        100 - self.pay - self.cancel
    }

    /// The shares as buyers can follow them: without payment keys nobody
    /// can pay, so those who would pay walk away instead.
    pub fn followed(self, can_pay: bool) -> Shares {
        if can_pay {
            self
        } else {
            Shares { pay: 0, ..self }
        }
    }

    fn pick(self, roll: u8) -> Fate {
        if roll < self.pay {
            Fate::Pay
        } else if roll < self.pay + self.cancel {
            Fate::Cancel
        } else {
            Fate::Abandon
        }
    }
}

/// One simulated buyer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buyer {
    /// Arrival order as planned (0 first).
    pub index: u64,
    pub id: String,
    pub arrive_ms: u64,
    pub fate: Fate,
    /// The reserve's Idempotency-Key, the same on every retry.
    pub key: String,
}

/// The whole crowd, in arrival order.
pub fn crowd(
    seed: u64,
    buyers: u64,
    arrival: Arrival,
    shares: Shares,
    run_tag: &str,
) -> Vec<Buyer> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..buyers)
        .map(|index| Buyer {
            index,
            id: format!("{run_tag}-b{index}"),
            arrive_ms: arrival.offset_ms(index, buyers),
            fate: shares.pick(rng.gen_range(0..100)),
            key: format!("{run_tag}-{index}-{:016x}", rng.gen::<u64>()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_parse_and_spread() {
        assert_eq!(Arrival::parse("burst"), Ok(Arrival::Burst));
        assert_eq!(
            Arrival::parse("ramp:2000"),
            Ok(Arrival::Ramp { over_ms: 2000 })
        );
        assert_eq!(
            Arrival::parse("steady:500"),
            Ok(Arrival::Steady { per_s: 500 })
        );
        for bad in ["", "ramp", "ramp:0", "steady:x", "burst:3", "wave:1"] {
            assert!(Arrival::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Arrival::Ramp { over_ms: 1000 }.offset_ms(5, 10), 500);
        assert_eq!(Arrival::Steady { per_s: 100 }.offset_ms(250, 1000), 2500);
        assert_eq!(Arrival::Burst.offset_ms(9, 10), 0);
    }

    #[test]
    fn shares_must_sum_to_100() {
        assert_eq!(
            Shares::parse("70,20,10"),
            Ok(Shares {
                pay: 70,
                cancel: 20
            })
        );
        for bad in ["70,20", "70,20,20", "a,b,c", "100,0,0,0", "200,0,0"] {
            assert!(Shares::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn without_payment_keys_the_payers_walk_away() {
        let s = Shares::parse("80,10,10").unwrap();
        assert_eq!(s.followed(true), s);
        let f = s.followed(false);
        assert_eq!((f.pay, f.cancel, f.abandon()), (0, 10, 90));
    }

    #[test]
    fn a_seed_replays_the_same_crowd_and_the_shares_hold() {
        let shares = Shares {
            pay: 60,
            cancel: 30,
        };
        let a = crowd(7, 10_000, Arrival::Burst, shares, "t");
        assert_eq!(a, crowd(7, 10_000, Arrival::Burst, shares, "t"));
        assert_ne!(a, crowd(8, 10_000, Arrival::Burst, shares, "t"));
        let pay = a.iter().filter(|b| b.fate == Fate::Pay).count();
        let cancel = a.iter().filter(|b| b.fate == Fate::Cancel).count();
        // Within 2 points of the share for 10,000 draws (seed 7).
        assert!((5_800..=6_200).contains(&pay), "pay {pay}");
        assert!((2_800..=3_200).contains(&cancel), "cancel {cancel}");
        let keys: std::collections::HashSet<_> = a.iter().map(|b| &b.key).collect();
        assert_eq!(keys.len(), a.len(), "every buyer has its own key");
    }
}
