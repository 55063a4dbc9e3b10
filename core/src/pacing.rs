//! Per-buyer pacing inside the object: at most `attempts_per_window_max`
//! reserve attempts per buyer per window of `attempt_window_ms` reach a
//! decision. Replays are not attempts: a retry of a reserve that succeeded
//! always gets its answer.
//!
//! Windows are aligned to multiples of the window length, and the counts
//! are dropped when a window ends, so memory is bounded by the buyers seen
//! in one window, and further by `PACED_BUYERS_MAX`: past it, a buyer not
//! yet counted in this window is let through uncounted (the edge's rate
//! limit per buyer still holds it). Counts live in memory only; a reload
//! starts a fresh window, which can only let a buyer through early.

use std::collections::HashMap;

use crate::config::limits;

#[derive(Clone, Debug, Default)]
pub struct Pacing {
    /// The window the counts belong to: `now_ms / attempt_window_ms`.
    window: u64,
    counts: HashMap<Box<str>, u32>,
}

/// A rate-limited attempt: when the buyer may try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    pub retry_after_ms: u64,
}

impl Pacing {
    /// Counts an attempt of `buyer` at `now_ms`, or refuses it.
    pub fn attempt(
        &mut self,
        buyer: &str,
        now_ms: u64,
        window_ms: u64,
        max: u32,
    ) -> Result<(), RateLimited> {
        let window_ms = window_ms.max(1);
        let window = now_ms / window_ms;
        if window != self.window {
            self.window = window;
            self.counts.clear();
        }
        match self.counts.get_mut(buyer) {
            Some(n) if *n >= max => Err(RateLimited {
                retry_after_ms: ((window + 1) * window_ms).saturating_sub(now_ms).max(1),
            }),
            Some(n) => {
                *n += 1;
                Ok(())
            }
            None => {
                if self.counts.len() < limits::PACED_BUYERS_MAX {
                    self.counts.insert(buyer.into(), 1);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyer_gets_max_attempts_per_window() {
        let mut p = Pacing::default();
        for _ in 0..3 {
            assert_eq!(p.attempt("a", 10_500, 1_000, 3), Ok(()));
        }
        assert_eq!(
            p.attempt("a", 10_700, 1_000, 3),
            Err(RateLimited {
                retry_after_ms: 300
            })
        );
        assert_eq!(p.attempt("b", 10_700, 1_000, 3), Ok(()));
        // The next window starts afresh.
        assert_eq!(p.attempt("a", 11_000, 1_000, 3), Ok(()));
        assert_eq!(p.counts.len(), 1);
    }
}
