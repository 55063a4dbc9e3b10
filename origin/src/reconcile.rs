//! Reconciliation: compares each product's gate stats with the origin's
//! totals and orders, and reports drift.
//!
//! For a product, `drift_units = gate.sold - origin.sold -
//! gate.outbox.backlog_units`: every unit the gate sold is either counted at
//! the origin or still waiting in the outbox (orders add units, voids take
//! them back, so the backlog is net). Once the outbox has drained, drift
//! must be zero. The origin's `sold` must also equal what its accepted
//! orders sum to, and no order may be `rejected_oversell`.
//!
//! The gate's stats are read as the wire crate's `GateStats`, the type the
//! gate writes them with. A gate that refuses the admin token or fails is an
//! error, not a finding: reconcile cannot judge drift without its numbers.

use anyhow::{bail, Context};
use flashgate_wire::GateStats;
use reqwest::StatusCode;
use serde::Serialize;

use crate::db::{Db, OrderSums, Product};

/// Something reconcile found about one product.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Finding {
    /// The gate has no such product.
    GateUnknown,
    /// The origin has no order for the product yet.
    OriginUnknown,
    /// Units sold at the gate that are neither at the origin nor waiting in
    /// the outbox (negative: more at the origin than the gate sold).
    Drift { units: i64 },
    /// The origin's `sold` disagrees with its own accepted orders.
    OriginSoldMismatch { sold: i64, units_accepted: i64 },
    /// The origin refused orders as oversell.
    RejectedOversell { orders: i64 },
}

impl Finding {
    pub fn describe(&self) -> String {
        match self {
            Finding::GateUnknown => "the gate does not know this product".into(),
            Finding::OriginUnknown => "the origin has no orders for this product".into(),
            Finding::Drift { units } => format!(
                "{units} units sold at the gate are neither at the origin nor in the outbox"
            ),
            Finding::OriginSoldMismatch {
                sold,
                units_accepted,
            } => format!("origin sold {sold} but its accepted orders hold {units_accepted}"),
            Finding::RejectedOversell { orders } => {
                format!("{orders} orders were rejected as oversell")
            }
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ProductDrift {
    pub product_id: String,
    pub gate_stock_total: Option<u64>,
    pub gate_sold: Option<u64>,
    pub gate_backlog_units: Option<i64>,
    pub gate_backlog: Option<u64>,
    pub origin_stock_total: Option<i64>,
    pub origin_sold: Option<i64>,
    pub origin_orders_rejected: Option<i64>,
    pub drift_units: i64,
    pub ok: bool,
    pub findings: Vec<Finding>,
    /// The findings in words.
    pub problems: Vec<String>,
}

/// What reconcile finds for one product, from the two sides' numbers: the
/// origin's products row and what its orders sum to.
pub fn findings(gate: Option<&GateStats>, origin: Option<(&Product, OrderSums)>) -> Vec<Finding> {
    let mut out = Vec::new();
    if gate.is_none() {
        out.push(Finding::GateUnknown);
    }
    if origin.is_none() {
        out.push(Finding::OriginUnknown);
    }
    let origin_sold = origin.map_or(0, |(o, _)| o.sold);
    let drift = match gate {
        Some(g) => g.drift_units(origin_sold),
        None => -origin_sold,
    };
    if drift != 0 {
        out.push(Finding::Drift { units: drift });
    }
    if let Some((o, sums)) = origin {
        if o.sold != sums.units_accepted {
            out.push(Finding::OriginSoldMismatch {
                sold: o.sold,
                units_accepted: sums.units_accepted,
            });
        }
        let rejected = o.orders_rejected.max(sums.orders_rejected);
        if rejected > 0 {
            out.push(Finding::RejectedOversell { orders: rejected });
        }
    }
    out
}

/// The report in words, for a person: a line per product with both sides'
/// numbers and its findings, then the overall answer. `--json` prints the
/// same report as JSON lines instead.
pub fn summary(report: &[ProductDrift]) -> String {
    use std::fmt::Write as _;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let width = report
        .iter()
        .map(|p| p.product_id.len())
        .max()
        .unwrap_or(0)
        .max("product".len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:<5}  {:>10}  {:>10}  {:>10}  {:>6}",
        "product", "state", "gate sold", "origin", "in outbox", "drift"
    );
    for p in report {
        let _ = writeln!(
            out,
            "{:<width$}  {:<5}  {:>10}  {:>10}  {:>10}  {:>6}",
            p.product_id,
            if p.ok { "ok" } else { "DRIFT" },
            opt(p
                .gate_sold
                .zip(p.gate_stock_total)
                .map(|(s, t)| format!("{s}/{t}"))),
            opt(p.origin_sold.map(|s| s.to_string())),
            opt(p.gate_backlog_units.map(|u| u.to_string())),
            p.drift_units
        );
        for why in &p.problems {
            let _ = writeln!(out, "{:<width$}  - {why}", "");
        }
    }
    let bad = report.iter().filter(|p| !p.ok).count();
    let _ = match (report.len(), bad) {
        (0, _) => writeln!(out, "No products to compare: the origin knows none yet."),
        (n, 0) => writeln!(
            out,
            "All {n} products agree: every unit sold at the gate is at the origin or on its way."
        ),
        (n, b) => writeln!(
            out,
            "{b} of {n} products disagree (exit 2); the lines above say how."
        ),
    };
    out
}

/// Whether the findings are a healthy state. A product the gate knows and
/// the origin has not heard of is fine while nothing is sold; a product the
/// origin knows and the gate does not is not.
pub fn healthy(findings: &[Finding], gate: Option<&GateStats>) -> bool {
    findings.iter().all(|f| match f {
        Finding::OriginUnknown => gate.is_some_and(|g| g.sold == 0),
        _ => false,
    })
}

/// Refuses a gate URL the admin token must not travel to: anything but
/// https, except plain http to this machine (loopback), for local runs.
fn check_gate_url(gate_url: &str) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(gate_url).with_context(|| format!("gate URL {gate_url}"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => bail!(
            "refusing plain http to {gate_url}: the admin token would cross the network in the clear; use https"
        ),
        other => bail!("the gate URL must be https, not {other}"),
    }
}

/// The HTTP client reconcile reads the gate with: rustls with the public
/// roots, plus `ca` (a PEM file) for a gate behind a private CA.
pub fn client(gate_url: &str, ca: Option<&std::path::Path>) -> anyhow::Result<reqwest::Client> {
    check_gate_url(gate_url)?;
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
    if let Some(path) = ca {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let cert = reqwest::Certificate::from_pem(&pem)
            .with_context(|| format!("{} is not a PEM certificate", path.display()))?;
        builder = builder.add_root_certificate(cert);
    }
    builder.build().context("building the HTTP client")
}

pub async fn reconcile(
    db: &Db,
    http: &reqwest::Client,
    gate_url: &str,
    admin_token: &str,
    products: &[String],
) -> anyhow::Result<Vec<ProductDrift>> {
    let base = gate_url.trim_end_matches('/');
    let ids = if products.is_empty() {
        db.product_ids().await?
    } else {
        products.to_vec()
    };
    let mut report = Vec::new();
    for id in ids {
        let url = format!("{base}/admin/products/{id}/stats");
        let resp = http
            .get(&url)
            .bearer_auth(admin_token)
            .send()
            .await
            .with_context(|| format!("fetching {url}"))?;
        let gate: Option<GateStats> = match resp.status() {
            s if s.is_success() => Some(
                resp.json()
                    .await
                    .with_context(|| format!("reading the gate's stats of {id}"))?,
            ),
            StatusCode::NOT_FOUND => None,
            StatusCode::UNAUTHORIZED => {
                bail!("the gate refused the admin token (401) at {url}")
            }
            s => {
                let body = resp.text().await.unwrap_or_default();
                bail!("the gate answered {s} for {url}: {body}")
            }
        };
        let origin = match db.product(&id).await? {
            Some(p) => {
                let sums = db.order_sums(&id).await?;
                Some((p, sums))
            }
            None => None,
        };
        let findings = findings(gate.as_ref(), origin.as_ref().map(|(p, s)| (p, *s)));
        let drift_units = findings
            .iter()
            .find_map(|f| match f {
                Finding::Drift { units } => Some(*units),
                _ => None,
            })
            .unwrap_or(0);
        report.push(ProductDrift {
            product_id: id,
            gate_stock_total: gate.as_ref().map(|g| g.stock_total),
            gate_sold: gate.as_ref().map(|g| g.sold),
            gate_backlog_units: gate.as_ref().map(|g| g.outbox.backlog_units),
            gate_backlog: gate.as_ref().map(|g| g.outbox.backlog),
            origin_stock_total: origin.as_ref().map(|(o, _)| o.stock_total),
            origin_sold: origin.as_ref().map(|(o, _)| o.sold),
            origin_orders_rejected: origin.as_ref().map(|(o, _)| o.orders_rejected),
            drift_units,
            ok: healthy(&findings, gate.as_ref()),
            problems: findings.iter().map(Finding::describe).collect(),
            findings,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_wire::{CounterStats, OutboxStats, RoomStats, SaleState};

    fn gate(sold: u64, backlog_units: i64) -> GateStats {
        GateStats {
            product_id: "p".into(),
            state: SaleState::Open,
            stock_total: 10,
            available: 10 - sold,
            held: 0,
            sold,
            live_holds: 0,
            tombstones: 0,
            buyers: 0,
            outbox: OutboxStats {
                backlog: backlog_units.unsigned_abs(),
                backlog_units,
                acked_seq: 0,
                attempts: 0,
                retry_at_ms: 0,
                last_error: None,
                last_success_ms: None,
                refused: 0,
            },
            next_deadline_ms: None,
            room: RoomStats {
                admit_per_s: 0,
                reported: 0,
                admitted: 0,
                waiting: 0,
                advancing: true,
                rejoins_uncounted: 0,
                pow_mode: "off".into(),
                pow_level: None,
                pow_infinite_queue: false,
                joins_per_s: 0,
                pow_required: 0,
                pow_infinite_queued: 0,
            },
            snapshots: 0,
            work: Default::default(),
            counters: CounterStats {
                reserve: Default::default(),
                confirm: Default::default(),
                cancel: Default::default(),
                holds_expired: 0,
            },
            escrow: None,
        }
    }

    fn origin(sold: i64, units_accepted: i64, orders_rejected: i64) -> (Product, OrderSums) {
        (
            Product {
                id: "p".into(),
                stock_total: 10,
                sold,
                orders_accepted: sold,
                orders_rejected,
                orders_voided: 0,
                stock_seq: 1,
            },
            OrderSums {
                units_accepted,
                orders_rejected,
            },
        )
    }

    #[test]
    fn findings_and_health() {
        let cases = [
            (Some(gate(3, 1)), Some(origin(2, 2, 0)), vec![], true),
            // A void waiting in the outbox: the gate sold 1, the origin 2.
            (Some(gate(1, -1)), Some(origin(2, 2, 0)), vec![], true),
            (
                Some(gate(3, 0)),
                Some(origin(2, 2, 0)),
                vec![Finding::Drift { units: 1 }],
                false,
            ),
            (Some(gate(0, 0)), None, vec![Finding::OriginUnknown], true),
            (
                Some(gate(1, 0)),
                None,
                vec![Finding::OriginUnknown, Finding::Drift { units: 1 }],
                false,
            ),
            (
                None,
                Some(origin(2, 2, 0)),
                vec![Finding::GateUnknown, Finding::Drift { units: -2 }],
                false,
            ),
            (
                Some(gate(3, 0)),
                Some(origin(3, 2, 1)),
                vec![
                    Finding::OriginSoldMismatch {
                        sold: 3,
                        units_accepted: 2,
                    },
                    Finding::RejectedOversell { orders: 1 },
                ],
                false,
            ),
        ];
        for (g, o, want, ok) in cases {
            let got = findings(g.as_ref(), o.as_ref().map(|(p, s)| (p, *s)));
            assert_eq!(got, want);
            assert_eq!(healthy(&got, g.as_ref()), ok, "{want:?}");
        }
    }

    fn drift(id: &str, g: Option<GateStats>, o: Option<(Product, OrderSums)>) -> ProductDrift {
        let found = findings(g.as_ref(), o.as_ref().map(|(p, s)| (p, *s)));
        ProductDrift {
            product_id: id.into(),
            gate_stock_total: g.as_ref().map(|g| g.stock_total),
            gate_sold: g.as_ref().map(|g| g.sold),
            gate_backlog_units: g.as_ref().map(|g| g.outbox.backlog_units),
            gate_backlog: g.as_ref().map(|g| g.outbox.backlog),
            origin_stock_total: o.as_ref().map(|(p, _)| p.stock_total),
            origin_sold: o.as_ref().map(|(p, _)| p.sold),
            origin_orders_rejected: o.as_ref().map(|(p, _)| p.orders_rejected),
            drift_units: found
                .iter()
                .find_map(|f| match f {
                    Finding::Drift { units } => Some(*units),
                    _ => None,
                })
                .unwrap_or(0),
            ok: healthy(&found, g.as_ref()),
            problems: found.iter().map(Finding::describe).collect(),
            findings: found,
        }
    }

    #[test]
    fn the_summary_says_each_products_numbers_and_what_is_wrong() {
        let report = [
            drift("tee", Some(gate(3, 1)), Some(origin(2, 2, 0))),
            drift("mug-long-name", Some(gate(3, 0)), Some(origin(2, 2, 0))),
            drift("gone", None, Some(origin(2, 2, 0))),
        ];
        let text = summary(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "product        state   gate sold      origin   in outbox   drift",
                "tee            ok           3/10           2           1       0",
                "mug-long-name  DRIFT        3/10           2           0       1",
                "               - 1 units sold at the gate are neither at the origin nor in the outbox",
                "gone           DRIFT           -           2           -      -2",
                "               - the gate does not know this product",
                "               - -2 units sold at the gate are neither at the origin nor in the outbox",
                "2 of 3 products disagree (exit 2); the lines above say how.",
            ],
            "{text}"
        );
        let fine = summary(&report[..1]);
        assert!(
            fine.ends_with("All 1 products agree: every unit sold at the gate is at the origin or on its way.\n"),
            "{fine}"
        );
        assert_eq!(
            summary(&[]).trim(),
            "product  state   gate sold      origin   in outbox   drift\nNo products to compare: the origin knows none yet."
        );
    }

    #[test]
    fn the_admin_token_only_travels_encrypted_or_locally() {
        for ok in [
            "https://gate.example",
            "http://127.0.0.1:8787",
            "http://localhost:8787",
            "http://[::1]:8787",
        ] {
            assert!(check_gate_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://gate.example",
            "http://10.0.0.5",
            "ftp://gate",
            "not a url",
        ] {
            assert!(check_gate_url(bad).is_err(), "{bad}");
        }
    }
}
