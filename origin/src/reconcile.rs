//! Reconciliation: compares each product's gate stats with the origin's
//! totals and orders, and reports drift.
//!
//! For a product, `drift_units = gate.sold - origin.units_accepted -
//! gate.outbox.backlog_units`: every unit the gate sold is either stored at
//! the origin or still waiting in the outbox. Once the outbox has drained,
//! drift must be zero. The origin's own `sold` must also equal the units of
//! its accepted orders, and no order may be `rejected_oversell`.
//!
//! The gate's stats are read as the wire crate's `GateStats`, the type the
//! gate writes them with. A gate that refuses the admin token or fails is an
//! error, not a finding: reconcile cannot judge drift without its numbers.

use anyhow::{bail, Context};
use flashgate_wire::GateStats;
use reqwest::StatusCode;
use serde::Serialize;

use crate::db::{Db, Product};

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
    pub gate_backlog_units: Option<u64>,
    pub origin_stock_total: Option<i64>,
    pub origin_sold: Option<i64>,
    pub origin_units_accepted: Option<i64>,
    pub origin_orders_rejected: Option<i64>,
    pub drift_units: i64,
    pub ok: bool,
    pub findings: Vec<Finding>,
    /// The findings in words.
    pub problems: Vec<String>,
}

/// What reconcile finds for one product, from the two sides' numbers.
pub fn findings(gate: Option<&GateStats>, origin: Option<&Product>) -> Vec<Finding> {
    let mut out = Vec::new();
    if gate.is_none() {
        out.push(Finding::GateUnknown);
    }
    if origin.is_none() {
        out.push(Finding::OriginUnknown);
    }
    let gate_sold = gate.map_or(0, |g| g.sold as i64);
    let backlog = gate.map_or(0, |g| g.outbox.backlog_units as i64);
    let accepted = origin.map_or(0, |o| o.units_accepted);
    let drift = gate_sold - accepted - backlog;
    if drift != 0 {
        out.push(Finding::Drift { units: drift });
    }
    if let Some(o) = origin {
        if o.sold != o.units_accepted {
            out.push(Finding::OriginSoldMismatch {
                sold: o.sold,
                units_accepted: o.units_accepted,
            });
        }
        if o.orders_rejected > 0 {
            out.push(Finding::RejectedOversell {
                orders: o.orders_rejected,
            });
        }
    }
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

/// Refuses a plain-http gate URL. The admin token travels with every
/// request, so it must not cross a network in the clear.
fn check_gate_url(gate_url: &str) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(gate_url).with_context(|| format!("gate URL {gate_url}"))?;
    match url.scheme() {
        "https" | "http" => Ok(()),
        other => bail!("the gate URL must be http(s), not {other}"),
    }
}

pub async fn reconcile(
    db: &Db,
    gate_url: &str,
    admin_token: &str,
    products: &[String],
) -> anyhow::Result<Vec<ProductDrift>> {
    check_gate_url(gate_url)?;
    let base = gate_url.trim_end_matches('/');
    let ids = if products.is_empty() {
        db.product_ids().await?
    } else {
        products.to_vec()
    };
    let http = reqwest::Client::new();
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
        let origin = db.product(&id).await?;
        let findings = findings(gate.as_ref(), origin.as_ref());
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
            origin_stock_total: origin.as_ref().map(|o| o.stock_total),
            origin_sold: origin.as_ref().map(|o| o.sold),
            origin_units_accepted: origin.as_ref().map(|o| o.units_accepted),
            origin_orders_rejected: origin.as_ref().map(|o| o.orders_rejected),
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
    use flashgate_wire::{CounterStats, OutboxStats, SaleState};

    fn gate(sold: u64, backlog_units: u64) -> GateStats {
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
                backlog: backlog_units,
                backlog_units,
                acked_seq: 0,
                attempts: 0,
                retry_at_ms: 0,
                last_error: None,
                last_success_ms: None,
                rejected_oversell: 0,
            },
            next_deadline_ms: None,
            counters: CounterStats {
                reserve: Default::default(),
                confirm: Default::default(),
                cancel: Default::default(),
                holds_expired: 0,
            },
        }
    }

    fn origin(sold: i64, units_accepted: i64, orders_rejected: i64) -> Product {
        Product {
            id: "p".into(),
            stock_total: 10,
            sold,
            orders_accepted: units_accepted,
            units_accepted,
            orders_rejected,
        }
    }

    #[test]
    fn findings_and_health() {
        let cases = [
            (Some(gate(3, 1)), Some(origin(2, 2, 0)), vec![], true),
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
                Some(gate(2, 0)),
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
            let got = findings(g.as_ref(), o.as_ref());
            assert_eq!(got, want);
            assert_eq!(healthy(&got, g.as_ref()), ok, "{want:?}");
        }
    }

    #[test]
    fn only_http_gates() {
        assert!(check_gate_url("ftp://gate").is_err());
        assert!(check_gate_url("not a url").is_err());
        assert!(check_gate_url("https://gate.example").is_ok());
    }
}
