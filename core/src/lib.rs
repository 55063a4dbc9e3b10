//! flashgate-core: every decision of one product's flash-sale gate.
//!
//! This crate is a pure state machine in the style of quinn-proto. It does no
//! I/O, reads no clock, spawns nothing and awaits nothing: every entry point
//! takes `now_ms`, and the caller (the Durable Object shell) moves time,
//! storage and network in and out. That is what lets the simulator in
//! `tests/sim.rs` drive it through millions of interleavings from a seed.
//!
//! The contract is the seven invariants ARCHITECTURE.md states (I1–I7); the
//! core keeps its part of them:
//! - I1: `available + held + sold == escrowed`, the units a gate keeps (the
//!   stock total, or a shard's escrow), asserted wherever units move.
//! - I2: every confirmation, void and change of the stock total enters the
//!   outbox in the same call.
//! - I3: a retried reserve with the same idempotency key replays its answer
//!   and never takes stock twice.
//! - I4: a reservation resolves once: `held -> confirmed | cancelled |
//!   expired`; a confirm at or after expiry is refused.
//! - I5: a refused command changes nothing, beyond settling the timeouts
//!   that were due and counting the buyer's attempt against its pace.
//! - I6: the core takes the buyer the edge proved, and another buyer's
//!   reservation is unknown to it.
//! - I7: the waiting room's tickets are in one total order, none is
//!   admitted before one ahead of it, and the watermark never moves back.

pub mod admission;
pub mod archive;
mod audit;
pub mod bloom;
mod buyers;
pub mod config;
pub mod escrow;
pub mod face;
pub mod gate;
pub mod history;
pub mod lottery;
mod mix;
pub mod odds;
pub mod outbox;
pub mod outcome;
mod pacing;
mod persist;
pub mod pow;
pub mod rows;
mod sharded;
pub mod stats;
mod store;

pub use admission::{Admission, Arrivals, Named, QueueKey, Rules, Ticket, Watermark};
pub use archive::{Archive, NoArchive};
pub use config::{limits, Config, ConfigError, ConfigPatch, Mode, SaleState};
pub use face::{Face, FaceError, Localized, Price};
pub use gate::{Gate, ReservationView};
pub use history::{
    merge as merge_histories, Bucket, History, HistoryFault, HistoryWrite, Mark, Period, Refusals,
    Served, Summary, Timeline,
};
pub use lottery::{AdmissionRecord, AdmissionRecordFault, Lottery, LotteryKey, Point, Published};
pub use mix::splitmix64;
pub use odds::{odds, Odds, Uptake, Verdict};
pub use outbox::{backoff_ms, OutboxEntry, OutboxEvent};
pub use outcome::{
    AckOutcome, AdminRefusal, AdminRefusalKind, CancelKind, CancelOutcome, ConfirmKind,
    ConfirmOutcome, Confirmation, InvalidInput, ReservationId, ReserveKind, ReserveOutcome, Voided,
};
pub use persist::Restorer;
pub use pow::{JoinRate, Pow, PowMode};
pub use rows::{Change, ItemKey, MetaRow, ReservationRow, RestoreError, Row, RowKey};
pub use sharded::{Escrow, HomeStep};
pub use stats::{Counters, Levels, Stats};
pub use store::HoldState;
