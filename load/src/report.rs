//! The run's figures: one struct, printed as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use flashgate_wire::stats::IsolateWork;
use serde::Serialize;

use crate::measure::Latency;
use crate::plan::System;
use crate::server_timing::EscrowWait;
use crate::verdict::SaleVerdict;

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

/// The shares of pay, cancel and abandon the buyers with a hold followed,
/// in percent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SharesUsed {
    pub pay: u8,
    pub cancel: u8,
    pub abandon: u8,
    /// Why they differ from the shares asked for, if they do.
    pub note: Option<String>,
}

/// What became of the product the run made for itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "left", rename_all = "snake_case")]
pub enum Cleanup {
    /// Closed: the gate cannot delete a product, so it stays listed,
    /// closed, and sells nothing more.
    Closed,
    /// Closing it failed; it is still on sale.
    NotClosed { why: String },
}

/// The run's verdict in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every check was made and none failed.
    Pass,
    /// A check failed (on a complete run or not: a violation seen is one).
    Fail,
    /// The run stopped before its end, and the checks it could make passed.
    Incomplete,
    /// The ceiling keeps no stock: there is nothing to judge.
    Unjudged,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Incomplete => "INCOMPLETE",
            Status::Unjudged => "none",
        }
    }

    /// The command's exit code: 1 for a violation, 2 when the run could
    /// not be made whole.
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Pass | Status::Unjudged => 0,
            Status::Fail => 1,
            Status::Incomplete => 2,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The verdict in one word; `incomplete` says why a run is.
    pub status: Status,
    /// Why the run stopped before its end (an error, a signal, the
    /// deadline, the settle timeout); `None` for a whole run.
    pub incomplete: Option<String>,
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
    /// The shares they followed (flashgate only: a peer's order is made at
    /// the reserve).
    pub shares: Option<SharesUsed>,
    /// The reserves answered `sold_out`: the part of the burst after the
    /// stock is gone.
    pub sold_out_latency: Option<Latency>,
    /// Reserve answers that were 503 (`unavailable`: the gate could not
    /// decide within its bounded wait). Each was tried again, as its
    /// `Retry-After` said; a buyer whose every attempt got one ended
    /// `unavailable` in `outcomes`. Never counted as sold out.
    pub unavailable_answers: u64,
    /// The reserves that waited for their shard's call home, as the gate's
    /// `Server-Timing` says.
    pub escrow_waits: EscrowWaits,
    /// The reserves, confirms and cancels the object decided during the
    /// run, per request the run sent (flashgate only). Other clients' reads
    /// (the console's polls) are not counted; buyers of the same product
    /// outside the run would be.
    pub reached_object: Option<f64>,
    /// What the platform would bill the gate's Durable Objects for over
    /// the run (flashgate only): the stats' `work.isolate` at the end less
    /// at the start. On bare workerd every object of the product shares
    /// one isolate, so this is all K shards' work.
    pub work: Option<IsolateWork>,
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
    /// The run's own reads and writes (setup, stats, the origin's orders)
    /// that met a 429, a 503 or a network error and were tried again.
    pub read_retries: u64,
    /// `None` if the product was there before the run.
    pub product_made: Option<Cleanup>,
    /// `None` for the ceiling, which keeps no stock.
    pub verdict: Option<SaleVerdict>,
    /// For a product of several stock shards, what the escrow cost.
    pub escrow: Option<EscrowFigures>,
    /// For a waiting room that asked a proof of work, what solving cost
    /// the buyers (natively, as a script).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pow: Option<PowFigures>,
    /// The waiting room's audit (`--audit`), if asked for.
    pub audit: Option<crate::audit::AuditReport>,
    /// The gate's history of the run against what its buyers saw
    /// (flashgate only); its violations are the verdict's too.
    pub history: Option<crate::history_check::HistoryCheck>,
}

/// The proof of work the buyers solved: how many challenges, and the mean
/// time one took on a blocking thread of this tool.
#[derive(Clone, Debug, Serialize)]
pub struct PowFigures {
    pub solved: u64,
    pub solve_ms_mean: f64,
}

/// What a product of several stock shards cost the run, from the gate's
/// stats after it settled.
#[derive(Clone, Debug, Serialize)]
pub struct EscrowFigures {
    pub shards: u16,
    /// Reports the shards sent home, and those a buyer waited for.
    pub reports: u64,
    pub waits: u64,
    /// Of the run's reserve requests, the share that waited for a call home.
    pub wait_share: f64,
    /// Reports home per 1,000 reserve requests.
    pub reports_per_1000_reserves: f64,
}

impl EscrowFigures {
    pub fn of(e: &flashgate_wire::stats::EscrowStats, reserves: u64) -> Self {
        let per = |n: u64| n as f64 / reserves.max(1) as f64;
        EscrowFigures {
            shards: e.shards,
            reports: e.reports,
            waits: e.waits,
            wait_share: per(e.waits),
            reports_per_1000_reserves: per(e.reports) * 1000.0,
        }
    }
}

/// The reserve answers that carried an escrow wait (`Server-Timing:
/// escrow;dur=..;desc="trips=.."`): how many, how long they waited, and
/// the round trips to home they took. The quantiles and trips are `None`
/// when no reserve waited (or, for the trips, none said).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EscrowWaits {
    pub reserves: u64,
    pub wait_p50_ms: Option<f64>,
    pub wait_p99_ms: Option<f64>,
    pub wait_max_ms: Option<f64>,
    pub trips_mean: Option<f64>,
    pub trips_max: Option<u64>,
}

impl EscrowWaits {
    pub fn of(waits: &[EscrowWait]) -> EscrowWaits {
        if waits.is_empty() {
            return EscrowWaits::default();
        }
        let wait = Latency::of(waits.iter().map(|w| w.dur_ms).collect());
        let trips: Vec<u64> = waits.iter().filter_map(|w| w.trips).collect();
        EscrowWaits {
            reserves: waits.len() as u64,
            wait_p50_ms: Some(wait.p50_ms),
            wait_p99_ms: Some(wait.p99_ms),
            wait_max_ms: Some(wait.max_ms),
            trips_mean: (!trips.is_empty())
                .then(|| trips.iter().sum::<u64>() as f64 / trips.len() as f64),
            trips_max: trips.iter().copied().max(),
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
    /// `report` with its status worked out from its verdict and whether it
    /// is complete.
    pub fn judged(mut report: Report) -> Report {
        let audit_failed = report.audit.as_ref().is_some_and(|a| !a.passed());
        report.status = match (&report.verdict, &report.incomplete) {
            (Some(v), _) if !v.passed() => Status::Fail,
            _ if audit_failed => Status::Fail,
            (_, Some(_)) => Status::Incomplete,
            (Some(_), None) => Status::Pass,
            (None, None) => Status::Unjudged,
        };
        report
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.write_requests(&mut out);
        self.write_sale(&mut out);
        self.write_checks(&mut out);
        self.write_verdict(&mut out);
        out
    }

    /// The run, and each endpoint's latencies and answers.
    fn write_requests(&self, out: &mut String) {
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
    }

    /// What the buyers met: outcomes, sold-outs, waits, holds, fairness.
    fn write_sale(&self, out: &mut String) {
        let _ = writeln!(out, "outcomes: {}", counts(&self.outcomes));
        if let Some(l) = &self.sold_out_latency {
            let _ = writeln!(
                out,
                "sold-out answers: {} · p50 {:.1} ms · p99 {:.1} ms · p999 {:.1} ms",
                l.count, l.p50_ms, l.p99_ms, l.p999_ms
            );
        }
        if self.unavailable_answers > 0 {
            let _ = writeln!(
                out,
                "503 unavailable: {} reserve answers (each tried again; {} buyers ended there); not sold-outs",
                self.unavailable_answers,
                self.outcomes
                    .get(flashgate_wire::codes::ProblemCode::Unavailable.as_str())
                    .copied()
                    .unwrap_or(0)
            );
        }
        if self.system == System::Flashgate {
            let w = &self.escrow_waits;
            let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "reserves that waited for home: {} · wait p50 {} ms · p99 {} ms · max {} ms · trips mean {} · max {}",
                w.reserves,
                ms(w.wait_p50_ms),
                ms(w.wait_p99_ms),
                ms(w.wait_max_ms),
                w.trips_mean.map_or("-".into(), |t| format!("{t:.2}")),
                opt(w.trips_max)
            );
        }
        if !self.fates.is_empty() {
            let _ = writeln!(out, "holds: {}", counts(&self.fates));
        }
        if let Some(s) = &self.shares {
            let _ = writeln!(
                out,
                "shares followed: pay {}%, cancel {}%, abandon {}%",
                s.pay, s.cancel, s.abandon
            );
            if let Some(note) = &s.note {
                let _ = writeln!(out, "  NOTE: {note}");
            }
        }
        let _ = writeln!(
            out,
            "reached the object: {} · sold out after: {} ms · settled after: {} ms",
            self.reached_object
                .map_or("-".into(), |r| format!("{:.2}% of its requests", r * 100.0)),
            opt(self.sell_out_ms),
            opt(self.settle_ms)
        );
        if let Some(w) = &self.work {
            let _ = writeln!(
                out,
                "the objects' billed work: {} events (requests and alarms), {} SQLite rows read, {} written",
                w.events, w.rows_read, w.rows_written
            );
        }
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
    }

    /// The proof of work, the shards, the audit, and how the run ended.
    fn write_checks(&self, out: &mut String) {
        if let Some(p) = &self.pow {
            let _ = writeln!(
                out,
                "proof of work: {} challenges solved natively · {:.1} ms each on average",
                p.solved, p.solve_ms_mean
            );
        }
        if let Some(e) = &self.escrow {
            let _ = writeln!(
                out,
                "shards: {} · calls home a buyer waited for: {} ({:.2}% of reserves) · reports home: {} ({:.1} per 1,000 reserves)",
                e.shards,
                e.waits,
                e.wait_share * 100.0,
                e.reports,
                e.reports_per_1000_reserves
            );
        }
        if let Some(a) = &self.audit {
            let _ = writeln!(
                out,
                "audit: {} · {} tickets against {} record points",
                if a.passed() { "PASS" } else { "FAIL" },
                a.tickets,
                a.points
            );
            for v in &a.violations {
                let _ = writeln!(out, "  audit violation: {}: {}", v.check, v.detail);
            }
        }
        if let Some(h) = &self.history {
            let _ = writeln!(
                out,
                "history: {} · held {} (saw {}) · paid {} (saw {}) · cancelled {} (saw {}) · sold out {} (saw {}, {} not yet reported by the edges)",
                if h.violations.is_empty() { "PASS" } else { "FAIL" },
                h.history.reserved,
                h.seen.reserved,
                h.history.confirmed,
                h.seen.confirmed,
                h.history.cancelled,
                h.seen.cancelled,
                h.history.sold_out,
                h.seen.sold_out,
                h.sold_out_unreported
            );
        }
        if self.read_retries > 0 {
            let _ = writeln!(
                out,
                "the run's own reads tried again after a 429, 503 or network error: {}",
                self.read_retries
            );
        }
        match &self.product_made {
            Some(Cleanup::Closed) => {
                let _ = writeln!(
                    out,
                    "product {}: made for this run, now closed (the gate cannot delete a product; it stays listed, closed)",
                    self.product
                );
            }
            Some(Cleanup::NotClosed { why }) => {
                let _ = writeln!(
                    out,
                    "product {}: made for this run, and NOT closed: {why}",
                    self.product
                );
            }
            None => {}
        }
        if let Some(why) = &self.incomplete {
            let _ = writeln!(out, "INCOMPLETE: the run stopped before its end: {why}");
        }
    }

    /// The verdict and the violations behind it.
    fn write_verdict(&self, out: &mut String) {
        let Some(v) = &self.verdict else {
            let _ = writeln!(out, "verdict: none (the ceiling keeps no stock)");
            return;
        };
        let checked = |made: bool, n: u64| {
            if made {
                n.to_string()
            } else {
                "not checked".into()
            }
        };
        let orders = v.orders_checked;
        let _ = writeln!(
            out,
            "verdict: {} · forgotten {} · oversold {} (db {}) · lost {} · duplicated {} · unexplained {} · drift {}",
            self.status.word(),
            v.forgotten_reservations,
            v.oversold_units,
            checked(orders, v.oversold_in_db_units),
            checked(orders, v.lost_orders),
            checked(orders, v.duplicated_orders),
            checked(orders, v.unexplained_orders),
            v.drift_units.map_or("not checked".into(), |d| d.to_string())
        );
        let _ = writeln!(
            out,
            "sold out: {} answers · false {} (lag {} ms) · available at the end {} · of them while buyers were refused {}",
            v.sold_out_answers,
            v.false_sold_outs,
            flashgate_wire::bounds::SOLD_OUT_LAG_MS,
            opt(v.available_at_end),
            v.available_while_refused
        );
        for e in &v.false_sold_out_examples {
            let _ = writeln!(
                out,
                "  false sold-out: buyer {} sent at {:.1} ms, answered sold_out at {:.1} ms; buyer {} sent at {:.1} ms and got a unit",
                e.buyer, e.sent_ms, e.answered_ms, e.later_buyer, e.later_sent_ms
            );
        }
        for why in &v.violations {
            let _ = writeln!(out, "  violation: {why}");
        }
    }
}
