//! The typed view of one product's gate stats: what
//! `GET /admin/products/{id}/stats` answers. The gate builds it from its
//! core's stats and its shell's delivery state; `reconcile` reads it. One
//! type for both, so neither reads the other's JSON by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a buyer sees of a sale at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleState {
    Scheduled,
    Open,
    Paused,
    Closed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateStats {
    pub product_id: String,
    pub state: SaleState,
    pub stock_total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub live_holds: u32,
    /// Cancelled or expired reservations kept for idempotent replay.
    pub tombstones: u32,
    /// Buyers who hold or bought at least one unit.
    pub buyers: u64,
    pub outbox: OutboxStats,
    /// When the gate next has work (its alarm), in epoch milliseconds.
    pub next_deadline_ms: Option<u64>,
    /// The waiting room. Reads `queue` too, the name older gates wrote.
    #[serde(alias = "queue")]
    pub room: RoomStats,
    /// Snapshots the object gave the edge since it loaded: each one a trip
    /// that answered many requests at the edge.
    pub snapshots: u64,
    /// The object's own work since it loaded.
    pub work: WorkStats,
    pub counters: CounterStats,
    /// For a product of several stock shards: its escrow, as home last
    /// heard from each shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escrow: Option<EscrowStats>,
}

/// The escrow of a product of several stock shards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscrowStats {
    pub shards: u16,
    /// Units granted to no shard.
    pub unallocated: u64,
    /// The shards' reports to home, and those a buyer waited for.
    pub reports: u64,
    pub waits: u64,
    /// Each shard's escrowed units and levels; shard 0 is home.
    pub per_shard: Vec<ShardStats>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStats {
    pub escrowed: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

impl GateStats {
    /// Units the gate sold that the origin neither counts nor has on its
    /// way in the outbox: `sold - origin_sold - backlog_units`. 0 when the
    /// two agree; reconcile and the admin console both judge by it.
    pub fn drift_units(&self, origin_sold: i64) -> i64 {
        self.sold as i64 - origin_sold - self.outbox.backlog_units
    }
}

/// The part of the origin's `GET /v1/products/{id}` that drift is judged
/// by. The origin's product has more members; they are ignored here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginTotals {
    pub stock_total: i64,
    /// Units of accepted orders that are not voided.
    pub sold: i64,
}

/// How the object spent its events since it loaded: batches of commands
/// (group commit), alarms, and the largest settling one event did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkStats {
    /// Batches of commands, each one transaction.
    pub batches: u64,
    /// Commands in those batches.
    pub commands: u64,
    /// The most commands one batch held.
    pub batch_commands_max: u64,
    /// Alarm events handled.
    pub alarms: u64,
    /// The most expiries and purges one event did (at most the per-event
    /// limit).
    pub settled_per_event_max: u64,
    /// Rows read at the last load from storage.
    pub rows_loaded: u64,
    /// The isolate's WebAssembly memory, in bytes: it only grows, so it is
    /// the peak of every object in the isolate (0 outside wasm).
    pub wasm_memory_bytes: u64,
    /// What the platform bills, counted for every object of the isolate.
    #[serde(default)]
    pub isolate: IsolateWork,
}

/// The billed work of every Durable Object in one isolate since it
/// started: the units Durable Objects are priced in. On bare workerd every
/// object of the Worker shares one isolate, so these are all of a
/// product's shards; on the platform, an object's own isolate's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolateWork {
    /// Requests and alarms the objects handled (WebSocket messages
    /// included), each a billed request.
    pub events: u64,
    /// SQLite rows read and written, as the runtime's cursors count them:
    /// the figures the platform bills.
    pub rows_read: u64,
    pub rows_written: u64,
}

/// The waiting room, if the product has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomStats {
    /// 0: no waiting room.
    pub admit_per_s: u32,
    /// Tickets the edges reported issuing.
    pub reported: u64,
    pub admitted: u64,
    /// Reported and not yet admitted.
    pub waiting: u64,
    /// Whether admission moves (stock to sell, sale active).
    pub advancing: bool,
    /// Tickets of buyers who had joined before, reported by the edges and
    /// not counted again, since the object loaded.
    pub rejoins_uncounted: u64,
    /// The proof of work at the join: `off`, `fixed` or `adaptive`, the
    /// level asked now, whether a failed join goes to the infinite queue,
    /// the join rate an adaptive level follows, and the joins refused for
    /// want of a valid solution and sent to the infinite queue since the
    /// object loaded.
    #[serde(default)]
    pub pow_mode: String,
    #[serde(default)]
    pub pow_level: Option<u8>,
    #[serde(default)]
    pub pow_infinite_queue: bool,
    #[serde(default)]
    pub joins_per_s: u64,
    /// Joins answered `pow_required` (`pow_refused` before the name was
    /// the answer's own).
    #[serde(default, alias = "pow_refused")]
    pub pow_required: u64,
    /// Joins sent to the infinite queue (`pow_shadowed` before the name
    /// was one).
    #[serde(default, alias = "pow_shadowed")]
    pub pow_infinite_queued: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxStats {
    /// Events (orders, voids, stock totals) not yet applied at the origin.
    pub backlog: u64,
    /// Their net units: ordered minus voided, not yet counted at the origin.
    pub backlog_units: i64,
    pub acked_seq: u64,
    /// Failed deliveries since the last success.
    pub attempts: u32,
    pub retry_at_ms: u64,
    /// Why the last delivery failed, since the object loaded.
    pub last_error: Option<String>,
    pub last_success_ms: Option<u64>,
    /// Events the origin refused (`rejected_oversell` or `refused`), since
    /// the object loaded. Any is a bug signal.
    pub refused: u64,
}

/// Outcome counts since the gate loaded: `op -> code -> count`, with every
/// code of every operation present.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterStats {
    pub reserve: BTreeMap<String, u64>,
    pub confirm: BTreeMap<String, u64>,
    pub cancel: BTreeMap<String, u64>,
    pub holds_expired: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate from before the renames reports its room under the old
    /// names (`pow_shadowed`, `pow_refused`); a tool of today reads them
    /// into the same fields.
    #[test]
    fn a_room_under_its_old_names_still_reads() {
        let old = r#"{"admit_per_s":5,"reported":9,"admitted":4,"waiting":5,"advancing":true,
            "rejoins_uncounted":0,"pow_refused":7,"pow_shadowed":2}"#;
        let r: RoomStats = serde_json::from_str(old).unwrap();
        assert_eq!((r.pow_required, r.pow_infinite_queued), (7, 2));
    }
}
