//! flashgate: the Worker (the edge) and its `ProductGate` Durable Object.
//!
//! The Worker routes and validates every request (`api`), refuses bad input
//! with a problem document, and forwards a validated `Command` to the
//! product's Durable Object (`gate_do`), one per product id. The object
//! applies it to the pure core (`service`, `flashgate_core`) and persists the
//! rows the core changed (`storage`).

pub mod api;
pub mod problem;
pub mod service;
pub mod wire;

#[cfg(target_arch = "wasm32")]
mod edge;
#[cfg(target_arch = "wasm32")]
mod gate_do;
#[cfg(target_arch = "wasm32")]
mod http;
#[cfg(target_arch = "wasm32")]
mod storage;
