//! Reconciliation: compares each product's gate stats with the origin's
//! totals and orders, and reports drift.
//!
//! For a product, `drift_units = gate.sold - origin.units_accepted -
//! gate.outbox.backlog_units`: every unit the gate sold is either stored at
//! the origin or still waiting in the outbox. Once the outbox has drained,
//! drift must be zero. The origin's own `sold` must also equal the units of
//! its accepted orders, and no order may be `rejected_oversell`.

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

use crate::db::Db;

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
    pub problems: Vec<String>,
}

pub async fn reconcile(
    db: &Db,
    gate_url: &str,
    admin_token: &str,
    products: &[String],
) -> anyhow::Result<Vec<ProductDrift>> {
    let ids = if products.is_empty() {
        db.product_ids().await?
    } else {
        products.to_vec()
    };
    let http = reqwest::Client::new();
    let mut report = Vec::new();
    for id in ids {
        let url = format!(
            "{}/admin/products/{id}/stats",
            gate_url.trim_end_matches('/')
        );
        let resp = http
            .get(&url)
            .bearer_auth(admin_token)
            .send()
            .await
            .with_context(|| format!("fetching {url}"))?;
        let gate: Option<Value> = if resp.status().is_success() {
            Some(resp.json().await?)
        } else {
            None
        };
        let origin = db.product(&id).await?;
        let u = |v: &Value, path: &[&str]| {
            path.iter()
                .try_fold(v, |v, k| v.get(k))
                .and_then(Value::as_u64)
        };
        let gate_sold = gate.as_ref().and_then(|g| u(g, &["sold"]));
        let gate_backlog = gate
            .as_ref()
            .and_then(|g| u(g, &["outbox", "backlog_units"]));
        let mut problems = Vec::new();
        if gate.is_none() {
            problems.push("the gate does not know this product".to_string());
        }
        if origin.is_none() {
            problems.push("the origin has no orders for this product".to_string());
        }
        let accepted = origin.as_ref().map_or(0, |o| o.units_accepted);
        let drift = gate_sold.unwrap_or(0) as i64 - accepted - gate_backlog.unwrap_or(0) as i64;
        if drift != 0 {
            problems.push(format!(
                "{drift} units sold at the gate are neither at the origin nor in the outbox"
            ));
        }
        if let Some(o) = &origin {
            if o.sold != o.units_accepted {
                problems.push(format!(
                    "origin sold {} but its accepted orders hold {}",
                    o.sold, o.units_accepted
                ));
            }
            if o.orders_rejected > 0 {
                problems.push(format!(
                    "{} orders were rejected as oversell",
                    o.orders_rejected
                ));
            }
        }
        // A product the gate knows and the origin has not heard of yet is
        // fine while nothing is sold.
        let unheard = origin.is_none() && gate_sold == Some(0);
        report.push(ProductDrift {
            product_id: id,
            gate_stock_total: gate.as_ref().and_then(|g| u(g, &["stock_total"])),
            gate_sold,
            gate_backlog_units: gate_backlog,
            origin_stock_total: origin.as_ref().map(|o| o.stock_total),
            origin_sold: origin.as_ref().map(|o| o.sold),
            origin_units_accepted: origin.as_ref().map(|o| o.units_accepted),
            origin_orders_rejected: origin.as_ref().map(|o| o.orders_rejected),
            drift_units: drift,
            ok: problems.is_empty() || (unheard && problems.len() == 1),
            problems,
        });
    }
    Ok(report)
}
