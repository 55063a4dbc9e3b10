//! Prometheus metrics: ingested, duplicate and rejected orders, signature
//! failures, and a histogram of batch latency.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    pub ingested: Counter,
    pub duplicates: Counter,
    pub rejected_oversell: Counter,
    pub batches: Counter,
    pub batches_failed: Counter,
    pub unauthorized: Counter,
    pub batch_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("flashgate_origin");
        let ingested = Counter::default();
        let duplicates = Counter::default();
        let rejected_oversell = Counter::default();
        let batches = Counter::default();
        let batches_failed = Counter::default();
        let unauthorized = Counter::default();
        // 1 ms to about 16 s.
        let batch_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "orders_ingested",
            "Orders stored for the first time",
            ingested.clone(),
        );
        registry.register(
            "orders_duplicate",
            "Orders delivered again and recognised",
            duplicates.clone(),
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
            "unauthorized",
            "Requests refused for a missing, bad or stale signature",
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
            batches,
            batches_failed,
            unauthorized,
            batch_seconds,
        }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
