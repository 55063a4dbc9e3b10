//! The Worker's fetch handler: the edge in front of every product.

use std::cell::RefCell;

use futures_util::StreamExt;
use worker::{event, Context, Env, Headers, Method, Request, RequestInit, Response};

use flashgate_wire::signing::{self, Presented};
use serde_json::json;

use crate::api::{self, ApiRoute, Command, Incoming, Route, BODY_BYTES_MAX};
use crate::auth;
use crate::problem::Problem;
use crate::read_cache::{CachedRead, ReadCache};
use crate::reply::Reply;
use crate::settings::Settings;
use crate::time::rfc3339;
use crate::wasm::{config, http};

thread_local! {
    // An isolate is single-threaded: requests interleave only at awaits,
    // and no borrow of this cell spans one.
    static PRODUCT_CACHE: RefCell<ReadCache> = RefCell::new(ReadCache::default());
}

fn read_response(read: &CachedRead) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", &read.content_type)?;
    headers.set("cache-control", "public, max-age=1")?;
    Ok(Response::from_bytes(read.body.clone())?
        .with_status(read.status)
        .with_headers(headers))
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
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
async fn read_body(req: &mut Request) -> worker::Result<Result<Vec<u8>, Problem>> {
    let declared = req
        .headers()
        .get("content-length")?
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_BYTES_MAX as u64) {
        return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
    }
    if declared == Some(0) || matches!(req.method(), Method::Get | Method::Head) {
        return Ok(Ok(Vec::new()));
    }
    if declared.is_some() {
        // The declared length is within the limit, and the runtime holds a
        // body to its declared length, so it can be read in one piece.
        let body = req.bytes().await?;
        if body.len() > BODY_BYTES_MAX {
            return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
        }
        return Ok(Ok(body));
    }
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

async fn handle(mut req: Request, env: &Env) -> worker::Result<Response> {
    let method = req.method().to_string();
    let path = req.path();
    let route = match api::route(&method, &path) {
        Ok(Route::Api(route)) => route,
        Ok(Route::Page) => {
            let payment_url = env
                .var("DEMO_PAYMENT_URL")
                .map(|v| v.to_string())
                .unwrap_or_default();
            return html_response(crate::page::html(&payment_url));
        }
        Ok(Route::OpenApi) => return static_response(crate::OPENAPI_JSON, "application/json"),
        Ok(Route::Session) => {
            return match config::settings(env) {
                Ok(settings) => session(&settings, req.inner().url().starts_with("https:")),
                Err(e) => http::problem(Problem::misconfigured(e.to_string())),
            }
        }
        Err(p) => return http::problem(p),
    };
    let settings = match config::settings(env) {
        Ok(s) => s,
        Err(e) => return http::problem(Problem::misconfigured(e.to_string())),
    };
    let body = match read_body(&mut req).await? {
        Ok(b) => b,
        Err(p) => return http::problem(p),
    };
    let url = req.inner().url();
    let path_and_query = api::path_and_query(&url);
    let headers = req.headers();
    let header = |name: &str| headers.get(name).ok().flatten();
    let (content_type, idempotency_key, authorization, cookie) = (
        header("content-type"),
        header("idempotency-key"),
        header("authorization"),
        header("cookie"),
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
        signature: Presented {
            kid: kid.as_deref(),
            timestamp: timestamp.as_deref(),
            signature: signature.as_deref(),
        },
        body: &body,
    };
    let is_read = matches!(route, ApiRoute::GetProduct(_));
    let product_id = route.product_id().to_string();
    let now_ms = worker::Date::now().as_millis();
    let cmd = match api::parse(&incoming, route, &settings, now_ms) {
        Ok(c) => c,
        Err(p) => return http::problem(p),
    };

    if is_read {
        let hit = PRODUCT_CACHE.with_borrow(|c| c.get(&product_id, now_ms).map(read_response));
        if let Some(hit) = hit {
            return hit;
        }
    }
    let mut resp = forward(env, &product_id, &cmd).await?;
    if !is_read || !ReadCache::cacheable(resp.status_code()) {
        return Ok(resp);
    }
    let read = CachedRead {
        fetched_at_ms: now_ms,
        status: resp.status_code(),
        content_type: resp
            .headers()
            .get("content-type")?
            .unwrap_or_else(|| "application/json".into()),
        body: resp.bytes().await?,
    };
    let out = read_response(&read);
    PRODUCT_CACHE.with_borrow_mut(|c| c.insert(&product_id, read));
    out
}

/// Sends a command to its product's object: one object per product, which
/// serialises every decision about its stock.
async fn forward(env: &Env, product_id: &str, cmd: &Command) -> worker::Result<Response> {
    let stub = env
        .durable_object("PRODUCT_GATE")?
        .id_from_name(product_id)?
        .get_stub()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(serde_json::to_string(cmd)?.into()));
    let internal = Request::new_with_init("https://product-gate/command", &init)?;
    stub.fetch_with_request(internal).await
}
