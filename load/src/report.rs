//! The run's figures: one struct, printed as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::measure::Latency;
use crate::plan::System;
use crate::verdict::Verdict;

/// The endpoints a buyer calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    Session,
    Join,
    Standing,
    Reserve,
    Confirm,
    Cancel,
}

#[derive(Clone, Debug, Serialize)]
pub struct EndpointFigures {
    pub latency: Latency,
    /// Answers by problem code, status, or `network_error`.
    pub answers: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(serialize_with = "system_name")]
    pub system: System,
    pub base: String,
    pub product: String,
    pub seed: u64,
    pub buyers: u64,
    pub connections: u64,
    pub stock_total: u64,
    pub duration_s: f64,
    pub requests: u64,
    pub throughput_rps: f64,
    pub endpoints: BTreeMap<Endpoint, EndpointFigures>,
    /// Each buyer's reserve, by outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// What the buyers with a hold did with it.
    pub fates: BTreeMap<String, u64>,
    /// The reserves answered `sold_out`: the part of the burst after the
    /// stock is gone.
    pub sold_out_latency: Option<Latency>,
    /// Commands the object handled per request sent (flashgate only).
    pub reached_object: Option<f64>,
    /// From the start to the first sold-out answer.
    pub sell_out_ms: Option<u64>,
    /// From the last buyer's end until the outbox was empty (flashgate) or
    /// the database agreed with the recipe's authority (a peer); `None` if
    /// that did not happen within the timeout.
    pub settle_ms: Option<u64>,
    /// Kendall's tau between arrival and service order of the buyers who
    /// got units.
    pub fairness_tau: Option<f64>,
    pub fairness_pairs: u64,
    /// Database writes: the origin's order rows (flashgate), or the peer's
    /// count of write statements.
    pub db_writes: Option<u64>,
    pub reserve_requests: u64,
    pub db_writes_per_reserve: Option<f64>,
    /// `None` for the ceiling, which keeps no stock.
    pub verdict: Option<Verdict>,
    /// For a product of several stock shards, what the escrow cost.
    pub escrow: Option<EscrowFigures>,
}

/// What a product of several stock shards cost the run, from the gate's
/// stats after it settled.
#[derive(Clone, Debug, Serialize)]
pub struct EscrowFigures {
    pub shards: u16,
    /// Reports the shards sent home, and those a buyer waited for.
    pub reports: u64,
    pub sync_calls: u64,
    /// Of the run's reserve requests, the share that waited for a call home.
    pub sync_share: f64,
    /// Reports home per 1,000 reserve requests.
    pub transfers_per_1000_reserves: f64,
    /// Units still available when the run ended, every report home in:
    /// with every hold paid (`--shares 100,0,0`) and more buyers than
    /// units, anything here is undersold.
    pub available_at_end: u64,
}

impl EscrowFigures {
    pub fn of(e: &flashgate_wire::stats::EscrowStats, available: u64, reserves: u64) -> Self {
        let per = |n: u64| n as f64 / reserves.max(1) as f64;
        EscrowFigures {
            shards: e.shards,
            reports: e.reports,
            sync_calls: e.sync_calls,
            sync_share: per(e.sync_calls),
            transfers_per_1000_reserves: per(e.reports) * 1000.0,
            available_at_end: available,
        }
    }
}

fn system_name<S: serde::Serializer>(s: &System, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.name())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn counts(m: &BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Report {
    /// The summary table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} at {} · product {} · stock {} · {} buyers · {} connections · seed {}",
            self.system.name(),
            self.base,
            self.product,
            self.stock_total,
            self.buyers,
            self.connections,
            self.seed
        );
        let _ = writeln!(
            out,
            "{} requests in {:.2} s: {:.0} req/s",
            self.requests, self.duration_s, self.throughput_rps
        );
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>9} {:>9} {:>9}  answers",
            "endpoint", "count", "p50 ms", "p99 ms", "p999 ms"
        );
        for (e, f) in &self.endpoints {
            let _ = writeln!(
                out,
                "{:<10} {:>8} {:>9.1} {:>9.1} {:>9.1}  {}",
                format!("{e:?}").to_lowercase(),
                f.latency.count,
                f.latency.p50_ms,
                f.latency.p99_ms,
                f.latency.p999_ms,
                counts(&f.answers)
            );
        }
        let _ = writeln!(out, "outcomes: {}", counts(&self.outcomes));
        if let Some(l) = &self.sold_out_latency {
            let _ = writeln!(
                out,
                "sold-out answers: {} · p50 {:.1} ms · p99 {:.1} ms · p999 {:.1} ms",
                l.count, l.p50_ms, l.p99_ms, l.p999_ms
            );
        }
        if !self.fates.is_empty() {
            let _ = writeln!(out, "holds: {}", counts(&self.fates));
        }
        let _ = writeln!(
            out,
            "reached the object: {} · sold out after: {} ms · settled after: {} ms",
            self.reached_object
                .map_or("-".into(), |r| format!("{:.2}% of requests", r * 100.0)),
            opt(self.sell_out_ms),
            opt(self.settle_ms)
        );
        let _ = writeln!(
            out,
            "fairness (Kendall tau, arrival vs. service, {} buyers with units): {}",
            self.fairness_pairs,
            self.fairness_tau.map_or("-".into(), |t| format!("{t:.3}"))
        );
        let _ = writeln!(
            out,
            "database writes: {} ({} per reserve request)",
            opt(self.db_writes),
            self.db_writes_per_reserve
                .map_or("-".into(), |w| format!("{w:.4}"))
        );
        if let Some(e) = &self.escrow {
            let _ = writeln!(
                out,
                "shards: {} · calls home a buyer waited for: {} ({:.2}% of reserves) · reports home: {} ({:.1} per 1,000 reserves) · available at the end: {}",
                e.shards,
                e.sync_calls,
                e.sync_share * 100.0,
                e.reports,
                e.transfers_per_1000_reserves,
                e.available_at_end
            );
        }
        let Some(v) = &self.verdict else {
            let _ = writeln!(out, "verdict: none (the ceiling keeps no stock)");
            return out;
        };
        let _ = writeln!(
            out,
            "verdict: {} · forgotten {} · oversold {} (db {}) · lost {} · duplicated {} · unexplained {} · drift {}",
            if v.passed() { "PASS" } else { "FAIL" },
            v.forgotten_reservations,
            v.oversold_units,
            v.oversold_in_db_units,
            v.lost_orders,
            v.duplicated_orders,
            v.unexplained_orders,
            opt(v.drift_units)
        );
        for why in &v.violations {
            let _ = writeln!(out, "  violation: {why}");
        }
        out
    }

    /// Whether the run broke no rule (the ceiling has none to break).
    pub fn passed(&self) -> bool {
        self.verdict.as_ref().is_none_or(Verdict::passed)
    }
}
