//! flashgate-origin: the shop's side of flashgate. It ingests confirmed
//! reservations forwarded by the gate's outbox, idempotently (keyed by
//! reservation id) and behind an HMAC signature, applies a conditional
//! decrement as a second line of defence against overselling, and serves the
//! orders, metrics and a reconciliation against the gate.

pub mod app;
pub mod db;
pub mod metrics;
pub mod problem;
pub mod reconcile;
