//! What the object publishes to the edge: its product view, its stock
//! level and state, its waiting room, and the buyers whose reserves must
//! still reach it. The edge's answers from a snapshot are in
//! `crate::edge::cache`.

use flashgate_core::{Admission, Odds, Rules, Uptake};
use flashgate_wire::SaleState;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::buyer_filter::BuyerFilter;

/// The waiting room as the edge needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomSnapshot {
    pub admit_per_s: u32,
    pub opens_at_ms: Option<u64>,
    pub prequeue_ms: u64,
    pub ticket_ttl_ms: u64,
    pub admission: Admission,
    /// What admitted tickets took, for the odds a poll tells.
    #[serde(default)]
    pub uptake: Uptake,
    /// The proof of work a join needs now; `None`: none.
    #[serde(default)]
    pub pow: Option<PowNow>,
}

/// The proof of work a waiting room asks at the snapshot's instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowNow {
    pub level: u8,
    /// A join without a valid solution gets a ticket never admitted, not a
    /// challenge.
    pub infinite_queue: bool,
}

impl RoomSnapshot {
    pub fn rules(&self) -> Rules {
        Rules {
            admit_per_s: self.admit_per_s,
            opens_at_ms: self.opens_at_ms,
        }
    }
}

/// What the object publishes to the edge.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    /// The object's clock when it answered.
    pub at_ms: u64,
    /// The product as `GET /api/products/{id}` answers it.
    pub product: Value,
    pub available: u64,
    /// Units held, not yet paid: they may come back.
    #[serde(default)]
    pub held: u64,
    pub state: SaleState,
    /// Present when the product has a waiting room.
    #[serde(alias = "queue")]
    pub room: Option<RoomSnapshot>,
    /// Present when the object knows that no unit was available anywhere
    /// a moment ago: what lets the edge answer `sold_out`.
    pub sold_out: Option<SoldOut>,
    /// The product's stock shards, which the edge routes by
    /// (`crate::edge::shards`).
    #[serde(default = "one")]
    pub shards: u16,
    /// The stock shards that exist, a bit each (bit 0, home, always): an
    /// id naming another is answered `unknown_reservation` at the edge,
    /// and no object is made for it.
    #[serde(default = "home_only")]
    pub existing: u64,
    /// When the edge asked for it (the edge's clock; not sent): the
    /// snapshot says what was true no later than this.
    #[serde(skip)]
    pub fetched_at_ms: u64,
}

fn one() -> u16 {
    1
}

fn home_only() -> u64 {
    1
}

/// No unit was available anywhere `age_ms` before the snapshot was taken
/// (0 for a product of one shard, whose object knows it at once; over K
/// shards, the age of the oldest drain that proved a shard empty). The
/// edge answers `sold_out` while `age_ms` plus the snapshot's own age is
/// under `SOLD_OUT_LAG_MS`, to every buyer not in its shard's filter.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoldOut {
    pub age_ms: u64,
    /// Per shard, in shard order: the buyers who hold or bought units
    /// there, whose retries may be replays and must reach the shard.
    pub buyers: Vec<BuyerFilter>,
}

/// A ticket's standing in the waiting room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Standing {
    pub admitted: bool,
    /// About how many buyers are ahead.
    pub position: u64,
    /// About how long until admission, in seconds; `None` while the room
    /// does not advance (nothing to sell, or paused).
    pub eta_s: Option<u64>,
    /// The units left, the buyers ahead, and the verdict.
    pub odds: Odds,
}
