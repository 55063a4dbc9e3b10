//! flashgate-origin: the shop's side of flashgate. It applies the events
//! the gate's outbox forwards (orders, voids, stock totals), idempotently
//! and behind a signature, with a conditional decrement as a second line of
//! defence against overselling; it serves the orders and metrics to the
//! shop's read token, mints buyer tokens for the shop's login, and
//! reconciles against the gate.

pub mod app;
pub mod auth;
pub mod body;
pub mod db;
pub mod demo;
pub mod limits;
pub mod metrics;
pub mod problem;
pub mod reads;
pub mod reconcile;
pub mod server;
pub mod state;
