//! Prometheus metrics: ingested, duplicate and rejected orders, signature
//! failures, and a histogram of batch latency.

use flashgate_wire::EventStatus;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    pub ingested: Counter,
    pub duplicates: Counter,
    pub rejected_oversell: Counter,
    pub refused: Counter,
    pub buyer_tokens: Counter,
    pub demo_payments: Counter,
    pub batches: Counter,
    pub batches_failed: Counter,
    pub batches_shed: Counter,
    pub unauthorized: Counter,
    pub batch_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("flashgate_origin");
        let ingested = Counter::default();
        let duplicates = Counter::default();
        let rejected_oversell = Counter::default();
        let refused = Counter::default();
        let buyer_tokens = Counter::default();
        let demo_payments = Counter::default();
        let batches = Counter::default();
        let batches_failed = Counter::default();
        let batches_shed = Counter::default();
        let unauthorized = Counter::default();
        // 1 ms to about 16 s.
        let batch_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "events_applied",
            "Events (orders, voids, stock totals) applied for the first time",
            ingested.clone(),
        );
        registry.register(
            "events_duplicate",
            "Events delivered again and recognised",
            duplicates.clone(),
        );
        registry.register(
            "events_refused",
            "Voids of unknown orders and totals below sold (a bug signal)",
            refused.clone(),
        );
        registry.register(
            "buyer_tokens_minted",
            "Buyer tokens minted for the shop",
            buyer_tokens.clone(),
        );
        registry.register(
            "demo_payments",
            "Demo payments confirmed at the gate",
            demo_payments.clone(),
        );
        registry.register(
            "orders_rejected_oversell",
            "Orders that would have oversold their product (a bug signal)",
            rejected_oversell.clone(),
        );
        registry.register("batches", "Batches committed", batches.clone());
        registry.register(
            "batches_failed",
            "Batches that failed with a server error",
            batches_failed.clone(),
        );
        registry.register(
            "batches_shed",
            "Batches refused with 503 because BATCHES_IN_FLIGHT_MAX were being taken",
            batches_shed.clone(),
        );
        registry.register(
            "unauthorized",
            "Requests refused for a missing or bad credential",
            unauthorized.clone(),
        );
        registry.register(
            "batch_duration_seconds",
            "Time to store one batch",
            batch_seconds.clone(),
        );
        Metrics {
            registry,
            ingested,
            duplicates,
            rejected_oversell,
            refused,
            buyer_tokens,
            demo_payments,
            batches,
            batches_failed,
            batches_shed,
            unauthorized,
            batch_seconds,
        }
    }
}

impl Metrics {
    /// Counts one event's result.
    pub fn count(&self, status: EventStatus) {
        match status {
            EventStatus::Applied => self.ingested.inc(),
            EventStatus::Duplicate => self.duplicates.inc(),
            EventStatus::RejectedOversell => self.rejected_oversell.inc(),
            EventStatus::Refused => self.refused.inc(),
        };
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
