//! The Worker's fetch handler: the edge in front of every product.

use std::cell::RefCell;
use std::collections::HashMap;

use futures_util::StreamExt;
use worker::{event, Context, Env, Headers, Method, Request, RequestInit, Response};

use crate::api::{self, Incoming, Route, BODY_BYTES_MAX};
use crate::http;
use crate::problem::Problem;

const PAGE: &str = include_str!("../web/index.html");

/// Product reads are answered from this isolate's memory for up to this
/// long. Every buyer page polls its product; without this, a crowd watching
/// a sold-out product would send every poll to the one Durable Object, whose
/// soft limit is about 1,000 requests/s. A read decides nothing, so a second
/// of staleness cannot oversell or break idempotency: every reserve still
/// goes to the object.
const PRODUCT_CACHE_TTL_MS: u64 = 1_000;
/// The cache is cleared whole when it reaches this many products, which
/// bounds its memory against requests for many random ids.
const PRODUCT_CACHE_ENTRIES_MAX: usize = 1_024;

struct CachedRead {
    fetched_at_ms: u64,
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

thread_local! {
    // An isolate is single-threaded: requests interleave only at awaits,
    // and no borrow of this cell spans one.
    static PRODUCT_CACHE: RefCell<HashMap<String, CachedRead>> = RefCell::new(HashMap::new());
}

fn cached_read(product_id: &str, now_ms: u64) -> Option<worker::Result<Response>> {
    PRODUCT_CACHE.with_borrow(|cache| {
        let hit = cache.get(product_id)?;
        if now_ms.saturating_sub(hit.fetched_at_ms) >= PRODUCT_CACHE_TTL_MS {
            return None;
        }
        Some(read_response(hit))
    })
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

async fn handle(mut req: Request, env: &Env) -> worker::Result<Response> {
    let method = req.method().to_string();
    let path = req.path();
    let route = match api::route(&method, &path) {
        Ok(r) => r,
        Err(p) => return http::problem(p),
    };
    if route == Route::Page {
        let mut resp = Response::from_html(PAGE)?;
        resp.headers_mut().set("cache-control", "no-cache")?;
        return Ok(resp);
    }
    let body = match read_body(&mut req).await? {
        Ok(b) => b,
        Err(p) => return http::problem(p),
    };
    let headers = req.headers();
    let content_type = headers.get("content-type")?;
    let buyer = headers.get("x-buyer-id")?;
    let idempotency_key = headers.get("idempotency-key")?;
    let authorization = headers.get("authorization")?;
    // Only admin routes need the token; a buy request does not look it up.
    let admin_token = if route.is_admin() {
        env.secret("ADMIN_TOKEN")
            .map(|s| s.to_string())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let incoming = Incoming {
        method: &method,
        path: &path,
        content_type: content_type.as_deref(),
        buyer: buyer.as_deref(),
        idempotency_key: idempotency_key.as_deref(),
        authorization: authorization.as_deref(),
        body: &body,
    };
    let product_id = route.product_id().unwrap_or_default().to_string();
    let cmd = match api::parse(&incoming, route, &admin_token) {
        Ok(c) => c,
        Err(p) => return http::problem(p),
    };

    let is_read = matches!(cmd, crate::api::Command::GetProduct { .. });
    let now_ms = worker::Date::now().as_millis();
    if is_read {
        if let Some(hit) = cached_read(&product_id, now_ms) {
            return hit;
        }
    }

    // One object per product: it serialises every decision about its stock.
    let stub = env
        .durable_object("PRODUCT_GATE")?
        .id_from_name(&product_id)?
        .get_stub()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(serde_json::to_string(&cmd)?.into()));
    let internal = Request::new_with_init("https://product-gate/command", &init)?;
    let mut resp = stub.fetch_with_request(internal).await?;
    if !is_read || !matches!(resp.status_code(), 200 | 404) {
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
    PRODUCT_CACHE.with_borrow_mut(|cache| {
        if cache.len() >= PRODUCT_CACHE_ENTRIES_MAX {
            cache.clear();
        }
        cache.insert(product_id, read);
    });
    out
}
