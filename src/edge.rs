//! The Worker's fetch handler: the edge in front of every product.

use futures_util::StreamExt;
use worker::{event, Context, Env, Method, Request, RequestInit, Response};

use crate::api::{self, Incoming, Route, BODY_BYTES_MAX};
use crate::http;
use crate::problem::Problem;

const PAGE: &str = include_str!("../web/index.html");

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
    let admin_token = env
        .secret("ADMIN_TOKEN")
        .map(|s| s.to_string())
        .unwrap_or_default();
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

    // One object per product: it serialises every decision about its stock.
    let stub = env
        .durable_object("PRODUCT_GATE")?
        .id_from_name(&product_id)?
        .get_stub()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(serde_json::to_string(&cmd)?.into()));
    let internal = Request::new_with_init("https://product-gate/command", &init)?;
    stub.fetch_with_request(internal).await
}
