//! The reads the edge serves itself beyond its objects: the list of
//! products, a product's drift (the gate's stats beside the origin's
//! totals) and a page of its orders at the origin. The shell fetches; this
//! decides what is asked, and what the answer comes to.

use std::rc::Rc;

use serde_json::{json, Value};

use crate::edge::cache::Known;
use crate::edge::routes::OrdersQuery;
use crate::limits::LISTED_FRESH_MS;
use crate::protocol;
use crate::settings::Settings;

/// The catalog's newest ids, as last read, and when.
#[derive(Default)]
pub struct ListedIds {
    read: Option<(u64, Rc<Vec<String>>)>,
}

impl ListedIds {
    /// The ids, if read less than `LISTED_FRESH_MS` ago.
    pub fn fresh(&self, now_ms: u64) -> Option<Rc<Vec<String>>> {
        self.read
            .as_ref()
            .filter(|(at, _)| now_ms.saturating_sub(*at) < LISTED_FRESH_MS)
            .map(|(_, ids)| ids.clone())
    }

    /// The ids as read at `now_ms`.
    pub fn store(&mut self, now_ms: u64, ids: Rc<Vec<String>>) {
        self.read = Some((now_ms, ids));
    }
}

/// The list's body: each product the edge knows, as `GET
/// /api/products/{id}` answers it, if it is open or scheduled (`all`:
/// whatever its state); one the edge could not read is left out.
pub fn listing(known: impl IntoIterator<Item = Option<Known>>, all: bool) -> Vec<u8> {
    let mut body = b"{\"products\":[".to_vec();
    let mut first = true;
    for known in known.into_iter().flatten() {
        if let Known::Product {
            body: product,
            snapshot,
        } = known
        {
            if all || protocol::listed(snapshot.state) {
                if !first {
                    body.push(b',');
                }
                body.extend_from_slice(&product);
                first = false;
            }
        }
    }
    body.extend_from_slice(b"]}");
    body
}

/// A read of the origin: its URL and the gate's read token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginRead<'a> {
    pub url: String,
    pub token: &'a str,
}

/// How to read `path` at the origin, or why the gate cannot.
fn origin_read<'a>(settings: &'a Settings, path: &str) -> Result<OriginRead<'a>, String> {
    let f = settings
        .forwarding
        .as_ref()
        .ok_or("no origin is configured (ORIGIN_URL)")?;
    let token = f
        .read_token
        .as_deref()
        .ok_or("the gate has no read token for the origin (ORIGIN_READ_TOKEN)")?;
    Ok(OriginRead {
        url: format!("{}{path}", f.origin_url),
        token,
    })
}

/// The read of a product's totals at the origin.
pub fn totals_read<'a>(settings: &'a Settings, product_id: &str) -> Result<OriginRead<'a>, String> {
    origin_read(settings, &format!("/v1/products/{product_id}"))
}

/// The read of a page of a product's orders at the origin. The id's form
/// and the query's digits were checked, so they go into the URL as they
/// are.
pub fn orders_read<'a>(
    settings: &'a Settings,
    product_id: &str,
    q: OrdersQuery,
) -> Result<OriginRead<'a>, String> {
    let mut path = format!("/v1/orders?product_id={product_id}&limit={}", q.limit);
    if let Some(after) = q.after {
        path.push_str(&format!("&after={after}"));
    }
    origin_read(settings, &path)
}

/// What the origin's status says of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginAnswer {
    /// Read the body.
    Body,
    /// The origin has not heard of the product: zero totals.
    Zero,
    /// Why there is nothing to read.
    Failed(String),
}

/// A totals read's answer by its status.
pub fn totals_answer(status: u16) -> OriginAnswer {
    match status {
        200 => OriginAnswer::Body,
        404 => OriginAnswer::Zero,
        status => OriginAnswer::Failed(format!("the origin answered {status}")),
    }
}

/// An orders read's answer by its status.
pub fn orders_answer(status: u16) -> OriginAnswer {
    match status {
        200 => OriginAnswer::Body,
        status => OriginAnswer::Failed(format!("the origin answered {status}")),
    }
}

/// The orders page the console gets: the origin's page, or, when it
/// cannot be read, an empty one and `origin_error`, as the drift says it.
pub fn orders_body(page: Result<Value, String>) -> Value {
    match page {
        Ok(page) => json!({
            "orders": page.get("orders").cloned().unwrap_or_else(|| json!([])),
            "next_after": page.get("next_after").cloned().unwrap_or(Value::Null),
            "origin_error": null,
        }),
        Err(e) => json!({ "orders": [], "next_after": null, "origin_error": e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::room::tests::snapshot;
    use crate::settings::tests::{env, settings};
    use flashgate_wire::SaleState;

    #[test]
    fn the_list_holds_what_is_on_sale_unless_all_is_asked() {
        let product = |state, body: &str| {
            let mut s = snapshot(1, false, None);
            s.state = state;
            Some(Known::Product {
                snapshot: Rc::new(s),
                body: Rc::new(body.as_bytes().to_vec()),
            })
        };
        let known = || {
            vec![
                product(SaleState::Open, "1"),
                None,
                Some(Known::Unknown),
                product(SaleState::Closed, "2"),
                product(SaleState::Scheduled, "3"),
            ]
        };
        assert_eq!(listing(known(), false), b"{\"products\":[1,3]}");
        assert_eq!(listing(known(), true), b"{\"products\":[1,2,3]}");
        assert_eq!(listing(Vec::new(), true), b"{\"products\":[]}");
    }

    #[test]
    fn the_ids_are_read_again_after_a_while() {
        let mut ids = ListedIds::default();
        assert!(ids.fresh(0).is_none());
        ids.store(1_000, Rc::new(vec!["p1".into()]));
        assert_eq!(ids.fresh(1_000 + LISTED_FRESH_MS - 1).unwrap()[0], "p1");
        assert!(ids.fresh(1_000 + LISTED_FRESH_MS).is_none());
    }

    #[test]
    fn the_origin_is_read_with_the_read_token_or_the_reason_is_said() {
        let none = settings();
        assert!(totals_read(&none, "p1").unwrap_err().contains("ORIGIN_URL"));
        let forward = (
            "FORWARD_KEYS",
            "f1:2c1d9befc4dc4bc649c063185b8c422931c1ce69cd7dbd39ea76cfa8a6419998",
        );
        let origin = ("ORIGIN_URL", "https://o.example");
        let tokenless = Settings::from_env(env(&[origin, forward])).unwrap();
        assert!(totals_read(&tokenless, "p1")
            .unwrap_err()
            .contains("ORIGIN_READ_TOKEN"));
        let s = Settings::from_env(env(&[origin, forward, ("ORIGIN_READ_TOKEN", "rt")])).unwrap();
        assert_eq!(
            totals_read(&s, "p1").unwrap(),
            OriginRead {
                url: "https://o.example/v1/products/p1".into(),
                token: "rt",
            }
        );
        let q = OrdersQuery {
            limit: 50,
            after: Some(9),
        };
        assert_eq!(
            orders_read(&s, "p1", q).unwrap().url,
            "https://o.example/v1/orders?product_id=p1&limit=50&after=9"
        );
        assert_eq!(totals_answer(404), OriginAnswer::Zero);
        assert_eq!(
            orders_answer(404),
            OriginAnswer::Failed("the origin answered 404".into())
        );
    }

    #[test]
    fn an_unreadable_orders_page_is_empty_and_says_why() {
        let body = orders_body(Err("the origin answered 500".into()));
        assert_eq!(body["orders"], json!([]));
        assert_eq!(body["origin_error"], "the origin answered 500");
        let body = orders_body(Ok(json!({"orders": [1], "next_after": 4})));
        assert_eq!(
            (body["orders"].clone(), body["next_after"].clone()),
            (json!([1]), json!(4))
        );
        assert!(body["origin_error"].is_null());
    }
}
