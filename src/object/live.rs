//! Live updates: what a product's object pushes to the pages watching it
//! over WebSocket, and when.
//!
//! Pure, so it is tested natively; `wasm/object/product.rs` only accepts the
//! sockets (hibernatable), sends the messages this module builds, and sets
//! the timer it asks for.
//!
//! - One broadcast carries one message, built once, to every socket.
//! - Pushes are coalesced: at most one per `PUSH_INTERVAL_MS` per product
//!   (10 per second). A change inside the interval arms one timer; when it
//!   fires, the push carries the state as it is then, so a burst of
//!   reservations costs the object one broadcast, not one per reservation.
//! - Versions only grow, across restarts too: a version is at least the
//!   time of its push, in epoch milliseconds, so a client can drop any
//!   message older than the one it has (a slow socket, a reconnect to an
//!   object that restarted).

use crate::limits::{
    FANOUT_SHARE_MAX_PERCENT, LIVE_SOCKETS_PER_CLIENT_MAX, PUSH_INTERVAL_MS, SEND_US_PER_SOCKET,
};
use serde::{Deserialize, Serialize};

/// The time between two pushes to `sockets` sockets: `PUSH_INTERVAL_MS`,
/// or longer when one broadcast would cost more than
/// `FANOUT_SHARE_MAX_PERCENT` of it (2,000 sockets: 480 ms).
pub fn push_interval_ms(sockets: usize) -> u64 {
    let broadcast_us = sockets as u64 * SEND_US_PER_SOCKET;
    PUSH_INTERVAL_MS.max(broadcast_us * 100 / FANOUT_SHARE_MAX_PERCENT / 1000)
}

/// What a viewer sees of a product, and what a push carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveState {
    pub state: &'static str,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// A push, as JSON on the socket.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub version: u64,
    pub product_id: &'a str,
    pub state: &'a str,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

impl LiveState {
    fn message(&self, product_id: &str, version: u64) -> String {
        let m = Message {
            kind: "state",
            version,
            product_id,
            state: self.state,
            stock_total: self.stock_total,
            available: self.available,
            held: self.held,
            sold: self.sold,
        };
        // Numbers and strings always serialize.
        serde_json::to_string(&m).unwrap_or_default()
    }
}

/// What a socket keeps across hibernation: who is watching (the buyer, when
/// the page had a session) and the version it was last sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buyer: Option<String>,
    pub version: u64,
}

/// What the shell does after the product may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing changed that a viewer sees, or a push is already scheduled.
    Nothing,
    /// Push now (`Pusher::push`).
    Now,
    /// Set a timer for this instant, then push (`Pusher::timer_fired`).
    At(u64),
}

/// The coalescing state of one product's pushes. It lives in the object's
/// memory: after an eviction the first change pushes at once, with a
/// version from the clock.
#[derive(Debug, Default)]
pub struct Pusher {
    sent: Option<LiveState>,
    version: u64,
    last_push_ms: Option<u64>,
    timer_at_ms: Option<u64>,
    /// The sockets the last broadcast reached, plus those accepted since.
    sockets: usize,
}

impl Pusher {
    /// After a batch or an alarm: whether the state viewers see changed,
    /// and if so when to push it.
    pub fn changed(&mut self, current: Option<LiveState>, now_ms: u64) -> Due {
        let Some(current) = current else {
            return Due::Nothing;
        };
        if self.sent == Some(current) || self.timer_at_ms.is_some() {
            return Due::Nothing;
        }
        match self.last_push_ms {
            Some(last) if now_ms < last + push_interval_ms(self.sockets) => {
                let at = last + push_interval_ms(self.sockets);
                self.timer_at_ms = Some(at);
                Due::At(at)
            }
            _ => Due::Now,
        }
    }

    /// A socket was accepted.
    pub fn joined(&mut self) {
        self.sockets += 1;
    }

    /// A broadcast reached `sockets` sockets.
    pub fn reached(&mut self, sockets: usize) {
        self.sockets = sockets;
    }

    /// The timer set for `Due::At` fired.
    pub fn timer_fired(&mut self) {
        self.timer_at_ms = None;
    }

    /// The push to broadcast now, if `current` differs from what was last
    /// sent: its version and its message.
    pub fn push(
        &mut self,
        current: Option<LiveState>,
        product_id: &str,
        now_ms: u64,
    ) -> Option<(u64, String)> {
        let current = current?;
        if self.sent == Some(current) {
            return None;
        }
        self.version = self.next_version(now_ms);
        self.sent = Some(current);
        self.last_push_ms = Some(now_ms);
        Some((self.version, current.message(product_id, self.version)))
    }

    /// The first message of a socket that just joined: the current state,
    /// at the version last pushed if that push carried it, else at a new
    /// version. Only this socket gets it, so a change not yet pushed to the
    /// others is still pushed to them (this socket then gets it again, at a
    /// newer version).
    pub fn greeting(&mut self, current: LiveState, product_id: &str, now_ms: u64) -> (u64, String) {
        if self.sent != Some(current) {
            self.version = self.next_version(now_ms);
        }
        (self.version, current.message(product_id, self.version))
    }

    fn next_version(&self, now_ms: u64) -> u64 {
        (self.version + 1).max(now_ms)
    }
}

/// Whether a new socket may join a product that has `open` sockets.
pub fn admits(open: usize, sockets_max: u32) -> bool {
    open < sockets_max as usize
}

/// Whether a client with `open` sockets on the product may open another.
pub fn admits_client(open: usize) -> bool {
    open < LIVE_SOCKETS_PER_CLIENT_MAX
}

/// The text a client may send, answered by the runtime without waking the
/// object (`setWebSocketAutoResponse`). Any other message closes the
/// socket: viewers only listen.
pub const PING: &str = "ping";
pub const PONG: &str = "pong";
/// The close code for a socket that sent something other than a ping.
pub const CLOSE_POLICY: u16 = 1008;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::LIVE_SOCKETS_MAX_DEFAULT;

    fn state(available: u64) -> Option<LiveState> {
        Some(LiveState {
            state: "open",
            stock_total: 10,
            available,
            held: 10 - available,
            sold: 0,
        })
    }

    #[test]
    fn a_change_pushes_at_once_then_coalesces_within_the_interval() {
        let mut p = Pusher::default();
        assert_eq!(p.changed(state(9), 1_000), Due::Now);
        let (v1, m) = p.push(state(9), "demo", 1_000).unwrap();
        assert_eq!(v1, 1_000);
        let m: Message = serde_json::from_str(&m).unwrap();
        assert_eq!((m.kind, m.available, m.held), ("state", 9, 1));
        // Inside the interval: one timer, then nothing more however many
        // changes follow.
        assert_eq!(p.changed(state(8), 1_010), Due::At(1_100));
        assert_eq!(p.changed(state(7), 1_020), Due::Nothing);
        p.timer_fired();
        let (v2, m) = p.push(state(7), "demo", 1_100).unwrap();
        assert!(v2 > v1);
        assert!(m.contains("\"available\":7"));
        // No change: nothing.
        assert_eq!(p.changed(state(7), 2_000), Due::Nothing);
        assert_eq!(p.push(state(7), "demo", 2_000), None);
    }

    #[test]
    fn versions_grow_within_a_millisecond_and_across_a_restart() {
        let mut p = Pusher::default();
        let (a, _) = p.push(state(9), "demo", 5_000).unwrap();
        let (b, _) = p.push(state(8), "demo", 5_000).unwrap();
        assert!(b > a);
        // A restarted object starts from the clock, past every version it
        // sent before (at most one per interval, so they stay near it).
        let mut fresh = Pusher::default();
        let (c, _) = fresh.push(state(7), "demo", 5_100).unwrap();
        assert!(c > b);
    }

    #[test]
    fn a_greeting_repeats_the_current_version_or_makes_one() {
        let mut p = Pusher::default();
        let (v, _) = p.push(state(9), "demo", 1_000).unwrap();
        assert_eq!(p.greeting(state(9).unwrap(), "demo", 1_050).0, v);
        let (g, _) = p.greeting(state(8).unwrap(), "demo", 1_060);
        assert!(g > v);
        // The others have not seen it: the next push carries it, newer
        // than the greeting.
        let (b, m) = p.push(state(8), "demo", 1_060).unwrap();
        assert!(b > g);
        assert!(m.contains("\"available\":8"));
    }

    #[test]
    fn many_sockets_stretch_the_interval_to_bound_the_fanout() {
        assert_eq!(push_interval_ms(0), PUSH_INTERVAL_MS);
        assert_eq!(push_interval_ms(100), PUSH_INTERVAL_MS);
        assert_eq!(push_interval_ms(2_000), 480);
        for n in [0, 1, 10, 500, 2_000, 32_000] {
            let spent = n as u64 * SEND_US_PER_SOCKET;
            assert!(
                spent * 100 <= push_interval_ms(n) * 1000 * FANOUT_SHARE_MAX_PERCENT,
                "{n}"
            );
        }
        let mut p = Pusher::default();
        p.push(state(9), "demo", 1_000).unwrap();
        p.reached(2_000);
        assert_eq!(p.changed(state(8), 1_200), Due::At(1_480));
    }

    #[test]
    fn the_socket_cap_admits_below_it_only() {
        assert!(admits(0, 1));
        assert!(!admits(1, 1));
        assert!(admits_client(LIVE_SOCKETS_PER_CLIENT_MAX - 1));
        assert!(!admits_client(LIVE_SOCKETS_PER_CLIENT_MAX));
        assert!(admits(1_999, LIVE_SOCKETS_MAX_DEFAULT));
        assert!(!admits(2_000, LIVE_SOCKETS_MAX_DEFAULT));
    }
}
