//! The Worker's fetch handler: the edge in front of every product.

pub mod request;

use std::cell::RefCell;
use std::rc::Rc;

use std::time::Duration;

use futures_util::StreamExt;
use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::{event, Context, Delay, Env, Headers, Request, Response};

use flashgate_wire::signing::Presented;
use serde_json::json;

use crate::edge::auth;
use crate::edge::cache::{EdgeCache, Known, Lookup};
use crate::edge::catalog::{CatalogView, Listing};
use crate::edge::page::Lang;
use crate::edge::pow::{self, JoinAnswer};
use crate::edge::rate_limit::{self, Limiter};
use crate::edge::routes::{self, Incoming, Route};
use crate::edge::shards;
use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::http::time::rfc3339;
use crate::limits::{BODY_BYTES_MAX, LISTED_FRESH_MS, REFRESH_POLL_MS};
use crate::protocol::snapshot::Snapshot;
use crate::protocol::{self, CatalogPage, Command};
use crate::settings::Settings;
use crate::wasm::edge::request::{Field, Parts};
use crate::wasm::{config, http, random_bytes};

thread_local! {
    // An isolate is single-threaded: requests interleave only at awaits,
    // and no borrow of these cells spans one.
    static EDGE: RefCell<EdgeCache> = RefCell::new(EdgeCache::default());
    /// Which product ids exist, as read from the catalog.
    static CATALOG: RefCell<CatalogView> = RefCell::new(CatalogView::default());
}

/// Whether `product_id` names a product, from the isolate's view of the
/// catalog, read again (one request at a time, at most once per
/// `CATALOG_FRESH_MS`) when it does not hold the id. `Err` is the problem
/// to answer: an unknown id is answered here, and its object is never
/// instantiated; an unreachable catalog is `unavailable`.
async fn listed(env: &Env, product_id: &str) -> Result<(), Problem> {
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

fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

/// `unavailable`, with a jittered `Retry-After`, so a crowd that was
/// refused together does not come back together.
fn unavailable() -> Problem {
    Problem::unavailable(worker::js_sys::Math::random())
}

/// The edge's refusal. Every answer of the edge is the runtime's own
/// response: one it built (`http::respond`), or the object's, passed on
/// untouched (converting it to a `worker::Response` and back would copy its
/// status, headers and body through wasm for nothing).
fn refuse(p: Problem) -> worker::Result<web_sys::Response> {
    http::problem(p)
}

#[event(fetch)]
// The runtime's request as it is: workers-rs' `Request` would read its
// method, url, headers and `cf` into wasm up front, which most answers here
// never need.
async fn fetch(
    req: web_sys::Request,
    env: Env,
    _ctx: Context,
) -> worker::Result<web_sys::Response> {
    match handle(req, &env).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            worker::console_error!("flashgate edge: {e}");
            http::problem(Problem::internal())
        }
    }
}

/// Reads at most `BODY_BYTES_MAX + 1` bytes, so an oversized body is refused
/// without being read whole.
async fn read_body(
    req: web_sys::Request,
    method: &str,
    parts: &Parts,
) -> worker::Result<Result<Vec<u8>, Problem>> {
    let declared = parts
        .get(Field::ContentLength)
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_BYTES_MAX as u64) {
        return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
    }
    if declared == Some(0) || method == "GET" || method == "HEAD" {
        return Ok(Ok(Vec::new()));
    }
    if declared.is_some() {
        // The declared length is within the limit, and the runtime holds a
        // body to its declared length, so it can be read in one piece.
        let buffer = match JsFuture::from(req.array_buffer()?).await {
            Ok(buffer) => buffer,
            Err(_) => return Ok(Err(body_broken_off())),
        };
        let body = worker::js_sys::Uint8Array::new(&buffer).to_vec();
        if body.len() > BODY_BYTES_MAX {
            return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
        }
        return Ok(Ok(body));
    }
    // No declared length: read the stream, and stop past the limit.
    let mut req = Request::from(req);
    let mut body = Vec::new();
    let mut stream = match req.stream() {
        Ok(s) => s,
        // No body at all.
        Err(_) => return Ok(Ok(body)),
    };
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Ok(Err(body_broken_off()));
        };
        body.extend_from_slice(&chunk);
        if body.len() > BODY_BYTES_MAX {
            return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
        }
    }
    Ok(Ok(body))
}

/// A body that could not be read whole: the client broke off before its
/// declared length, or its framing was broken. The client's fault, so a
/// 4xx (it may never arrive), and nothing was decided.
fn body_broken_off() -> Problem {
    Problem::malformed_json("the body could not be read whole: it ended early or was broken off")
}

fn html_response(body: String, fields: &[(&str, String)]) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "text/html; charset=utf-8")?;
    headers.set("cache-control", "no-cache")?;
    headers.set("vary", "accept-language")?;
    for (name, value) in fields {
        headers.set(name, value)?;
    }
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers))
}

fn static_response(body: &'static str, content_type: &str) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", content_type)?;
    headers.set("cache-control", "no-cache")?;
    headers.set("x-content-type-options", "nosniff")?;
    Ok(Response::from_bytes(body.as_bytes().to_vec())?.with_headers(headers))
}

/// A file of `edge::assets`, as it is, cacheable for a year.
fn asset_response(asset: &crate::edge::assets::Asset) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", asset.content_type)?;
    headers.set("cache-control", crate::edge::assets::CACHE_CONTROL)?;
    headers.set("x-content-type-options", "nosniff")?;
    Ok(Response::from_bytes(asset.body.to_vec())?.with_headers(headers))
}

fn random_u64() -> u64 {
    let hi = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

/// `POST /api/session`: an anonymous buyer and its token, in the body and
/// in an HttpOnly cookie, when dev sessions are on.
fn session(settings: &Settings, secure: bool) -> worker::Result<web_sys::Response> {
    let now_ms = worker::Date::now().as_millis();
    let s = match auth::session(settings, now_ms, random_u64()) {
        Ok(s) => s,
        Err(p) => return http::problem(p),
    };
    let body = json!({
        "buyer_id": s.buyer_id,
        "token": s.token,
        "expires_at": rfc3339(s.expires_at_ms),
        "expires_at_ms": s.expires_at_ms,
    });
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        auth::buyer_cookie_name(secure),
        s.token,
        crate::limits::SESSION_TTL_S,
        if secure { "; Secure" } else { "" }
    );
    let mut reply = Reply::ok(201, body);
    reply.headers.push(("set-cookie", cookie));
    http::respond(&reply)
}

async fn handle(req: web_sys::Request, env: &Env) -> worker::Result<web_sys::Response> {
    let parts = Parts::read(&req);
    let (method, url) = (parts.method.as_str(), parts.url.as_str());
    let path_and_query = routes::path_and_query(url);
    let path = routes::path(path_and_query);
    let route = match routes::route(method, path) {
        Ok(Route::Page(page)) => {
            let payment_url = env
                .var("DEMO_PAYMENT_URL")
                .map(|v| v.to_string())
                .unwrap_or_default();
            let lang = Lang::from_accept_language(parts.get(Field::AcceptLanguage));
            return html_response(
                crate::edge::page::html(&page, lang, &payment_url),
                &crate::edge::page::security_fields(&page, &payment_url),
            )
            .map(Into::into);
        }
        Ok(Route::OpenApi) => {
            return static_response(crate::OPENAPI_JSON, "application/json").map(Into::into)
        }
        Ok(Route::Asset(asset)) => return asset_response(asset).map(Into::into),
        Ok(route) => route,
        Err(p) => return refuse(p),
    };
    let settings = match config::settings(env) {
        Ok(s) => s,
        // `config::settings` logged which setting, once.
        Err(_) => return refuse(Problem::misconfigured()),
    };
    // Every API request meets the client's limit first, so a flood is
    // turned away before anything else is read or verified.
    let ip = rate_limit::ip_key(parts.get(Field::ConnectingIp));
    if let Some(refused) = limit(env, &settings, Limiter::Ip, &ip).await? {
        return Ok(refused);
    }
    let now = now_ms();
    let route = match route {
        Route::Api(route) => route,
        Route::Session => return session(&settings, url.starts_with("https:")),
        Route::Queue { product_id, join } => {
            return queue(&parts, env, &settings, &product_id, join, now).await;
        }
        Route::QueueRecord { product_id } => {
            return queue_record(&parts, env, &settings, &product_id, now).await;
        }
        Route::QueueChallenge { product_id } => {
            return queue_challenge(&parts, env, &settings, &product_id, now).await;
        }
        Route::ListProducts => return list_products(env, false).await,
        Route::AdminListProducts => {
            if let Err(p) = auth::admin(&settings, parts.get(Field::Authorization)) {
                return refuse(p);
            }
            if let Some(refused) = limit(env, &settings, Limiter::Admin, &ip).await? {
                return Ok(refused);
            }
            return list_products(env, true).await;
        }
        Route::Live { product_id } => {
            return live(&parts, env, &settings, &product_id, &ip, now).await;
        }
        Route::Page(_) | Route::OpenApi | Route::Asset(_) => return refuse(Problem::internal()),
    };
    let body = match read_body(req, method, &parts).await? {
        Ok(b) => b,
        Err(p) => return refuse(p),
    };
    let incoming = Incoming {
        method,
        path_and_query,
        content_type: parts.get(Field::ContentType),
        idempotency_key: parts.get(Field::IdempotencyKey),
        authorization: parts.get(Field::Authorization),
        cookie: auth::buyer_cookie(parts.get(Field::Cookie), url.starts_with("https:")),
        ticket: parts.get(Field::Ticket),
        signature: Presented {
            kid: parts.get(Field::KeyId),
            timestamp: parts.get(Field::Timestamp),
            signature: parts.get(Field::Signature),
        },
        body: &body,
    };
    let product_id = route.product_id().to_string();
    let admin = route.is_admin();
    let drift = matches!(route, routes::ApiRoute::AdminDrift(_));
    let orders = matches!(route, routes::ApiRoute::AdminOrders(_));
    let cmd = match routes::parse(&incoming, route, &settings, now) {
        Ok(c) => c,
        Err(p) => return refuse(p),
    };
    // After the admin token was checked: a stranger's bad query is a 401.
    let orders_query = match orders.then(|| routes::orders_query(path_and_query)) {
        Some(Err(p)) => return refuse(p),
        Some(Ok(q)) => Some(q),
        None => None,
    };
    // Then the buyer's own limit (after the token proved who it is), or
    // the admin's.
    let second = match &cmd {
        Command::Reserve { buyer, .. }
        | Command::GetReservation { buyer, .. }
        | Command::Cancel { buyer, .. } => Some((Limiter::Buyer, buyer.as_str())),
        _ if admin => Some((Limiter::Admin, ip.as_str())),
        _ => None,
    };
    if let Some((limiter, key)) = second {
        if let Some(refused) = limit(env, &settings, limiter, key).await? {
            return Ok(refused);
        }
    }

    // Only a configure may name a product that does not exist yet (it
    // creates it); for the rest an unknown id ends here.
    if !matches!(cmd, Command::Configure { .. }) {
        if let Err(p) = listed(env, &product_id).await {
            return refuse(p);
        }
    }
    if let Some(q) = orders_query {
        return orders_page(&settings, &product_id, q).await;
    }
    // The product's stock shards, for the commands a shard keeps: they
    // are routed by the snapshot's count (`edge::shards`).
    let mut shards = 1;
    // A reserve's shard, once its keyed hash is computed.
    let mut shard = None;
    match &cmd {
        Command::GetProduct { .. } => match lookup(env, &product_id).await {
            Some(Known::Product { body, .. }) => return product_response(&body),
            Some(Known::Unknown) => return refuse(Problem::unknown_product(&product_id)),
            None => {}
        },
        Command::Reserve { buyer, ticket, .. } => match lookup(env, &product_id).await {
            Some(Known::Product { snapshot, .. }) => {
                shards = snapshot.shards;
                let index = shards::shard_of(&cmd, shards, &settings.shard_key);
                if let Some(p) = snapshot.reserve_answer(buyer, index, ticket.as_ref(), now_ms()) {
                    return refuse(p);
                }
                EDGE.with_borrow_mut(|c| c.routed(&product_id, index));
                shard = Some(index);
            }
            Some(Known::Unknown) => return refuse(Problem::unknown_product(&product_id)),
            // Without a snapshot the edge does not know the product's
            // shards, and a reserve sent to the wrong one would let a buyer
            // hold on two shards past the per-buyer limit.
            None => return refuse(unavailable()),
        },
        Command::GetReservation { .. }
        | Command::Confirm { .. }
        | Command::Cancel { .. }
        | Command::Void { .. } => match id_shard(env, &settings, &cmd, &product_id).await {
            Ok(n) => shards = n,
            Err(p) => return refuse(p),
        },
        // An update may create the product: it is listed first, so that a
        // product never exists unlisted (an id whose update then fails
        // lists nothing, see `catalog`).
        Command::Configure { .. } => {
            if let Some(refused) = register(env, &product_id).await? {
                return Ok(refused);
            }
        }
        Command::Stats { .. } if drift => {
            return drift_check(env, &settings, &product_id, &cmd).await
        }
        _ => {}
    }
    let is_reserve = matches!(cmd, Command::Reserve { .. });
    let target = match shard {
        Some(index) => shards::target_at(cmd, shards, index),
        None => shards::target(cmd, shards, &settings.shard_key),
    };
    let resp = match forward_raw(env, &target.object, &target.command).await {
        Ok(resp) => resp,
        Err(e) => {
            worker::console_error!("flashgate edge: product {product_id} unreachable: {e}");
            return refuse(unavailable());
        }
    };
    if is_reserve && resp.status() == 409 {
        // The object refused what the snapshot let through (sold out, most
        // likely): the next request fetches a new one.
        EDGE.with_borrow_mut(|c| c.invalidate(&product_id));
    }
    Ok(resp)
}

/// The stock shards of the product an id names, for its command; an id
/// on a shard that does not exist is `unknown_reservation` here, so that
/// made-up ids make no object. A snapshot older than
/// `SHARD_MISS_REFRESH_MS` is fetched anew first (the shard may have been
/// made since), and a shard this isolate routed a reserve to counts as
/// made.
async fn id_shard(
    env: &Env,
    settings: &Settings,
    cmd: &Command,
    product_id: &str,
) -> Result<u16, Problem> {
    let mut refreshed = false;
    loop {
        match lookup(env, product_id).await {
            Some(Known::Product { snapshot, .. }) => {
                let index = shards::shard_of(cmd, snapshot.shards, &settings.shard_key);
                let routed = EDGE.with_borrow(|c| c.routed_to(product_id));
                if shards::exists(snapshot.existing | routed, index) {
                    return Ok(snapshot.shards);
                }
                let age = now_ms().saturating_sub(snapshot.fetched_at_ms);
                if refreshed || age < crate::limits::SHARD_MISS_REFRESH_MS {
                    return Err(Problem::unknown_reservation());
                }
                EDGE.with_borrow_mut(|c| c.invalidate(product_id));
                refreshed = true;
            }
            // The catalog lists it, so the object decides: a snapshot that
            // said unknown may be from before a restart's load.
            Some(Known::Unknown) => return Ok(1),
            None => return Err(unavailable()),
        }
    }
}

/// `GET /api/products/{id}/live`: a viewer's socket, accepted by the
/// product's object. Anyone may watch (the pushes are the product's public
/// numbers); a buyer token, when sent, must be valid, and labels the socket.
/// An unknown product is refused here, from the edge cache.
async fn live(
    parts: &Parts,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    ip: &str,
    now: u64,
) -> worker::Result<web_sys::Response> {
    let upgrade = parts.get(Field::Upgrade).unwrap_or_default();
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return refuse(Problem::upgrade_required());
    }
    let buyer = match auth::viewer(
        settings,
        parts.get(Field::Authorization),
        auth::buyer_cookie(parts.get(Field::Cookie), parts.url.starts_with("https:")),
        now,
    ) {
        Ok(b) => b,
        Err(p) => return refuse(p),
    };
    if let Err(p) = listed(env, product_id).await {
        return refuse(p);
    }
    if let Some(Known::Unknown) = lookup(env, product_id).await {
        return refuse(Problem::unknown_product(product_id));
    }
    let cmd = Command::Watch {
        product_id: product_id.to_string(),
        buyer,
        client: rate_limit::client_tag(ip),
    };
    match forward_raw(env, product_id, &cmd).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            worker::console_error!("flashgate edge: product {product_id} unreachable: {e}");
            refuse(unavailable())
        }
    }
}

/// The catalog's object: one for the whole gate.
fn catalog_stub(env: &Env) -> worker::Result<worker::Stub> {
    env.durable_object("CATALOG")?
        .id_from_name("catalog")?
        .get_stub()
}

/// Lists a product in the catalog; a refusal is the problem to send.
async fn register(env: &Env, product_id: &str) -> worker::Result<Option<web_sys::Response>> {
    let mut init = worker::RequestInit::new();
    init.with_method(worker::Method::Post)
        .with_body(Some(JsValue::from_str(product_id)));
    let req = Request::new_with_init("https://catalog/register", &init)?;
    match catalog_stub(env)?.fetch_with_request(req).await {
        Ok(resp) if resp.status_code() == 200 => {
            CATALOG.with_borrow_mut(|c| c.insert(product_id));
            Ok(None)
        }
        Ok(resp) => Ok(Some(resp.into())),
        Err(e) => {
            worker::console_error!("flashgate edge: the catalog is unreachable: {e}");
            http::problem(unavailable()).map(Some)
        }
    }
}

thread_local! {
    /// The catalog's newest ids, as last read, and when.
    static LISTED: RefCell<Option<(u64, Rc<Vec<String>>)>> = const { RefCell::new(None) };
}

/// `GET /api/products`: the newest registered products that are open or
/// scheduled, each read through the edge cache (as `GET
/// /api/products/{id}` answers it); with `all` (`GET /admin/products`,
/// the console's list), whatever their state.
async fn list_products(env: &Env, all: bool) -> worker::Result<web_sys::Response> {
    let now = now_ms();
    let cached = LISTED.with_borrow(|l| {
        l.as_ref()
            .filter(|(at, _)| now.saturating_sub(*at) < LISTED_FRESH_MS)
            .map(|(_, ids)| ids.clone())
    });
    let ids = match cached {
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
                    LISTED.with_borrow_mut(|l| *l = Some((now, ids.clone())));
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
    product_response(&body)
}

/// `GET /admin/products/{id}/drift`: the gate's stats from the object,
/// the origin's totals with the shop's read token, and the drift.
async fn drift_check(
    env: &Env,
    settings: &Settings,
    product_id: &str,
    cmd: &Command,
) -> worker::Result<web_sys::Response> {
    let mut resp = match forward(env, product_id, cmd).await {
        Ok(r) => r,
        Err(_) => return http::problem(unavailable()),
    };
    if resp.status_code() != 200 {
        return Ok(resp.into());
    }
    let stats: flashgate_wire::GateStats = match resp.json().await {
        Ok(s) => s,
        Err(e) => {
            worker::console_error!("flashgate edge: unreadable stats: {e}");
            return http::problem(Problem::internal());
        }
    };
    let origin = match settings.forwarding.as_ref() {
        None => Err("no origin is configured (ORIGIN_URL)".to_string()),
        Some(f) => match f.read_token.as_deref() {
            None => Err("the gate has no read token for the origin (ORIGIN_READ_TOKEN)".into()),
            Some(token) => origin_totals(&f.origin_url, token, product_id).await,
        },
    };
    http::respond(&Reply::ok(200, crate::http::views::drift(&stats, origin)))
}

/// `GET /admin/products/{id}/orders`: a page of the product's orders at the
/// origin, read with the gate's read token; when they cannot be read, an
/// empty page and `origin_error`, as the drift says it.
async fn orders_page(
    settings: &Settings,
    product_id: &str,
    q: routes::OrdersQuery,
) -> worker::Result<web_sys::Response> {
    let read = async {
        let f = settings
            .forwarding
            .as_ref()
            .ok_or("no origin is configured (ORIGIN_URL)")?;
        let token = f
            .read_token
            .as_deref()
            .ok_or("the gate has no read token for the origin (ORIGIN_READ_TOKEN)")?;
        // The id's form and the query's digits were checked, so they go
        // into the URL as they are.
        let mut url = format!(
            "{}/v1/orders?product_id={product_id}&limit={}",
            f.origin_url, q.limit
        );
        if let Some(after) = q.after {
            url.push_str(&format!("&after={after}"));
        }
        let mut resp = origin_get(&url, token).await?;
        match resp.status_code() {
            200 => resp
                .json::<serde_json::Value>()
                .await
                .map_err(|e| format!("the origin's answer is unreadable: {e}")),
            status => Err(format!("the origin answered {status}")),
        }
    };
    let body = match read.await {
        Ok(page) => json!({
            "orders": page.get("orders").cloned().unwrap_or_else(|| json!([])),
            "next_after": page.get("next_after").cloned().unwrap_or(serde_json::Value::Null),
            "origin_error": null,
        }),
        Err(e) => json!({ "orders": [], "next_after": null, "origin_error": e.to_string() }),
    };
    http::respond(&Reply::ok(200, body))
}

/// A GET to the origin with a bearer token, within `ORIGIN_TIMEOUT_MS`; the
/// error says why there is no answer.
async fn origin_get(url: &str, token: &str) -> Result<Response, String> {
    let headers = Headers::new();
    headers
        .set("authorization", &format!("Bearer {token}"))
        .map_err(|e| e.to_string())?;
    let mut init = worker::RequestInit::new();
    init.with_headers(headers);
    let req = Request::new_with_init(url, &init).map_err(|e| e.to_string())?;
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
async fn origin_totals(
    origin_url: &str,
    token: &str,
    product_id: &str,
) -> Result<flashgate_wire::OriginTotals, String> {
    let url = format!("{origin_url}/v1/products/{product_id}");
    let mut resp = origin_get(&url, token).await?;
    match resp.status_code() {
        200 => resp
            .json()
            .await
            .map_err(|e| format!("the origin's answer is unreadable: {e}")),
        404 => Ok(flashgate_wire::OriginTotals {
            stock_total: 0,
            sold: 0,
        }),
        status => Err(format!("the origin answered {status}")),
    }
}

/// Asks a rate limiting binding; a refusal is the 429 to send.
async fn limit(
    env: &Env,
    settings: &Settings,
    limiter: Limiter,
    key: &str,
) -> worker::Result<Option<web_sys::Response>> {
    let Some(promise) = rate_limit_call(env, limiter.binding(), key) else {
        worker::console_error!(
            "flashgate: the rate limiting binding {} is missing",
            limiter.binding()
        );
        return http::problem(Problem::misconfigured()).map(Some);
    };
    if JsFuture::from(promise).await?.is_truthy() {
        Ok(None)
    } else {
        let policy = settings.rate_limits.of(limiter);
        http::problem(rate_limit::limited(limiter, policy)).map(Some)
    }
}

#[wasm_bindgen(inline_js = "
export function rate_limit_call(env, binding, key) {
  const limiter = env[binding];
  if (!limiter || typeof limiter.limit !== 'function') return undefined;
  return limiter.limit({ key }).then((outcome) => outcome.success === true);
}")]
extern "C" {
    /// Asks the platform's rate limiter `binding` to count one request of
    /// `key`, in one call across the boundary (workers-rs' binding takes
    /// several: the binding's lookup and type check, and serde conversions
    /// of the options and the outcome). The promise resolves to whether the
    /// request is within the limit; `None` if the binding is missing.
    fn rate_limit_call(env: &Env, binding: &str, key: &str) -> Option<js_sys::Promise>;
}

fn product_response(body: &[u8]) -> worker::Result<web_sys::Response> {
    http::raw(
        200,
        body,
        &[
            ("content-type", "application/json"),
            ("cache-control", "public, max-age=1"),
            ("x-content-type-options", "nosniff"),
        ],
    )
}

/// What the edge knows of the product, at most about a second old: a fresh
/// snapshot, or one fetched now. One fetch per product per isolate at a
/// time: a request that finds one in flight waits for it on its own timer
/// (a request may not await another request's I/O), and fetches itself if
/// it does not land in time. `None` if the object could not be asked.
/// Only for an id the catalog lists (`listed`, which each route checks
/// once), so that no made-up id reaches an object.
async fn lookup(env: &Env, product_id: &str) -> Option<Known> {
    let mut next = EDGE.with_borrow(|c| c.lookup(product_id, now_ms()));
    loop {
        match next {
            Lookup::Known(known) => return Some(known),
            Lookup::Fetch => break,
            Lookup::Wait { started_ms } => {
                Delay::from(Duration::from_millis(REFRESH_POLL_MS)).await;
                next = EDGE.with_borrow(|c| c.waited(product_id, started_ms, now_ms()));
            }
        }
    }
    sync(env, product_id).await;
    EDGE.with_borrow(|c| c.fresh(product_id, now_ms()).map(|e| e.known.clone()))
}

/// Fetches a snapshot, reporting the tickets this isolate issued since the
/// last one. A report that does not arrive goes with the next fetch.
async fn sync(env: &Env, product_id: &str) {
    let started = now_ms();
    let report = EDGE.with_borrow_mut(|c| c.begin_sync(product_id, started));
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
    EDGE.with_borrow_mut(|c| c.end_sync(product_id, started, known, report, now_ms()));
}

/// The snapshot the waiting room's routes answer from, or the problem:
/// an unknown product, or none to be had.
async fn room_snapshot(env: &Env, product_id: &str) -> Result<Rc<Snapshot>, Problem> {
    match lookup(env, product_id).await {
        Some(Known::Product { snapshot, .. }) => Ok(snapshot),
        Some(Known::Unknown) => Err(Problem::unknown_product(product_id)),
        None => Err(unavailable()),
    }
}

/// The buyer of a request to a product's waiting room, checked in the
/// order every edge answer is: the buyer's token, the buyer's rate limit,
/// and that the product exists (before any object is touched); `Err` is
/// the answer that refuses it.
async fn room_buyer(
    parts: &Parts,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    now: u64,
) -> worker::Result<Result<String, web_sys::Response>> {
    let buyer = match auth::buyer(
        settings,
        parts.get(Field::Authorization),
        auth::buyer_cookie(parts.get(Field::Cookie), parts.url.starts_with("https:")),
        now,
    ) {
        Ok(b) => b,
        Err(p) => return http::problem(p).map(Err),
    };
    if let Some(refused) = limit(env, settings, Limiter::Buyer, &buyer).await? {
        return Ok(Err(refused));
    }
    if let Err(p) = listed(env, product_id).await {
        return http::problem(p).map(Err);
    }
    Ok(Ok(buyer))
}

/// `POST` (join) and `GET` (standing) of a product's waiting room, both
/// answered here: tickets are signed by the edge, and standings read from
/// the snapshot, so a crowd in the room costs its object about one request
/// per isolate per second.
async fn queue(
    parts: &Parts,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    join: bool,
    now: u64,
) -> worker::Result<web_sys::Response> {
    let buyer = match room_buyer(parts, env, settings, product_id, now).await? {
        Ok(b) => b,
        Err(refused) => return Ok(refused),
    };
    let snapshot = match room_snapshot(env, product_id).await {
        Ok(s) => s,
        Err(p) => return http::problem(p),
    };
    let now = now_ms();
    if join {
        let q = match snapshot.may_join(now) {
            Ok(q) => q,
            Err(p) => return http::problem(p),
        };
        // The object draws the key in the event that sets the room up, so
        // a snapshot with a room and no key is one from before it did.
        let Some(lottery) = q.admission.lottery.key else {
            return http::problem(unavailable());
        };
        // The proof of work, when the room asks one: a join without a
        // valid solution gets a fresh challenge, or, in the infinite
        // queue, a ticket never admitted and never reported.
        let shadow =
            match settings
                .pow_key
                .join(q.pow, parts.get(Field::Pow), product_id, &buyer, now)
            {
                JoinAnswer::Ticket => false,
                JoinAnswer::Shadow => true,
                JoinAnswer::Challenge(why) => {
                    EDGE.with_borrow_mut(|c| c.pow_refused(product_id));
                    let level = q.pow.map_or(1, |p| p.level);
                    let challenge =
                        settings
                            .pow_key
                            .challenge(product_id, &buyer, level, &random_bytes(), now);
                    return http::problem(pow::required(&challenge, why));
                }
            };
        let (text, claims) =
            settings
                .ticket_key
                .issue(product_id, &buyer, &lottery.0, now, q.ticket_ttl_ms, shadow);
        let ticket = claims.ticket();
        EDGE.with_borrow_mut(|c| {
            if shadow {
                c.pow_shadowed(product_id);
            } else {
                c.issued(product_id, &ticket, q.opens_at_ms);
            }
        });
        let standing = EDGE
            .with_borrow(|c| snapshot.standing(q, &ticket, c.unreported(product_id).as_ref(), now));
        let body = json!({
            "ticket": text,
            "buyer_id": buyer,
            "arrived_at_ms": claims.t,
            "expires_at": rfc3339(claims.e),
            "expires_at_ms": claims.e,
            "admitted": standing.admitted,
            "position": standing.position,
            "eta_s": standing.eta_s,
            "available": standing.odds.available,
            "held": standing.odds.held,
            "ahead": standing.odds.ahead,
            "verdict": standing.odds.verdict.as_str(),
            "waiting_for_returns": standing.odds.waiting_for_returns,
        });
        return http::respond(&Reply::ok(201, body));
    }
    let Some(text) = parts.get(Field::Ticket) else {
        return http::problem(Problem::new(
            ProblemCode::TicketRequired,
            "send the ticket from joining the waiting room as Flashgate-Ticket",
        ));
    };
    let claims = match settings.ticket_key.verify(text, product_id, &buyer, now) {
        Ok(c) => c,
        Err(e) => return http::problem(e.problem()),
    };
    let Some(q) = &snapshot.queue else {
        return http::problem(Problem::new(
            ProblemCode::NoWaitingRoom,
            "this product has no waiting room: reserve directly",
        ));
    };
    let standing = EDGE.with_borrow(|c| {
        snapshot.standing(q, &claims.ticket(), c.unreported(product_id).as_ref(), now)
    });
    let body = json!({
        "admitted": standing.admitted,
        "position": standing.position,
        "eta_s": standing.eta_s,
        "state": snapshot.state,
        "available": standing.odds.available,
        "held": standing.odds.held,
        "ahead": standing.odds.ahead,
        "verdict": standing.odds.verdict.as_str(),
        "waiting_for_returns": standing.odds.waiting_for_returns,
        "expires_at": rfc3339(claims.e),
        "expires_at_ms": claims.e,
    });
    http::respond(&Reply::ok(200, body))
}

/// `GET` of a proof-of-work challenge for the buyer's join (`edge::pow`):
/// checked as a join is (buyer, then the room's state), at the level the
/// snapshot asks; nothing is kept of it.
async fn queue_challenge(
    parts: &Parts,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    now: u64,
) -> worker::Result<web_sys::Response> {
    let buyer = match room_buyer(parts, env, settings, product_id, now).await? {
        Ok(b) => b,
        Err(refused) => return Ok(refused),
    };
    let snapshot = match room_snapshot(env, product_id).await {
        Ok(s) => s,
        Err(p) => return http::problem(p),
    };
    let now = now_ms();
    let q = match snapshot.may_join(now) {
        Ok(q) => q,
        Err(p) => return http::problem(p),
    };
    let Some(pow) = q.pow else {
        return http::problem(Problem::new(
            ProblemCode::NoPow,
            "this waiting room asks no proof of work: join directly",
        ));
    };
    let challenge = settings
        .pow_key
        .challenge(product_id, &buyer, pow.level, &random_bytes(), now);
    let mut body = pow::challenge_json(&challenge);
    body["expected_tries"] = flashgate_wire::altcha::expected_tries(pow.level).into();
    let mut reply = Reply::ok(200, body);
    reply.headers.push(("cache-control", "no-store".into()));
    http::respond(&reply)
}

/// `GET` of a product's admission record, with the asking ticket's place
/// (`edge::record`): checked as a poll is (buyer, then ticket), answered
/// from the snapshot.
async fn queue_record(
    parts: &Parts,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    now: u64,
) -> worker::Result<web_sys::Response> {
    let buyer = match room_buyer(parts, env, settings, product_id, now).await? {
        Ok(b) => b,
        Err(refused) => return Ok(refused),
    };
    let Some(text) = parts.get(Field::Ticket) else {
        return http::problem(Problem::new(
            ProblemCode::TicketRequired,
            "send the ticket from joining the waiting room as Flashgate-Ticket",
        ));
    };
    let claims = match settings.ticket_key.verify(text, product_id, &buyer, now) {
        Ok(c) => c,
        Err(e) => return http::problem(e.problem()),
    };
    let snapshot = match room_snapshot(env, product_id).await {
        Ok(s) => s,
        Err(p) => return http::problem(p),
    };
    let Some(q) = &snapshot.queue else {
        return http::problem(Problem::new(
            ProblemCode::NoWaitingRoom,
            "this product has no waiting room: reserve directly",
        ));
    };
    let body = crate::edge::record::body(product_id, q, &claims, now_ms());
    http::respond(&Reply::ok(200, body))
}

/// Sends a command to its product's object: one object per product, which
/// serialises every decision about its stock.
async fn forward(env: &Env, product_id: &str, cmd: &Command) -> worker::Result<Response> {
    forward_raw(env, product_id, cmd).await.map(Response::from)
}

/// `forward`, with the object's response as the runtime gave it.
async fn forward_raw(
    env: &Env,
    product_id: &str,
    cmd: &Command,
) -> worker::Result<web_sys::Response> {
    let (header, body) = match cmd.to_header() {
        Some(header) => (Some(header), None),
        None => (None, Some(serde_json::to_string(cmd)?)),
    };
    let watch = matches!(cmd, Command::Watch { .. });
    let promise = send_command(
        env,
        "PRODUCT_GATE",
        product_id,
        protocol::COMMAND_HEADER,
        header,
        body,
        watch,
    )?;
    Ok(JsFuture::from(promise)
        .await?
        .dyn_into::<web_sys::Response>()?)
}

#[wasm_bindgen(inline_js = "
// Object ids by name: deriving one hashes the name, and an id (unlike a
// stub) is not tied to the request that made it. Bounded: cleared when full.
const ids = new Map();
const IDS_MAX = 10000;
export function send_command(env, binding, name, header, command, body, watch) {
  const key = binding + '/' + name;
  let id = ids.get(key);
  if (id === undefined) {
    if (ids.size >= IDS_MAX) ids.clear();
    id = env[binding].idFromName(name);
    ids.set(key, id);
  }
  const headers = new Headers();
  if (command !== undefined) headers.set(header, command);
  // A watch is a WebSocket upgrade, which is a GET without a body.
  if (watch) headers.set('upgrade', 'websocket');
  return env[binding].get(id).fetch('https://product-gate/command', {
    method: watch ? 'GET' : 'POST',
    headers,
    body,
  });
}")]
extern "C" {
    /// Sends a command to the named object in one call across the
    /// boundary (the id, the stub, the request and its fetch): the
    /// command as the `header` field when it fits, else as the body.
    #[wasm_bindgen(catch)]
    fn send_command(
        env: &Env,
        binding: &str,
        name: &str,
        header: &str,
        command: Option<String>,
        body: Option<String>,
        watch: bool,
    ) -> Result<js_sys::Promise, JsValue>;
}
