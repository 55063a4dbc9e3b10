//! The Worker's fetch handler: the edge in front of every product.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use std::time::Duration;

use futures_util::StreamExt;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::{event, Context, Delay, Env, Headers, Request, Response};

use flashgate_wire::signing::{self, Presented};
use serde_json::json;

use crate::api::{self, Command, Incoming, Route, BODY_BYTES_MAX};
use crate::auth;
use crate::codes::ProblemCode;
use crate::edge_cache::{EdgeCache, Entry, Known, Snapshot};
use crate::problem::Problem;
use crate::rate_limit::{self, Limiter};
use crate::reply::Reply;
use crate::settings::Settings;
use crate::ticket::TICKET_HEADER;
use crate::time::rfc3339;
use crate::wasm::{config, http};

thread_local! {
    // An isolate is single-threaded: requests interleave only at awaits,
    // and no borrow of these cells spans one.
    static EDGE: RefCell<EdgeCache> = RefCell::new(EdgeCache::default());
    /// Snapshot fetches in flight: product id -> when it started.
    static REFRESHING: RefCell<HashMap<String, u64>> = RefCell::new(HashMap::new());
}

fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

fn unavailable() -> worker::Result<Response> {
    http::problem(Problem::unavailable(worker::js_sys::Math::random()))
}

/// What the edge answers: a response it built, or the object's, passed on
/// untouched (converting it to a `worker::Response` and back would copy its
/// status, headers and body through wasm for nothing).
enum Answer {
    Built(Response),
    Object(web_sys::Response),
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
    let answer = match handle(req, &env).await {
        Ok(answer) => answer,
        Err(e) => {
            worker::console_error!("flashgate edge: {e}");
            Answer::Built(http::problem(Problem::internal())?)
        }
    };
    Ok(match answer {
        Answer::Built(resp) => resp.into(),
        Answer::Object(resp) => resp,
    })
}

/// Reads at most `BODY_BYTES_MAX + 1` bytes, so an oversized body is refused
/// without being read whole.
async fn read_body(
    req: web_sys::Request,
    method: &str,
    headers: &Headers,
) -> worker::Result<Result<Vec<u8>, Problem>> {
    let declared = headers
        .get("content-length")?
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
        let buffer = JsFuture::from(req.array_buffer()?).await?;
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
        body.extend_from_slice(&chunk?);
        if body.len() > BODY_BYTES_MAX {
            return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
        }
    }
    Ok(Ok(body))
}

fn html_response(body: String) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "text/html; charset=utf-8")?;
    headers.set("cache-control", "no-cache")?;
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers))
}

fn static_response(body: &'static str, content_type: &str) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", content_type)?;
    headers.set("cache-control", "no-cache")?;
    Ok(Response::from_bytes(body.as_bytes().to_vec())?.with_headers(headers))
}

fn random_u64() -> u64 {
    let hi = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

/// `POST /api/session`: an anonymous buyer and its token, in the body and
/// in an HttpOnly cookie, when dev sessions are on.
fn session(settings: &Settings, secure: bool) -> worker::Result<Response> {
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
    let mut resp = http::respond(Reply::ok(201, body))?;
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        auth::BUYER_COOKIE,
        s.token,
        auth::SESSION_TTL_S,
        if secure { "; Secure" } else { "" }
    );
    resp.headers_mut().set("set-cookie", &cookie)?;
    Ok(resp)
}

async fn handle(req: web_sys::Request, env: &Env) -> worker::Result<Answer> {
    let method = req.method();
    let url = req.url();
    let path_and_query = api::path_and_query(&url);
    let path = api::path(path_and_query);
    let headers = Headers(req.headers());
    let route = match api::route(&method, path) {
        Ok(Route::Page) => {
            let payment_url = env
                .var("DEMO_PAYMENT_URL")
                .map(|v| v.to_string())
                .unwrap_or_default();
            return html_response(crate::page::html(&payment_url)).map(Answer::Built);
        }
        Ok(Route::OpenApi) => {
            return static_response(crate::OPENAPI_JSON, "application/json").map(Answer::Built)
        }
        Ok(route) => route,
        Err(p) => return http::problem(p).map(Answer::Built),
    };
    let settings = match config::settings(env) {
        Ok(s) => s,
        Err(e) => return http::problem(Problem::misconfigured(e.to_string())).map(Answer::Built),
    };
    // Every API request meets the client's limit first, so a flood is
    // turned away before anything else is read or verified.
    let ip = rate_limit::ip_key(headers.get("cf-connecting-ip")?.as_deref());
    if let Some(refused) = limit(env, &settings, Limiter::Ip, &ip).await? {
        return Ok(Answer::Built(refused));
    }
    let now = now_ms();
    let route = match route {
        Route::Api(route) => route,
        Route::Session => return session(&settings, url.starts_with("https:")).map(Answer::Built),
        Route::Queue { product_id, join } => {
            return queue(&headers, env, &settings, &product_id, join, now)
                .await
                .map(Answer::Built);
        }
        Route::Page | Route::OpenApi => {
            return http::problem(Problem::internal()).map(Answer::Built)
        }
    };
    let body = match read_body(req, &method, &headers).await? {
        Ok(b) => b,
        Err(p) => return http::problem(p).map(Answer::Built),
    };
    let header = |name: &str| headers.get(name).ok().flatten();
    let (content_type, idempotency_key, authorization, cookie, ticket) = (
        header("content-type"),
        header("idempotency-key"),
        header("authorization"),
        header("cookie"),
        header(TICKET_HEADER),
    );
    let (kid, timestamp, signature) = (
        header(signing::KEY_ID_HEADER),
        header(signing::TIMESTAMP_HEADER),
        header(signing::SIGNATURE_HEADER),
    );
    let incoming = Incoming {
        method: &method,
        path_and_query,
        content_type: content_type.as_deref(),
        idempotency_key: idempotency_key.as_deref(),
        authorization: authorization.as_deref(),
        cookie: cookie.as_deref(),
        ticket: ticket.as_deref(),
        signature: Presented {
            kid: kid.as_deref(),
            timestamp: timestamp.as_deref(),
            signature: signature.as_deref(),
        },
        body: &body,
    };
    let product_id = route.product_id().to_string();
    let admin = route.is_admin();
    let cmd = match api::parse(&incoming, route, &settings, now) {
        Ok(c) => c,
        Err(p) => return http::problem(p).map(Answer::Built),
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
            return Ok(Answer::Built(refused));
        }
    }

    match &cmd {
        Command::GetProduct { .. } => match lookup(env, &product_id).await {
            Some(Known::Product { body, .. }) => return product_response(&body).map(Answer::Built),
            Some(Known::Unknown) => {
                return http::problem(Problem::unknown_product(&product_id)).map(Answer::Built)
            }
            None => {}
        },
        Command::Reserve { buyer, ticket, .. } => {
            if let Some(Known::Product { snapshot, .. }) = lookup(env, &product_id).await {
                if let Some(p) = snapshot.reserve_answer(buyer, ticket.as_ref(), now_ms()) {
                    return http::problem(p).map(Answer::Built);
                }
            }
        }
        _ => {}
    }
    let resp = match forward_raw(env, &product_id, &cmd).await {
        Ok(resp) => resp,
        Err(e) => {
            worker::console_error!("flashgate edge: product {product_id} unreachable: {e}");
            return unavailable().map(Answer::Built);
        }
    };
    if matches!(cmd, Command::Reserve { .. }) && resp.status() == 409 {
        // The object refused what the snapshot let through (sold out, most
        // likely): the next request fetches a new one.
        EDGE.with_borrow_mut(|c| c.invalidate(&product_id));
    }
    Ok(Answer::Object(resp))
}

/// Asks a rate limiting binding; a refusal is the 429 to send.
async fn limit(
    env: &Env,
    settings: &Settings,
    limiter: Limiter,
    key: &str,
) -> worker::Result<Option<Response>> {
    let binding = match env.rate_limiter(limiter.binding()) {
        Ok(b) => b,
        Err(e) => {
            return http::problem(Problem::misconfigured(format!(
                "the rate limiting binding {} is missing: {e}",
                limiter.binding()
            )))
            .map(Some)
        }
    };
    if binding.limit(key.to_string()).await?.success {
        Ok(None)
    } else {
        let policy = settings.rate_limits.of(limiter);
        http::problem(rate_limit::limited(limiter, policy)).map(Some)
    }
}

fn product_response(body: &[u8]) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set("cache-control", "public, max-age=1")?;
    Ok(Response::from_bytes(body.to_vec())?.with_headers(headers))
}

/// What the edge knows of the product, at most about a second old: a fresh
/// snapshot, or one fetched now. One fetch per product per isolate at a
/// time: a request that finds one in flight waits for it on its own timer
/// (a request may not await another request's I/O), and fetches itself if
/// it does not land in time. `None` if the object could not be asked.
async fn lookup(env: &Env, product_id: &str) -> Option<Known> {
    let fresh = || EDGE.with_borrow(|c| c.fresh(product_id, now_ms()).map(|e| e.known.clone()));
    if let Some(known) = fresh() {
        return Some(known);
    }
    let started = REFRESHING.with_borrow(|m| m.get(product_id).copied());
    if let Some(started) = started {
        while now_ms().saturating_sub(started) < REFRESH_WAIT_MAX_MS {
            Delay::from(Duration::from_millis(REFRESH_POLL_MS)).await;
            if let Some(known) = fresh() {
                return Some(known);
            }
            if REFRESHING.with_borrow(|m| m.get(product_id) != Some(&started)) {
                break;
            }
        }
    }
    refresh(env, product_id).await;
    fresh()
}

/// How long a request waits for another's snapshot fetch, and how often it
/// looks.
const REFRESH_WAIT_MAX_MS: u64 = 2_000;
const REFRESH_POLL_MS: u64 = 5;

/// Fetches a snapshot, reporting the tickets this isolate issued since the
/// last one. A report that does not arrive goes with the next fetch.
async fn refresh(env: &Env, product_id: &str) {
    let started = now_ms();
    REFRESHING.with_borrow_mut(|m| m.insert(product_id.to_string(), started));
    let report = EDGE.with_borrow_mut(|c| c.take_report(product_id));
    let cmd = Command::Snapshot {
        product_id: product_id.to_string(),
        arrivals: report.clone(),
    };
    let known = match forward(env, product_id, &cmd).await {
        Ok(mut resp) => match (resp.status_code(), resp.bytes().await) {
            (200, Ok(bytes)) => Snapshot::parse(&bytes).map(|snapshot| Known::Product {
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
    EDGE.with_borrow_mut(|c| match known {
        Some(known) => c.insert(
            product_id,
            Entry {
                fetched_at_ms: now_ms(),
                known,
            },
        ),
        None => c.return_report(product_id, report),
    });
    REFRESHING.with_borrow_mut(|m| {
        if m.get(product_id) == Some(&started) {
            m.remove(product_id);
        }
    });
}

/// `POST` (join) and `GET` (standing) of a product's waiting room, both
/// answered here: tickets are signed by the edge, and standings read from
/// the snapshot, so a crowd in the room costs its object about one request
/// per isolate per second.
async fn queue(
    headers: &Headers,
    env: &Env,
    settings: &Settings,
    product_id: &str,
    join: bool,
    now: u64,
) -> worker::Result<Response> {
    let header = |name: &str| headers.get(name).ok().flatten();
    let buyer = match auth::buyer(
        settings,
        header("authorization").as_deref(),
        header("cookie").as_deref(),
        now,
    ) {
        Ok(b) => b,
        Err(p) => return http::problem(p),
    };
    if let Some(refused) = limit(env, settings, Limiter::Buyer, &buyer).await? {
        return Ok(refused);
    }
    let snapshot = match lookup(env, product_id).await {
        Some(Known::Product { snapshot, .. }) => snapshot,
        Some(Known::Unknown) => return http::problem(Problem::unknown_product(product_id)),
        None => return unavailable(),
    };
    let now = now_ms();
    if join {
        let q = match snapshot.may_join(now) {
            Ok(q) => q,
            Err(p) => return http::problem(p),
        };
        let (text, claims) = settings
            .ticket_key
            .issue(product_id, &buyer, now, q.ticket_ttl_ms);
        let ticket = claims.ticket();
        EDGE.with_borrow_mut(|c| c.issued(product_id, &ticket, q.opens_at_ms));
        let standing = snapshot.standing(q, &ticket, now);
        let body = json!({
            "ticket": text,
            "buyer_id": buyer,
            "arrived_at_ms": claims.t,
            "expires_at": rfc3339(claims.e),
            "expires_at_ms": claims.e,
            "admitted": standing.admitted,
            "position": standing.position,
            "eta_s": standing.eta_s,
        });
        return http::respond(Reply::ok(201, body));
    }
    let Some(text) = header(TICKET_HEADER) else {
        return http::problem(Problem::new(
            ProblemCode::TicketRequired,
            "send the ticket from joining the waiting room as Flashgate-Ticket",
        ));
    };
    let claims = match settings.ticket_key.verify(&text, product_id, &buyer, now) {
        Ok(c) => c,
        Err(e) => return http::problem(e.problem()),
    };
    let Some(q) = &snapshot.queue else {
        return http::problem(Problem::new(
            ProblemCode::NoWaitingRoom,
            "this product has no waiting room: reserve directly",
        ));
    };
    let standing = snapshot.standing(q, &claims.ticket(), now);
    let body = json!({
        "admitted": standing.admitted,
        "position": standing.position,
        "eta_s": standing.eta_s,
        "state": snapshot.state,
        "available": snapshot.available,
        "expires_at": rfc3339(claims.e),
        "expires_at_ms": claims.e,
    });
    http::respond(Reply::ok(200, body))
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
    let stub: worker::worker_sys::DurableObject = env
        .durable_object("PRODUCT_GATE")?
        .id_from_name(product_id)?
        .get_stub()?
        .into_rpc();
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    match cmd.to_header() {
        Some(header) => {
            let headers = web_sys::Headers::new()?;
            headers.set(api::COMMAND_HEADER, &header)?;
            init.set_headers(&headers);
        }
        None => init.set_body(&JsValue::from_str(&serde_json::to_string(cmd)?)),
    }
    let internal = web_sys::Request::new_with_str_and_init("https://product-gate/command", &init)?;
    let promise = stub.fetch_with_request(&internal)?;
    Ok(JsFuture::from(promise)
        .await?
        .dyn_into::<web_sys::Response>()?)
}
