//! flashgate-wire: the contract between the gate and the origin.
//!
//! The gate (the Worker crate, compiled to wasm32) and the origin service
//! (native) both depend on this crate and on nothing of each other, so the
//! facts they must agree on are written once, here:
//! - `altcha`: the ALTCHA proof of work a join may carry: the challenge
//!   the edge signs, the payload's verification, a native solver;
//! - `bounds`: every field bound and grammar (product ids, buyer ids,
//!   payment references, quantities, stock), and the order-id format;
//! - `batch`: the batch of outbox events (orders, voids, stock totals) the
//!   gate forwards, its validation, and the origin's per-event answer;
//! - `jwks`: an identity provider's public keys (RS256, ES256), parsed
//!   and pinned each to its algorithm;
//! - `keys`: key sets with key ids, for rotation without downtime;
//! - `lottery`: the waiting room's commitment and tiebreak, which anyone
//!   holding a sale's published key can recompute;
//! - `mac`: HMAC-SHA256 with a key of any length, infallibly;
//! - `signing`: the HMAC signature over a request, and its headers;
//! - `token`: buyer tokens (JWT): HS256 whole, and a provider's RS256 and
//!   ES256 up to the one signature check the runtime's WebCrypto makes;
//! - `stats`: the typed view of a product's gate stats, which the gate
//!   writes and `reconcile` reads;
//! - `problem`: the RFC 9457 problem document both sides answer errors with;
//! - `codes`: the gate's problem codes, with their status and title, which
//!   `flashgate-load` and the peers of `bench/peers` speak too;
//! - `peer`: the stats and orders a peer of `bench/peers` answers with.
//!
//! The load tool and the peers depend on this crate, not on the gate's.

pub mod altcha;
pub mod batch;
pub mod bounds;
pub mod codes;
pub mod jwks;
pub mod keys;
pub mod lottery;
pub mod mac;
pub mod peer;
pub mod problem;
pub mod signing;
pub mod stats;
pub mod token;

pub use batch::{Batch, BatchError, BatchResult, Event, EventResult, EventStatus};
pub use codes::ProblemCode;
pub use problem::ProblemDocument;
pub use stats::{CounterStats, GateStats, OriginTotals, OutboxStats, RoomStats, SaleState};
