//! flashgate: the Worker (the edge) and its `ProductGate` Durable Object.
//!
//! The Worker routes and validates every request, refuses bad input with a
//! problem document, and forwards a validated `Command` to the product's
//! Durable Object, one per product id. Everything that decides is a pure
//! module, tested natively:
//! - `edge`: routing and validation, auth, rate limits, waiting-room
//!   tickets, the snapshot cache and the pages;
//! - `object`: the Durable Object as a state machine over its storage, its
//!   SQL, group commit, delivery to the origin and live updates;
//! - `protocol`: the contract between the two (commands, snapshots, the
//!   buyer filter), which both import and which imports neither;
//! - `http`: problem codes and documents, replies and views;
//! - `ids`, `settings`, `limits`: the opaque reservation ids, the gate's
//!   keys and switches, and the Worker's limits.
//!
//! `edge` and `object` never import each other (`tests/layout.rs`).
//! `wasm/` holds the shell, compiled only for wasm32 and laid out as the
//! pure modules are: it executes SQL, sets alarms and fetches, and decides
//! nothing.

pub mod edge;
pub mod http;
pub mod ids;
pub mod limits;
pub mod object;
pub mod protocol;
pub mod settings;

#[cfg(target_arch = "wasm32")]
mod wasm;

// The wire crate states every bound the origin checks; the core keeps its
// own for its memory budget. They are one fact, checked here at compile time.
const _: () = {
    use flashgate_core::limits as core;
    use flashgate_wire::bounds as wire;
    assert!(core::BUYER_ID_BYTES_MAX == wire::BUYER_ID_BYTES_MAX);
    assert!(core::PAYMENT_REF_BYTES_MAX == wire::PAYMENT_REF_BYTES_MAX);
    assert!(core::QUANTITY_MAX_MAX == wire::ORDER_QUANTITY_MAX);
    assert!(core::STOCK_UNITS_MAX == wire::STOCK_UNITS_MAX);
};

/// The OpenAPI 3.1 description of the gate's and the origin's HTTP APIs,
/// converted from `openapi.yaml` by `build.rs`. The gate serves it at
/// `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/openapi.json"));
