//! The JSON bodies of successful answers: a product, a reservation, a
//! confirmation, and the admin stats (the wire crate's `GateStats`).

use flashgate_core::{
    CancelKind, ConfirmKind, Confirmation, Face, Gate, HoldState, Published, ReservationView,
    ReserveKind, Stats, Voided,
};
use flashgate_wire::lottery::commitment;
use flashgate_wire::stats::IsolateWork;
use flashgate_wire::{CounterStats, GateStats, OutboxStats, RoomStats, SaleState};
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::http::time::rfc3339;
use crate::ids::IdCodec;
use crate::protocol::buyer_filter::BuyerFilter;
use crate::protocol::snapshot::{PowNow, RoomSnapshot, Snapshot, SoldOut};

/// What the object's shell has done since it loaded: how forwarding the
/// outbox is going, and how many snapshots it gave the edge. Kept by the
/// object, shown in the stats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellStatus {
    pub last_error: Option<String>,
    pub last_success_ms: Option<u64>,
    /// Events the origin refused: a disagreement, never expected.
    pub refused: u64,
    /// Snapshots served to the edge (each a trip that stood in for many).
    pub snapshots: u64,
    pub work: flashgate_wire::stats::WorkStats,
}

/// The wasm linear memory's size: pages of 64 KiB.
fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        core::arch::wasm32::memory_size(0) as u64 * 65_536
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

/// The billed work of every object in this isolate (`IsolateWork`):
/// counted by the object shells, which handle the events and run the SQL.
/// Plain counters, never stored, so that counting costs no write: wasm32
/// has one thread, and the atomics are only how a `static` is mutable
/// without `unsafe`.
static EVENTS: AtomicU64 = AtomicU64::new(0);
static ROWS_READ: AtomicU64 = AtomicU64::new(0);
static ROWS_WRITTEN: AtomicU64 = AtomicU64::new(0);

/// One more request, alarm or WebSocket message handled by an object.
pub fn count_event() {
    EVENTS.fetch_add(1, Ordering::Relaxed);
}

/// SQLite rows read and written by an object's statements.
pub fn count_rows(read: u64, written: u64) {
    ROWS_READ.fetch_add(read, Ordering::Relaxed);
    ROWS_WRITTEN.fetch_add(written, Ordering::Relaxed);
}

/// The isolate's work counted so far.
pub fn isolate_work() -> IsolateWork {
    IsolateWork {
        events: EVENTS.load(Ordering::Relaxed),
        rows_read: ROWS_READ.load(Ordering::Relaxed),
        rows_written: ROWS_WRITTEN.load(Ordering::Relaxed),
    }
}

fn to_value(v: impl Serialize) -> Value {
    // Every view is a struct of numbers and strings (a face's too), which
    // always serialize.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The snapshot the object gives the edge (`protocol::snapshot::Snapshot`).
pub fn snapshot(
    g: &Gate,
    product_id: &str,
    now_ms: u64,
    shard_buyers: &[Option<BuyerFilter>],
) -> Value {
    let s = g.stats(now_ms);
    let c = g.config();
    let room = (c.admit_per_s > 0).then(|| RoomSnapshot {
        admit_per_s: c.admit_per_s,
        opens_at_ms: c.opens_at_ms,
        prequeue_ms: c.prequeue_ms,
        ticket_ttl_ms: c.ticket_ttl_ms,
        admission: g.admission().clone(),
        uptake: g.uptake(now_ms),
        pow: g.pow_level(now_ms).map(|level| PowNow {
            level,
            infinite_queue: c.pow.infinite_queue,
        }),
    });
    // The buyers' filters are only needed, and only built, when nothing is
    // left anywhere: they are what lets the edge answer sold_out for
    // everyone else. Over K shards home has each shard's from its last
    // drain; without one (home restarted since), no answer at the edge.
    let sold_out = g.sold_out_age(now_ms).and_then(|age_ms| {
        let existing = g.existing_shards();
        let mut buyers = vec![BuyerFilter::from_bloom(g.buyers_filter())];
        for i in 1..usize::from(g.shards()) {
            buyers.push(if existing & (1 << i) == 0 {
                BuyerFilter::build(std::iter::empty())
            } else {
                shard_buyers.get(i)?.clone()?
            });
        }
        Some(SoldOut { age_ms, buyers })
    });
    to_value(Snapshot {
        at_ms: now_ms,
        product: product(g, product_id, now_ms),
        available: s.available,
        held: s.held,
        state: sale_state(s.sale_state),
        room,
        sold_out,
        shards: g.shards(),
        existing: g.existing_shards(),
        fetched_at_ms: 0,
    })
}

/// `GET /admin/products/{id}/drift`: the gate's sold units beside the
/// origin's, and the drift between them (`GateStats::drift_units`); when
/// the origin could not be read, the drift is `null` and `origin_error`
/// says why.
pub fn drift(stats: &GateStats, origin: Result<flashgate_wire::OriginTotals, String>) -> Value {
    let (origin_sold, origin_stock_total, drift_units, origin_error) = match origin {
        Ok(o) => (
            Some(o.sold),
            Some(o.stock_total),
            Some(stats.drift_units(o.sold)),
            None,
        ),
        Err(e) => (None, None, None, Some(e)),
    };
    serde_json::json!({
        "product_id": stats.product_id,
        "gate_sold": stats.sold,
        "gate_stock_total": stats.stock_total,
        "gate_backlog_units": stats.outbox.backlog_units,
        "origin_sold": origin_sold,
        "origin_stock_total": origin_stock_total,
        "drift_units": drift_units,
        "origin_error": origin_error,
    })
}

#[derive(Serialize)]
struct ProductView<'a> {
    product_id: &'a str,
    state: &'static str,
    stock_total: u64,
    available: u64,
    held: u64,
    sold: u64,
    opens_at: Option<String>,
    opens_at_ms: Option<u64>,
    closes_at: Option<String>,
    closes_at_ms: Option<u64>,
    per_buyer_max: u32,
    quantity_max: u32,
    hold_ttl_ms: u64,
    shards: u16,
    /// The waiting room's rate; 0: none, reserve directly.
    admit_per_s: u32,
    prequeue_ms: u64,
    ticket_ttl_ms: u64,
    idem_window_ms: u64,
    reservations_max: u32,
    attempts_per_window_max: u32,
    attempt_window_ms: u64,
    /// What the pages show: served from the edge's snapshot, so showing a
    /// product costs its object nothing.
    face: &'a Face,
    /// The waiting room's lottery: `SHA-256(key)` from the moment the room
    /// is set up, the key itself from the opening on (`core::lottery`).
    lottery_commitment: Option<String>,
    lottery_key: Option<String>,
    /// The proof of work a join needs now; whether a failed one goes to the
    /// infinite queue is not told.
    pow: PowView,
}

#[derive(Serialize)]
struct PowView {
    mode: &'static str,
    /// The level set: fixed, the level; adaptive, the lowest.
    level: u8,
    /// The level asked now (hex zeros of the key prefix); `null` when off.
    asking: Option<u8>,
}

/// The public view of a product.
pub fn product(g: &Gate, product_id: &str, now_ms: u64) -> Value {
    let s = g.stats(now_ms);
    let c = g.config();
    let (lottery_commitment, lottery_key) =
        match g.admission().lottery.published(now_ms, c.opens_at_ms) {
            Published::None => (None, None),
            Published::Commitment(k) => (Some(commitment(&k.0)), None),
            Published::Key(k) => (Some(commitment(&k.0)), Some(k.to_hex())),
        };
    to_value(ProductView {
        product_id,
        state: s.sale_state.as_str(),
        stock_total: s.stock_total,
        available: s.available,
        held: s.held,
        sold: s.sold,
        opens_at: c.opens_at_ms.map(rfc3339),
        opens_at_ms: c.opens_at_ms,
        closes_at: c.closes_at_ms.map(rfc3339),
        closes_at_ms: c.closes_at_ms,
        per_buyer_max: c.per_buyer_max,
        quantity_max: c.quantity_max,
        hold_ttl_ms: c.hold_ttl_ms,
        shards: g.shards(),
        admit_per_s: c.admit_per_s,
        prequeue_ms: c.prequeue_ms,
        ticket_ttl_ms: c.ticket_ttl_ms,
        idem_window_ms: c.idem_window_ms,
        reservations_max: c.reservations_max,
        attempts_per_window_max: c.attempts_per_window_max,
        attempt_window_ms: c.attempt_window_ms,
        face: &c.face,
        lottery_commitment,
        lottery_key,
        pow: PowView {
            mode: c.pow.mode.as_str(),
            level: c.pow.level,
            asking: g.pow_level(now_ms),
        },
    })
}

#[derive(Serialize)]
struct HoldView {
    reservation_id: String,
    state: &'static str,
    quantity: u32,
    expires_at: String,
    expires_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    confirmation: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    voided_at: Option<String>,
}

/// A reservation just made, or replayed.
pub fn hold(ids: &IdCodec, id: u64, expires_at_ms: u64, quantity: u32) -> Value {
    to_value(HoldView {
        reservation_id: ids.encode(id),
        state: HoldState::Held.as_str(),
        quantity,
        expires_at: rfc3339(expires_at_ms),
        expires_at_ms,
        confirmation: None,
        voided_at: None,
    })
}

/// A buyer's own reservation as it reads now.
pub fn reservation(ids: &IdCodec, v: &ReservationView) -> Value {
    to_value(HoldView {
        reservation_id: ids.encode(v.id),
        state: v.state.as_str(),
        quantity: v.quantity,
        expires_at: rfc3339(v.expires_at_ms),
        expires_at_ms: v.expires_at_ms,
        confirmation: v.confirmation.as_ref().map(|c| confirmation(ids, c)),
        voided_at: v.voided_at_ms.map(rfc3339),
    })
}

#[derive(Serialize)]
struct ConfirmationView<'a> {
    reservation_id: String,
    state: &'static str,
    quantity: u32,
    payment_ref: &'a str,
    confirmed_at: String,
    confirmed_at_ms: u64,
}

pub fn confirmation(ids: &IdCodec, c: &Confirmation) -> Value {
    to_value(ConfirmationView {
        reservation_id: ids.encode(c.reservation_id),
        state: HoldState::Confirmed.as_str(),
        quantity: c.quantity,
        payment_ref: &c.payment_ref,
        confirmed_at: rfc3339(c.confirmed_at_ms),
        confirmed_at_ms: c.confirmed_at_ms,
    })
}

#[derive(Serialize)]
struct CancelledView {
    reservation_id: String,
    state: &'static str,
    quantity: u32,
}

pub fn cancelled(ids: &IdCodec, id: u64, quantity: u32) -> Value {
    to_value(CancelledView {
        reservation_id: ids.encode(id),
        state: HoldState::Cancelled.as_str(),
        quantity,
    })
}

#[derive(Serialize)]
struct VoidedView {
    reservation_id: String,
    state: &'static str,
    quantity: u32,
    voided_at: String,
    voided_at_ms: u64,
}

/// An order the admin voided.
pub fn voided(ids: &IdCodec, v: &Voided) -> Value {
    to_value(VoidedView {
        reservation_id: ids.encode(v.reservation_id),
        state: HoldState::Voided.as_str(),
        quantity: v.quantity,
        voided_at: rfc3339(v.voided_at_ms),
        voided_at_ms: v.voided_at_ms,
    })
}

pub fn sale_state(p: flashgate_core::SaleState) -> SaleState {
    match p {
        flashgate_core::SaleState::Scheduled => SaleState::Scheduled,
        flashgate_core::SaleState::Open => SaleState::Open,
        flashgate_core::SaleState::Paused => SaleState::Paused,
        flashgate_core::SaleState::Closed => SaleState::Closed,
    }
}

/// The admin stats: the core's, plus the shell's delivery status.
pub fn stats(product_id: &str, s: &Stats, admit_per_s: u32, delivery: &ShellStatus) -> GateStats {
    let c = &s.counters;
    let counters = CounterStats {
        reserve: ReserveKind::ALL
            .iter()
            .map(|&k| (k.code().to_string(), c.reserve(k)))
            .collect(),
        confirm: ConfirmKind::ALL
            .iter()
            .map(|&k| (k.code().to_string(), c.confirm(k)))
            .collect(),
        cancel: CancelKind::ALL
            .iter()
            .map(|&k| (k.code().to_string(), c.cancel(k)))
            .collect(),
        holds_expired: c.holds_expired,
    };
    GateStats {
        product_id: product_id.to_string(),
        state: sale_state(s.sale_state),
        stock_total: s.stock_total,
        available: s.available,
        held: s.held,
        sold: s.sold,
        live_holds: s.live_holds,
        tombstones: s.tombstones,
        buyers: s.buyers,
        outbox: OutboxStats {
            backlog: s.outbox_backlog,
            backlog_units: s.outbox_backlog_units,
            acked_seq: s.outbox_acked_seq,
            attempts: s.outbox_attempts,
            retry_at_ms: s.outbox_retry_at_ms,
            last_error: delivery.last_error.clone(),
            last_success_ms: delivery.last_success_ms,
            refused: delivery.refused,
        },
        next_deadline_ms: s.next_deadline_ms,
        room: RoomStats {
            admit_per_s,
            reported: s.queue_reported,
            admitted: s.queue_admitted,
            waiting: s.queue_reported.saturating_sub(s.queue_admitted),
            advancing: s.queue_advancing,
            rejoins_uncounted: s.counters.rejoins_uncounted,
            pow_mode: s.pow.mode.as_str().to_string(),
            pow_level: s.pow_level,
            pow_infinite_queue: s.pow.infinite_queue,
            joins_per_s: s.joins_per_s,
            pow_required: s.counters.pow_required,
            pow_infinite_queued: s.counters.pow_infinite_queued,
        },
        snapshots: delivery.snapshots,
        work: flashgate_wire::stats::WorkStats {
            wasm_memory_bytes: wasm_memory_bytes(),
            isolate: isolate_work(),
            ..delivery.work.clone()
        },
        counters,
        escrow: s
            .escrow
            .as_ref()
            .map(|e| flashgate_wire::stats::EscrowStats {
                shards: e.shards,
                unallocated: e.unallocated,
                reports: e.reports,
                waits: e.waits,
                per_shard: e
                    .per_shard
                    .iter()
                    .map(|s| flashgate_wire::stats::ShardStats {
                        escrowed: s.escrowed,
                        available: s.levels.available,
                        held: s.levels.held,
                        sold: s.levels.sold,
                    })
                    .collect(),
            }),
    }
}

pub fn stats_value(product_id: &str, s: &Stats, admit_per_s: u32, delivery: &ShellStatus) -> Value {
    to_value(stats(product_id, s, admit_per_s, delivery))
}
