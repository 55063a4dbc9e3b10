//! flashgate: the Worker (the edge) and its `ProductGate` Durable Object.
//!
//! The Worker routes and validates every request (`api`), refuses bad input
//! with a problem document, and forwards a validated `Command` to the
//! product's Durable Object, one per product id. Everything that decides is
//! a pure module, tested natively:
//! - `api`: the route table, routing and validation;
//! - `auth`, `settings`, `ids`: who may do what and how it is proven, the
//!   gate's keys and switches, and the opaque reservation ids;
//! - `codes`, `problem`, `reply`, `views`, `time`: what answers look like;
//! - `service`: one command applied to the core, and its reply;
//! - `object`: the Durable Object as a state machine over its storage;
//! - `sql`: the object's SQLite schema and row mapping;
//! - `delivery`: outbox batches and the classes of a failed delivery;
//! - `catalog`: which products exist, for the listing at `/`;
//! - `live`: the live updates an object pushes to its viewers' sockets,
//!   and how they are coalesced;
//! - `edge_cache`, `buyer_filter`, `ticket`, `rate_limit`: admission at
//!   the edge: the product snapshots the edge answers from, the buyers
//!   whose retries must reach the object, waiting-room tickets, and the
//!   rate limits' policies and answers.
//!
//! `wasm/` holds the shell, compiled only for wasm32: it executes SQL, sets
//! alarms and fetches, and decides nothing.

pub mod api;
pub mod auth;
pub mod buyer_filter;
pub mod catalog;
pub mod codes;
pub mod delivery;
pub mod edge_cache;
pub mod group_commit;
pub mod ids;
pub mod live;
pub mod object;
pub mod page;
pub mod problem;
pub mod rate_limit;
pub mod reply;
pub mod service;
pub mod settings;
pub mod sql;
pub mod ticket;
pub mod time;
pub mod views;

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
