//! The origin's HTTP API. `routes()` is the only list of its routes: the
//! router is built from it, and a test checks it against `openapi.yaml`.
//! Each route belongs to an access group (who may call it) and the read
//! group runs behind a concurrency limit that sheds the excess, so a flood
//! of reads is answered 503 quickly and never delays ingest.

use std::time::Instant;

use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{BoxError, Json, Router};
use flashgate_wire::batch::BatchError;
use flashgate_wire::token::{self, Claims};
use flashgate_wire::{bounds, Batch, BatchResult, EventStatus};
use serde::Deserialize;
use serde_json::json;
use tower::ServiceBuilder;

use crate::auth::{self, ReadToken, ShopToken, Signed};
use crate::body::{self, parse_json, RawBody};
use crate::demo;
use crate::limits::{
    BATCHES_IN_FLIGHT_MAX, BODY_BYTES_MAX, BUYER_TOKEN_TTL_S, ORDERS_PAGE_MAX, READS_IN_FLIGHT_MAX,
    REQUEST_TIMEOUT,
};
use crate::problem::{AppError, OriginCode};
use crate::state::{now_ms, Shared};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone (`/healthz`).
    Open,
    /// The gate, with a signed batch.
    Gate,
    /// The shop, with a read token; shed under load.
    Read,
    /// The shop, with a shop token.
    Shop,
    /// A buyer, with a buyer token (the demo payments).
    Buyer,
}

/// Every route: method, path, who may call it, handler.
pub fn routes() -> Vec<(&'static str, &'static str, Access, MethodRouter<Shared>)> {
    vec![
        ("POST", "/v1/batches", Access::Gate, post(ingest)),
        ("GET", "/v1/products/{id}", Access::Read, get(get_product)),
        ("GET", "/v1/orders", Access::Read, get(list_orders)),
        ("GET", "/metrics", Access::Read, get(metrics)),
        ("GET", "/healthz", Access::Open, get(healthz)),
        (
            "POST",
            "/v1/buyer-tokens",
            Access::Shop,
            post(mint_buyer_token),
        ),
        ("POST", "/v1/demo/payments", Access::Buyer, post(demo::pay)),
    ]
}

async fn shed(e: BoxError) -> AppError {
    if e.is::<tower::load_shed::error::Overloaded>() {
        AppError::new(
            OriginCode::Overloaded,
            format!("at most {READS_IN_FLIGHT_MAX} reads are served at once; retry shortly"),
        )
        .retry_after(1)
    } else if e.is::<tower::timeout::error::Elapsed>() {
        AppError::new(OriginCode::Timeout, "the request took too long")
    } else {
        AppError::from(anyhow::anyhow!("middleware: {e}"))
    }
}

pub fn router(state: Shared) -> Router {
    let cors = state.settings.demo.as_ref().and_then(|d| d.cors());
    let body_deadline = state.settings.body_deadline;
    let mut reads = Router::new();
    let mut others = Router::new();
    for (_, path, access, handler) in routes() {
        match access {
            // `/healthz` reads the database too, so it is shed with the
            // reads rather than left unbounded.
            Access::Read | Access::Open => reads = reads.route(path, handler),
            // With the demo payments off, their route answers 404 before
            // it asks for a buyer token.
            Access::Buyer if state.settings.demo.is_none() => {
                others = others.route(path, post(demo_off));
            }
            Access::Buyer => {
                let handler = match &cors {
                    // The preflight must reach the CORS layer: without an
                    // OPTIONS route, the router's 405 fallback answers it
                    // and the browser refuses the payment.
                    Some(cors) => handler
                        .options(|| async { StatusCode::NO_CONTENT })
                        .layer(cors.clone()),
                    None => handler,
                };
                others = others.route(path, handler);
            }
            _ => others = others.route(path, handler),
        }
    }
    let reads = reads.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(shed))
            .load_shed()
            .concurrency_limit(READS_IN_FLIGHT_MAX),
    );
    others
        .merge(reads)
        .fallback(|| async { AppError::new(OriginCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            AppError::new(
                OriginCode::MethodNotAllowed,
                "this route does not accept the method; see Allow",
            )
        })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        // A body that trickles in is cut off (slowloris) at a deadline for
        // the whole body, fixed here, as the request arrives; the head has
        // its own deadline in `server.rs`.
        .layer(tower::util::MapRequestLayer::new(move |r: Request| {
            body::with_deadline(r, body_deadline)
        }))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .timeout(REQUEST_TIMEOUT),
        )
        .with_state(state)
}

/// `POST /v1/batches`. The signature is checked from the headers alone
/// (`Signed`): a request that is not from a forwarding key's holder costs
/// no body read and takes no slot.
async fn ingest(
    State(state): State<Shared>,
    signed: Signed,
    _slot: BatchSlot,
    RawBody(body): RawBody,
) -> Result<Json<BatchResult>, AppError> {
    signed
        .body(&body)
        .map_err(|e| auth::refused_signature(&state, e))?;
    let batch: Batch = parse_json(&body)?;
    batch.validate().map_err(|e| {
        let code = match e {
            BatchError::TooLarge { .. } => OriginCode::BatchTooLarge,
            _ => OriginCode::InvalidBody,
        };
        AppError::new(code, e.describe())
    })?;
    let started = Instant::now();
    let stored = tokio::time::timeout(
        state.settings.batch_timeout,
        state.db.ingest(&batch, now_ms()),
    )
    .await;
    let results = match stored {
        Ok(Ok(results)) => results,
        Ok(Err(e)) => {
            state.metrics.batches_failed.inc();
            return Err(e.into());
        }
        Err(_) => {
            state.metrics.batches_failed.inc();
            return Err(AppError::new(
                OriginCode::Timeout,
                "the batch took too long and was rolled back; retrying is safe",
            ));
        }
    };
    state
        .metrics
        .batch_seconds
        .observe(started.elapsed().as_secs_f64());
    state.metrics.batches.inc();
    for r in &results {
        state.metrics.count(r.status);
        if matches!(
            r.status,
            EventStatus::RejectedOversell | EventStatus::Refused
        ) {
            tracing::error!(product = %batch.product_id, seq = r.seq, status = ?r.status, "event refused");
        }
    }
    Ok(Json(BatchResult { results }))
}

/// One of the `BATCHES_IN_FLIGHT_MAX` slots, held until the answer, so that
/// the batches in flight hold a bounded memory. Taken after `Signed` and
/// before the body: past the bound a batch is shed before its body is read,
/// and the gate retries it.
struct BatchSlot(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

impl axum::extract::FromRequestParts<Shared> for BatchSlot {
    type Rejection = AppError;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        state: &Shared,
    ) -> Result<BatchSlot, AppError> {
        match state.batch_slots.clone().try_acquire_owned() {
            Ok(permit) => Ok(BatchSlot(permit)),
            Err(_) => {
                state.metrics.batches_shed.inc();
                Err(AppError::new(
                    OriginCode::Overloaded,
                    format!(
                        "at most {BATCHES_IN_FLIGHT_MAX} batches are taken at once; retry shortly"
                    ),
                )
                .retry_after(1))
            }
        }
    }
}

fn product_id(id: &str) -> Result<(), AppError> {
    if bounds::valid_product_id(id) {
        Ok(())
    } else {
        Err(AppError::new(
            OriginCode::InvalidProductId,
            format!(
                "product ids are 1 to {} of A-Z a-z 0-9 _ -",
                bounds::PRODUCT_ID_BYTES_MAX
            ),
        ))
    }
}

async fn get_product(
    State(state): State<Shared>,
    _: ReadToken,
    Path(id): Path<String>,
) -> Result<Response, AppError> {
    product_id(&id)?;
    let db = state.db.clone();
    let key = id.clone();
    let found = state
        .reads
        .run(async move { db.product(&key).await })
        .await?;
    match found {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(AppError::new(
            OriginCode::UnknownProduct,
            format!("no product {id:?}"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrdersQuery {
    product_id: Option<String>,
    after: Option<i64>,
    limit: Option<i64>,
}

async fn list_orders(
    State(state): State<Shared>,
    _: ReadToken,
    query: Result<Query<OrdersQuery>, QueryRejection>,
) -> Result<Response, AppError> {
    let Query(q) = query.map_err(|r| AppError::new(OriginCode::BadQuery, r.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=ORDERS_PAGE_MAX).contains(&limit) {
        return Err(AppError::new(
            OriginCode::BadQuery,
            format!("limit must be 1 to {ORDERS_PAGE_MAX}"),
        ));
    }
    let after = q.after.unwrap_or(0).max(0);
    let db = state.db.clone();
    // The page is encoded on the read thread too: for a page of 1000
    // orders that is most of the work.
    let page = state
        .reads
        .run(async move {
            let orders = db.orders(q.product_id.as_deref(), after, limit).await?;
            let next_after = (orders.len() as i64 == limit)
                .then(|| orders.last().map(|o| o.cursor))
                .flatten();
            Ok(serde_json::to_vec(
                &json!({ "orders": orders, "next_after": next_after }),
            )?)
        })
        .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        page,
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MintRequest {
    buyer_id: String,
    ttl_s: Option<u64>,
}

/// `POST /v1/buyer-tokens`: the shop's login mints a token for a logged-in
/// buyer, which the gate then accepts as proof of that buyer.
async fn mint_buyer_token(
    State(state): State<Shared>,
    _: ShopToken,
    RawBody(body): RawBody,
) -> Result<Response, AppError> {
    let req: MintRequest = parse_json(&body)?;
    if !bounds::valid_buyer_id(&req.buyer_id) {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            format!(
                "buyer_id must be 1 to {} of A-Z a-z 0-9 _ - .",
                bounds::BUYER_ID_BYTES_MAX
            ),
        ));
    }
    let ttl_s = req.ttl_s.unwrap_or(BUYER_TOKEN_TTL_S);
    if !(1..=bounds::TOKEN_LIFETIME_S_MAX).contains(&ttl_s) {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            format!("ttl_s must be 1 to {}", bounds::TOKEN_LIFETIME_S_MAX),
        ));
    }
    let now = now_ms();
    let claims = Claims {
        sub: req.buyer_id.clone(),
        aud: state.settings.buyer_audience.clone(),
        iat: now / 1000,
        exp: now / 1000 + ttl_s,
        nbf: None,
    };
    let token = token::mint(&state.settings.buyer_keys, &claims, now);
    state.metrics.buyer_tokens.inc();
    let body = json!({
        "buyer_id": req.buyer_id,
        "token": token,
        "expires_at_ms": claims.exp * 1000,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn healthz(State(state): State<Shared>) -> Response {
    let db = state.db.clone();
    match state.reads.run(async move { db.ping().await }).await {
        // Only whether it answers: which database the origin runs on is
        // no business of an anonymous caller.
        Ok(()) => Json(json!({ "status": "ok" })).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            AppError::new(OriginCode::Unhealthy, "the database does not answer").into_response()
        }
    }
}

async fn metrics(State(state): State<Shared>, _: ReadToken) -> Result<Response, AppError> {
    let mut resp = state.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(resp)
}

/// The demo payment route while the demo payments are off.
async fn demo_off() -> AppError {
    AppError::new(
        OriginCode::NotFound,
        "demo payments are off (serve --demo-payments)",
    )
}
