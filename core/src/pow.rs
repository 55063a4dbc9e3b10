//! The proof of work a waiting room asks at the join: the product's
//! setting, and the level it asks at an instant.
//!
//! The edge issues and checks the challenges (`flashgate_wire::altcha`);
//! the object decides the level, from the setting and the rate of tickets
//! every edge reports (`JoinRate`), and publishes it with its snapshot.
//! A level is the number of hex zeros a derived key must start with: each
//! multiplies a solver's expected work by 16.

use serde::{Deserialize, Serialize};

use crate::config::limits;

/// Whether the room asks a proof of work, and how hard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowMode {
    /// No proof of work: a join is free (the default).
    #[default]
    Off,
    /// Always `level`.
    Fixed,
    /// `level` while joins come no faster than the room admits, one level
    /// more for each fourfold of that rate (`POW_ADAPTIVE_STEP`), up to
    /// `POW_LEVEL_MAX`.
    Adaptive,
}

impl PowMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PowMode::Off => "off",
            PowMode::Fixed => "fixed",
            PowMode::Adaptive => "adaptive",
        }
    }
}

/// The product's proof-of-work setting (the `pow` member of its rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pow {
    #[serde(default)]
    pub mode: PowMode,
    /// Fixed: the level; adaptive: the lowest. 1 to `POW_LEVEL_MAX`.
    #[serde(default = "level_default")]
    pub level: u8,
    /// A join without a valid solution gets a ticket that is never
    /// admitted and looks like any other (the edge's infinite queue),
    /// instead of a fresh challenge, so that a script cannot tell it
    /// failed.
    #[serde(default)]
    pub infinite_queue: bool,
}

fn level_default() -> u8 {
    limits::POW_LEVEL_DEFAULT
}

impl Default for Pow {
    fn default() -> Self {
        Pow {
            mode: PowMode::Off,
            level: level_default(),
            infinite_queue: false,
        }
    }
}

impl Pow {
    pub fn is_on(&self) -> bool {
        self.mode != PowMode::Off
    }

    /// Whether the setting is one the gate can run.
    pub fn valid(&self) -> bool {
        (1..=limits::POW_LEVEL_MAX).contains(&self.level)
    }

    /// The level asked at `joins_per_s`, for a room admitting
    /// `admit_per_s`; `None` when off.
    pub fn level_at(&self, joins_per_s: u64, admit_per_s: u32) -> Option<u8> {
        match self.mode {
            PowMode::Off => None,
            PowMode::Fixed => Some(self.level),
            PowMode::Adaptive => {
                let mut threshold = u64::from(admit_per_s.max(1));
                let mut level = self.level;
                while joins_per_s > threshold && level < limits::POW_LEVEL_MAX {
                    level += 1;
                    threshold = threshold.saturating_mul(limits::POW_ADAPTIVE_STEP);
                }
                Some(level)
            }
        }
    }
}

/// The joins the room counted over the last `POW_RATE_WINDOW_S` seconds of
/// the object's clock: the tickets the edges reported, each buyer once
/// (`Arrivals::forget_rejoins`). Joins refused or sent to the infinite
/// queue, rejoins and challenge fetches cost their senders nothing, so
/// they do not count: nobody raises the price for everyone for free. Kept
/// in memory only: after a restart the rate starts from nothing, and the
/// level from the setting's lowest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JoinRate {
    /// `(second, joins)`, one slot per second of the window.
    slots: [(u64, u64); limits::POW_RATE_WINDOW_S as usize],
}

impl JoinRate {
    pub fn note(&mut self, now_ms: u64, joins: u64) {
        let second = now_ms / 1000;
        let slot = &mut self.slots[(second % limits::POW_RATE_WINDOW_S) as usize];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 = slot.1.saturating_add(joins);
    }

    /// Joins per second over the window that ends now.
    pub fn per_s(&self, now_ms: u64) -> u64 {
        let second = now_ms / 1000;
        let total: u64 = self
            .slots
            .iter()
            .filter(|(s, _)| second.saturating_sub(*s) < limits::POW_RATE_WINDOW_S && *s <= second)
            .map(|(_, n)| *n)
            .sum();
        total / limits::POW_RATE_WINDOW_S
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_rises_a_level_per_fourfold_of_the_admission_rate() {
        let p = Pow {
            mode: PowMode::Adaptive,
            level: 2,
            infinite_queue: false,
        };
        assert_eq!(p.level_at(0, 100), Some(2));
        assert_eq!(p.level_at(100, 100), Some(2));
        assert_eq!(p.level_at(101, 100), Some(3));
        assert_eq!(p.level_at(400, 100), Some(3));
        assert_eq!(p.level_at(401, 100), Some(4));
        assert_eq!(p.level_at(u64::MAX, 100), Some(limits::POW_LEVEL_MAX));
        let fixed = Pow {
            mode: PowMode::Fixed,
            ..p
        };
        assert_eq!(fixed.level_at(u64::MAX, 100), Some(2));
        assert_eq!(Pow::default().level_at(u64::MAX, 1), None);
    }

    #[test]
    fn the_rate_counts_the_window_only() {
        let mut r = JoinRate::default();
        for s in 0..limits::POW_RATE_WINDOW_S {
            r.note(s * 1000 + 500, 100);
        }
        let end = limits::POW_RATE_WINDOW_S * 1000 - 1;
        assert_eq!(r.per_s(end), 100);
        // Ten seconds later none of it counts; a slot is reused.
        assert_eq!(r.per_s(end + limits::POW_RATE_WINDOW_S * 1000), 0);
        r.note(end + 1, 50);
        assert_eq!(
            r.per_s(end + 1),
            (100 * (limits::POW_RATE_WINDOW_S - 1) + 50) / 10
        );
    }

    #[test]
    fn a_setting_parses_with_defaults_and_refuses_unknown_members() {
        let p: Pow = serde_json::from_str(r#"{"mode":"fixed"}"#).unwrap();
        assert_eq!(p.level, limits::POW_LEVEL_DEFAULT);
        assert!(p.is_on() && p.valid());
        assert!(serde_json::from_str::<Pow>(r#"{"mode":"hard"}"#).is_err());
        assert!(serde_json::from_str::<Pow>(r#"{"level":2,"cost":1}"#).is_err());
        let zero: Pow = serde_json::from_str(r#"{"mode":"fixed","level":0}"#).unwrap();
        assert!(!zero.valid());
    }
}
