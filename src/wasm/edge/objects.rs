//! The edge's calls to objects and bindings: the catalog (which ids exist,
//! and listing a new one), a product's snapshot through the isolate's
//! cache, a command to a product's object, and the rate limiters.

use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either};

use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::{Delay, Env, Request, Response};

use crate::edge::cache::{Known, Lookup};
use crate::edge::catalog::Listing;
use crate::edge::pipeline::{LimitAnswer, Registration};
use crate::edge::rate_limit::Limiter;
use crate::http::problem::Problem;
use crate::limits::{REFRESH_POLL_MS, SNAPSHOT_RECHECK_MS};
use crate::protocol::snapshot::Snapshot;
use crate::protocol::{CatalogPage, Command};
use crate::wasm::edge::request;
use crate::wasm::edge::{now_ms, unavailable, CATALOG, EDGE};
use crate::wasm::rpc;

/// Whether `product_id` names a product, from the isolate's view of the
/// catalog, read again (one request at a time, at most once per
/// `CATALOG_FRESH_MS`) when it does not hold the id. `Err` is the problem
/// to answer: an unknown id is answered here, and its object is never
/// instantiated; an unreachable catalog is `unavailable`.
pub async fn listed(env: &Env, product_id: &str) -> Result<(), Problem> {
    let lookup = || CATALOG.with_borrow(|c| c.lookup(product_id, now_ms()));
    loop {
        match lookup() {
            Listing::Listed => return Ok(()),
            Listing::Unlisted => return Err(Problem::unknown_product(product_id)),
            // Another request's read is in flight: it may list this id.
            Listing::Wait => Delay::from(Duration::from_millis(REFRESH_POLL_MS)).await,
            Listing::Refresh => break,
        }
    }
    let after = CATALOG.with_borrow_mut(|c| c.begin_refresh(now_ms()));
    let read = async {
        let mut resp = catalog_stub(env)?
            .fetch_with_str(&format!("https://catalog/ids?after={after}"))
            .await?;
        resp.json::<CatalogPage>().await
    };
    match read.await {
        Ok(page) => CATALOG.with_borrow_mut(|c| c.end_refresh(page)),
        Err(e) => {
            worker::console_error!("flashgate edge: the catalog is unreachable: {e}");
            CATALOG.with_borrow_mut(|c| c.fail_refresh());
            return Err(unavailable());
        }
    }
    match lookup() {
        Listing::Listed => Ok(()),
        _ => Err(Problem::unknown_product(product_id)),
    }
}

/// The catalog's object: one for the whole gate.
pub fn catalog_stub(env: &Env) -> worker::Result<worker::Stub> {
    env.durable_object("CATALOG")?
        .id_from_name("catalog")?
        .get_stub()
}

/// Lists a product in the catalog: `Refused` with the catalog's answer, to
/// pass on.
pub async fn register(
    env: &Env,
    product_id: &str,
) -> worker::Result<(Registration, Option<web_sys::Response>)> {
    let mut init = worker::RequestInit::new();
    init.with_method(worker::Method::Post)
        .with_body(Some(JsValue::from_str(product_id)));
    let req = Request::new_with_init("https://catalog/register", &init)?;
    match catalog_stub(env)?.fetch_with_request(req).await {
        Ok(resp) if resp.status_code() == 200 => {
            CATALOG.with_borrow_mut(|c| c.insert(product_id));
            Ok((Registration::Listed, None))
        }
        Ok(resp) => Ok((Registration::Refused, Some(resp.into()))),
        Err(e) => {
            worker::console_error!("flashgate edge: the catalog is unreachable: {e}");
            Ok((Registration::Unreachable, None))
        }
    }
}

/// Asks a rate limiting binding to count one request of `key`; with `read`
/// (a request whose body `request::one_piece` reads, which the caller
/// checked), within the limit its body is read in the same wait, and `Some`
/// is the read's result for the `Step::ReadBody` the pipeline asks next
/// (`Step::Limit`'s `then_body`). No body is read over the limit.
///
/// The read in the count's wait is one await and one crossing fewer than
/// the two apart. Measured by `node --experimental-websocket
/// bench/profile.mjs soldout 6`, the builds apart and together alternated
/// five times: a median of 120.3 to 115.4 us of workerd CPU per sold-out
/// answer (118.4-122.3 and 113.6-122.9); a durable reserve's own cost
/// hides it (`reserve`, two pairs, within their spread).
pub async fn limit(
    env: &Env,
    limiter: Limiter,
    key: &str,
    read: Option<&web_sys::Request>,
) -> worker::Result<(LimitAnswer, Option<Result<Vec<u8>, Problem>>)> {
    let Some(promise) = rate_limit_call(env, limiter.binding(), key, read) else {
        worker::console_error!(
            "flashgate: the rate limiting binding {} is missing",
            limiter.binding()
        );
        return Ok((LimitAnswer::Missing, None));
    };
    let answer = JsFuture::from(promise).await?;
    Ok(if answer.is_null() {
        (LimitAnswer::Within, Some(request::in_one_piece(None)))
    } else if answer.is_falsy() {
        (LimitAnswer::Over, None)
    } else if read.is_none() {
        (LimitAnswer::Within, None)
    } else {
        (
            LimitAnswer::Within,
            Some(request::in_one_piece(Some(answer))),
        )
    })
}

#[wasm_bindgen(inline_js = "
export function rate_limit_call(env, binding, key, req) {
  const limiter = env[binding];
  if (!limiter || typeof limiter.limit !== 'function') return undefined;
  return limiter.limit({ key }).then((outcome) => {
    if (outcome.success !== true) return false;
    return req === undefined ? true : req.arrayBuffer().then((body) => body, () => null);
  });
}")]
extern "C" {
    /// Asks the platform's rate limiter `binding` to count one request of
    /// `key`, in one call across the boundary (workers-rs' binding takes
    /// several: the binding's lookup and type check, and serde conversions
    /// of the options and the outcome); `None` if the binding is missing.
    /// The promise resolves to `false` over the limit; within it, `true`
    /// without `req`, else `req`'s body as an `ArrayBuffer`, or `null` if
    /// it broke off.
    fn rate_limit_call(
        env: &Env,
        binding: &str,
        key: &str,
        req: Option<&web_sys::Request>,
    ) -> Option<js_sys::Promise>;
}

/// What the edge knows of the product, at most about a second old: a fresh
/// snapshot, or one fetched now. One fetch per product per isolate at a
/// time: a request that finds one in flight waits for it, woken when a
/// fetch of the product ends (`landed`) or after `SNAPSHOT_RECHECK_MS` on its
/// own timer, should the fetching request have been cancelled; it fetches
/// itself if none lands in time. `None` if the object could not be asked.
/// Only for an id the catalog lists (`listed`, which each route checks
/// once), so that no made-up id reaches an object.
pub async fn lookup(env: &Env, product_id: &str) -> Option<Known> {
    let mut next = EDGE.with_borrow(|c| c.lookup(product_id, now_ms()));
    // This request's own promise of the next landing: made in its own
    // context, so that the fetching request only resolves it.
    let mut landing: Option<js_sys::Promise> = None;
    loop {
        match next {
            Lookup::Known(known) => return Some(known),
            Lookup::Fetch => break,
            Lookup::Wait { started_ms } => {
                let promise = landing.get_or_insert_with(|| snapshot_landing(product_id));
                let woken = JsFuture::from(promise.clone());
                let recheck = Delay::from(Duration::from_millis(SNAPSHOT_RECHECK_MS));
                if let Either::Left(_) = select(pin!(woken), pin!(recheck)).await {
                    landing = None;
                }
                next = EDGE.with_borrow(|c| c.waited(product_id, started_ms, now_ms()));
            }
        }
    }
    refresh(env, product_id).await;
    EDGE.with_borrow(|c| c.fresh(product_id, now_ms()).map(|e| e.known.clone()))
}

/// Fetches a snapshot, reporting the tickets this isolate issued since the
/// last one. A report that does not arrive goes with the next fetch.
async fn refresh(env: &Env, product_id: &str) {
    let started = now_ms();
    let report = EDGE.with_borrow_mut(|c| c.begin_refresh(product_id, started));
    let cmd = Command::Sync {
        product_id: product_id.to_string(),
        arrivals: report.clone(),
    };
    let known = match forward(env, product_id, &cmd).await {
        Ok(mut resp) => match (resp.status_code(), resp.bytes().await) {
            (200, Ok(bytes)) => Snapshot::parse(&bytes, started).map(|snapshot| Known::Product {
                body: Rc::new(snapshot.product.to_string().into_bytes()),
                snapshot: Rc::new(snapshot),
            }),
            (404, Ok(_)) => Some(Known::Unknown),
            _ => None,
        },
        Err(e) => {
            worker::console_error!("flashgate edge: snapshot of {product_id}: {e}");
            None
        }
    };
    EDGE.with_borrow_mut(|c| c.end_refresh(product_id, started, known, report, now_ms()));
    snapshot_landed(product_id);
}

#[wasm_bindgen(inline_js = "
const landings = new Map();
export function snapshot_landing(product) {
  return new Promise((resolve) => {
    let waiting = landings.get(product);
    if (waiting === undefined) {
      waiting = [];
      landings.set(product, waiting);
    }
    waiting.push(resolve);
  });
}
export function snapshot_landed(product) {
  const waiting = landings.get(product);
  if (waiting === undefined) return;
  landings.delete(product);
  for (const resolve of waiting) resolve();
}")]
extern "C" {
    /// A promise, made in the calling request's context, that resolves
    /// when a fetch of `product`'s snapshot ends. A crowd that waits for a
    /// sharded product's fetch (home drains its shards first) used to look
    /// again every 5 ms each; now each waiter wakes once. Its resolver
    /// stays until the next landing: a waiter makes one a landing at most.
    fn snapshot_landing(product: &str) -> js_sys::Promise;

    /// Wakes every request waiting for a fetch of `product`'s snapshot.
    fn snapshot_landed(product: &str);
}

/// Sends a command to its product's object: one object per product, which
/// serialises every decision about its stock.
pub async fn forward(env: &Env, product_id: &str, cmd: &Command) -> worker::Result<Response> {
    rpc::send(env, product_id, cmd).await.map(Response::from)
}
