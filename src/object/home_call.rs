//! How long a stock shard's batch waits for home, and how often it asks:
//! the call-home policy, pure, beside the object it serves. The shell
//! (`crate::wasm::object::product`) only performs the calls this decides.
//!
//! A batch of reserves a shard cannot decide on what it has calls home, and
//! is decided in a turn of its own after the reply, never across the
//! await. One call nearly always settles it. A second one is needed when a
//! drain took the units the reply granted while it was on its way (the
//! shard then has too few again, and home has them back); a third covers a
//! failed call. Past `CALL_ROUNDS_MAX` the batch is decided on what the
//! shard has, and a buyer it cannot serve hears `unavailable`, never a
//! guessed `sold_out`.

use crate::limits::CALL_ROUNDS_MAX;

/// One batch's calls home, counted as they go: its rounds, and the time
/// and round trips its buyers waited (for the `server-timing` they see).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchCalls {
    rounds: u32,
    started_at_ms: Option<u64>,
    /// Calls, and the drain rounds home ran for them.
    trips: u32,
}

impl BatchCalls {
    /// Whether the batch calls home now: it needs a call
    /// (`ProductObject::home_call_needed`) and has rounds left.
    pub fn next(&mut self, needs_call: Option<u64>, now_ms: u64) -> Option<u64> {
        let need = needs_call?;
        if self.rounds >= CALL_ROUNDS_MAX {
            return None;
        }
        self.rounds += 1;
        self.started_at_ms.get_or_insert(now_ms);
        Some(need)
    }

    /// A call came back, after home ran `drains` rounds of drains for it.
    pub fn answered(&mut self, drains: u32) {
        self.trips += 1 + drains;
    }

    /// What the batch's buyers waited, if they did: the `server-timing`
    /// value `escrow;dur=<ms>;desc="trips=<n>"`.
    pub fn server_timing(&self, now_ms: u64) -> Option<String> {
        let started = self.started_at_ms?;
        Some(format!(
            "escrow;dur={};desc=\"trips={}\"",
            now_ms.saturating_sub(started),
            self.trips.max(1)
        ))
    }
}

/// Home's hold on one ask (or on its own reserves) while it drains other
/// shards: it answers with what it knows once `ASK_WAIT_MAX_MS` passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AskHold {
    deadline_ms: u64,
    /// Rounds of drains sent for it.
    pub drains: u32,
}

impl AskHold {
    pub fn new(now_ms: u64) -> AskHold {
        AskHold {
            deadline_ms: now_ms + crate::limits::ASK_WAIT_MAX_MS,
            drains: 0,
        }
    }

    /// Whether home must answer now with what it knows.
    pub fn give_up(&self, now_ms: u64) -> bool {
        now_ms >= self.deadline_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_calls_at_most_its_rounds_and_says_what_it_waited() {
        let mut calls = BatchCalls::default();
        assert_eq!(calls.next(None, 0), None);
        assert_eq!(calls.server_timing(5), None, "it did not wait");
        for round in 0..CALL_ROUNDS_MAX {
            assert_eq!(calls.next(Some(3), 10 + u64::from(round)), Some(3));
            calls.answered(u32::from(round == 0));
        }
        assert_eq!(calls.next(Some(3), 20), None, "out of rounds");
        assert_eq!(
            calls.server_timing(25).as_deref(),
            Some("escrow;dur=15;desc=\"trips=4\"")
        );
    }

    #[test]
    fn home_holds_an_ask_until_its_deadline() {
        let hold = AskHold::new(100);
        assert!(!hold.give_up(100 + crate::limits::ASK_WAIT_MAX_MS - 1));
        assert!(hold.give_up(100 + crate::limits::ASK_WAIT_MAX_MS));
    }
}
