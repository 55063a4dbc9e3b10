//! The admin's and the shop's reads that the edge serves itself: the list
//! of products, a product's drift, a page of its orders at the origin, and
//! its history from its objects, each fetched as `edge::admin` and
//! `edge::history` say.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use worker::worker_sys::web_sys;
use worker::{Delay, Env, Headers, Request, Response};

use crate::edge::admin::{self, ListedIds, OriginAnswer, OriginRead};
use crate::edge::history;
use crate::edge::routes::OrdersQuery;
use crate::edge::shards::target_at;
use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::protocol::{Command, HistoryAnswer};
use crate::settings::Settings;
use crate::wasm::edge::objects::{catalog_stub, forward, lookup};
use crate::wasm::edge::respond::product;
use crate::wasm::edge::{now_ms, unavailable};
use crate::wasm::http;

thread_local! {
    static LISTED: RefCell<ListedIds> = RefCell::new(ListedIds::default());
}

/// `GET /api/products`: the newest registered products that are open or
/// scheduled, each read through the edge cache (as `GET
/// /api/products/{id}` answers it); with `all` (`GET /admin/products`,
/// the console's list), whatever their state.
pub async fn list_products(env: &Env, all: bool) -> worker::Result<web_sys::Response> {
    let now = now_ms();
    let ids = match LISTED.with_borrow(|l| l.fresh(now)) {
        Some(ids) => ids,
        None => {
            let fetched = async {
                let mut resp = catalog_stub(env)?
                    .fetch_with_str("https://catalog/list")
                    .await?;
                resp.json::<Vec<String>>().await
            };
            match fetched.await {
                Ok(ids) => {
                    let ids = Rc::new(ids);
                    LISTED.with_borrow_mut(|l| l.store(now, ids.clone()));
                    ids
                }
                Err(e) => {
                    worker::console_error!("flashgate edge: the catalog is unreachable: {e}");
                    return http::problem(unavailable());
                }
            }
        }
    };
    let known = futures_util::future::join_all(ids.iter().map(|id| lookup(env, id))).await;
    product(&admin::listing(known, all))
}

/// `GET /admin/products/{id}/drift`: the gate's stats from the object,
/// the origin's totals with the shop's read token, and the drift.
pub async fn drift_check(
    env: &Env,
    settings: &Settings,
    product_id: &str,
    cmd: &Command,
) -> worker::Result<web_sys::Response> {
    match drift(env, settings, product_id, cmd).await? {
        Ok(value) => http::respond(&Reply::ok(200, value)),
        Err(resp) => Ok(resp),
    }
}

/// The drift's body (`views::drift`), or the response that says why there
/// is none (the object's own refusal, or its absence).
async fn drift(
    env: &Env,
    settings: &Settings,
    product_id: &str,
    cmd: &Command,
) -> worker::Result<Result<serde_json::Value, web_sys::Response>> {
    let mut resp = match forward(env, product_id, cmd).await {
        Ok(r) => r,
        Err(_) => return Ok(Err(http::problem(unavailable())?)),
    };
    if resp.status_code() != 200 {
        return Ok(Err(resp.into()));
    }
    let stats: flashgate_wire::GateStats = match resp.json().await {
        Ok(s) => s,
        Err(e) => {
            worker::console_error!("flashgate edge: unreadable stats: {e}");
            return Ok(Err(http::problem(Problem::internal())?));
        }
    };
    let origin = match admin::totals_read(settings, product_id) {
        Ok(read) => origin_totals(&read).await,
        Err(e) => Err(e),
    };
    Ok(Ok(crate::http::views::drift(&stats, origin)))
}

/// `GET /admin/products/{id}/orders`: a page of the product's orders at the
/// origin, read with the gate's read token (`admin::orders_body`).
pub async fn orders_page(
    settings: &Settings,
    product_id: &str,
    q: OrdersQuery,
) -> worker::Result<web_sys::Response> {
    let read = async {
        let read = admin::orders_read(settings, product_id, q)?;
        let mut resp = origin_get(&read).await?;
        match admin::orders_answer(resp.status_code()) {
            OriginAnswer::Body | OriginAnswer::Zero => resp
                .json::<serde_json::Value>()
                .await
                .map_err(|e| format!("the origin's answer is unreadable: {e}")),
            OriginAnswer::Failed(e) => Err(e),
        }
    };
    http::respond(&Reply::ok(200, admin::orders_body(read.await)))
}

/// `GET /admin/products/{id}/history`: home's history, then each of its
/// stock shards', read at once and merged (`edge::history`). The form is
/// settled before any object is asked; a shard that does not answer makes
/// it 503, as a sum with a part missing would be wrong, not smaller.
pub async fn history(
    env: &Env,
    settings: &Settings,
    product_id: &str,
    accept: Option<&str>,
) -> worker::Result<web_sys::Response> {
    let format = match history::format(accept) {
        Ok(f) => f,
        Err(p) => return http::problem(p),
    };
    let cmd = Command::History {
        product_id: product_id.to_string(),
    };
    let mut resp = match forward(env, product_id, &cmd).await {
        Ok(r) => r,
        Err(_) => return http::problem(unavailable()),
    };
    if resp.status_code() != 200 {
        // Home's own refusal (an unknown product) is passed on.
        return Ok(resp.into());
    }
    let Ok(home) = resp.json::<HistoryAnswer>().await else {
        return http::problem(Problem::internal());
    };
    let shards = home.shards;
    let reads = (1..shards).map(|index| {
        let target = target_at(cmd.clone(), shards, index);
        async move {
            let mut resp = forward(env, &target.object, &target.command).await.ok()?;
            if resp.status_code() != 200 {
                return None;
            }
            resp.json::<HistoryAnswer>().await.ok()
        }
    });
    let mut answers = vec![home];
    for read in futures_util::future::join_all(reads).await {
        match read {
            Some(a) => answers.push(a),
            None => return http::problem(unavailable()),
        }
    }
    let objects = match history::histories(&answers) {
        Ok(o) => o,
        Err(e) => {
            worker::console_error!("flashgate edge: {e}");
            return http::problem(Problem::internal());
        }
    };
    // The drift as its own route answers it; `null` if it cannot be read.
    let stats = Command::Stats {
        product_id: product_id.to_string(),
    };
    let drift = drift(env, settings, product_id, &stats)
        .await?
        .unwrap_or(serde_json::Value::Null);
    let body = history::body(product_id, &objects, drift, format, now_ms());
    http::raw(
        200,
        &body,
        &[
            ("content-type", format.content_type()),
            ("cache-control", "no-store"),
        ],
    )
}

/// A GET to the origin with a bearer token, within `ORIGIN_TIMEOUT_MS`; the
/// error says why there is no answer.
async fn origin_get(read: &OriginRead<'_>) -> Result<Response, String> {
    let headers = Headers::new();
    headers
        .set("authorization", &format!("Bearer {}", read.token))
        .map_err(|e| e.to_string())?;
    let mut init = worker::RequestInit::new();
    init.with_headers(headers);
    let req = Request::new_with_init(&read.url, &init).map_err(|e| e.to_string())?;
    let fetcher = worker::Fetch::Request(req);
    let fetch = fetcher.send();
    let timeout = Delay::from(Duration::from_millis(crate::limits::ORIGIN_TIMEOUT_MS));
    // Bound to a name, not returned as the match itself: the future borrows
    // `fetcher`, which must outlive it.
    let answer = match futures_util::future::select(std::pin::pin!(fetch), std::pin::pin!(timeout))
        .await
    {
        futures_util::future::Either::Left((Ok(r), _)) => Ok(r),
        futures_util::future::Either::Left((Err(e), _)) => {
            Err(format!("the origin is unreachable: {e}"))
        }
        futures_util::future::Either::Right(_) => Err("the origin did not answer in time".into()),
    };
    answer
}

/// The origin's totals for a product, or why they could not be read.
async fn origin_totals(read: &OriginRead<'_>) -> Result<flashgate_wire::OriginTotals, String> {
    let mut resp = origin_get(read).await?;
    match admin::totals_answer(resp.status_code()) {
        OriginAnswer::Body => resp
            .json()
            .await
            .map_err(|e| format!("the origin's answer is unreadable: {e}")),
        OriginAnswer::Zero => Ok(flashgate_wire::OriginTotals {
            stock_total: 0,
            sold: 0,
        }),
        OriginAnswer::Failed(e) => Err(e),
    }
}
