//! The origin's HTTP API. `routes()` is the only list of its routes: the
//! router is built from it, and a test checks it against `openapi.yaml`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put, MethodRouter};
use axum::{Json, Router};
use flashgate_wire::batch::BatchError;
use flashgate_wire::bounds::{self, STOCK_UNITS_MAX};
use flashgate_wire::{signing, Batch, BatchResult, ItemStatus};
use serde::Deserialize;
use serde_json::json;

use crate::db::{Db, SetTotal};
use crate::metrics::Metrics;
use crate::problem::{AppError, OriginCode};

/// The largest request body: a full batch of 500 orders is far below it.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
pub const ORDERS_PAGE_MAX: i64 = 1000;

pub struct Settings {
    pub hmac_secret: Vec<u8>,
    /// A batch that takes longer is abandoned (rolled back) with a 503.
    pub batch_timeout: Duration,
}

pub struct AppState {
    pub db: Db,
    pub metrics: Metrics,
    hmac_secret: Vec<u8>,
    batch_timeout: Duration,
}

impl AppState {
    pub fn new(db: Db, settings: Settings) -> Arc<AppState> {
        Arc::new(AppState {
            db,
            metrics: Metrics::default(),
            hmac_secret: settings.hmac_secret,
            batch_timeout: settings.batch_timeout,
        })
    }
}

type Shared = Arc<AppState>;

/// Every route: method, path, handler.
pub fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Shared>)> {
    vec![
        ("POST", "/v1/reservations/batch", post(ingest)),
        ("GET", "/v1/products/{id}", get(get_product)),
        ("PUT", "/v1/products/{id}", put(put_product)),
        ("GET", "/v1/orders", get(list_orders)),
        ("GET", "/healthz", get(healthz)),
        ("GET", "/metrics", get(metrics)),
    ]
}

pub fn router(state: Shared) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |r, (_, path, handler)| {
            r.route(path, handler)
        })
        .fallback(|| async { AppError::new(OriginCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            AppError::new(
                OriginCode::MethodNotAllowed,
                "this route does not accept the method; see Allow",
            )
        })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(state)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, AppError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::new(
                OriginCode::BodyTooLarge,
                format!("the body must be at most {BODY_BYTES_MAX} bytes"),
            )
        } else {
            AppError::new(OriginCode::BadBody, r.body_text())
        }
    })
}

fn check_signature(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<(), AppError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    signing::verify(
        &state.hmac_secret,
        h(signing::TIMESTAMP_HEADER),
        h(signing::SIGNATURE_HEADER),
        body,
        now_ms(),
    )
    .map_err(|e| {
        state.metrics.unauthorized.inc();
        tracing::warn!(
            reason = e.describe(),
            "refused an unsigned or badly signed request"
        );
        AppError::new(OriginCode::BadSignature, e.describe())
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            AppError::new(OriginCode::MalformedJson, e.to_string())
        } else {
            AppError::new(OriginCode::InvalidBody, e.to_string())
        }
    })
}

async fn ingest(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchResult>, AppError> {
    let body = body_of(body)?;
    check_signature(&state, &headers, &body)?;
    let batch: Batch = parse_json(&body)?;
    batch.validate().map_err(|e| {
        let code = match e {
            BatchError::TooLarge { .. } => OriginCode::BatchTooLarge,
            BatchError::Empty | BatchError::Order { .. } => OriginCode::InvalidBody,
        };
        AppError::new(code, e.describe())
    })?;
    let started = Instant::now();
    let stored = tokio::time::timeout(
        state.batch_timeout,
        state.db.ingest(&batch.orders, now_ms()),
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
        match r.status {
            ItemStatus::Inserted => state.metrics.ingested.inc(),
            ItemStatus::Exists => state.metrics.duplicates.inc(),
            ItemStatus::RejectedOversell => state.metrics.rejected_oversell.inc(),
        };
    }
    Ok(Json(BatchResult { results }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProductPut {
    stock_total: u64,
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

async fn put_product(
    State(state): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let body = body_of(body)?;
    check_signature(&state, &headers, &body)?;
    product_id(&id)?;
    let put: ProductPut = parse_json(&body)?;
    if put.stock_total > STOCK_UNITS_MAX {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            format!("stock_total must be at most {STOCK_UNITS_MAX}"),
        ));
    }
    match state.db.set_total(&id, put.stock_total).await? {
        SetTotal::Done(p) => Ok(Json(p).into_response()),
        SetTotal::BelowSold { sold } => Err(AppError::new(
            OriginCode::BelowSold,
            format!("{sold} units are sold; the total cannot be lower"),
        )),
    }
}

async fn get_product(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, AppError> {
    product_id(&id)?;
    match state.db.product(&id).await? {
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
    let orders = state
        .db
        .orders(q.product_id.as_deref(), after, limit)
        .await?;
    let next_after = (orders.len() as i64 == limit)
        .then(|| orders.last().map(|o| o.cursor))
        .flatten();
    Ok(Json(json!({ "orders": orders, "next_after": next_after })).into_response())
}

async fn healthz(State(state): State<Shared>) -> Response {
    match state.db.ping().await {
        Ok(()) => {
            Json(json!({ "status": "ok", "backend": state.db.backend().as_str() })).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            AppError::new(OriginCode::Unhealthy, "the database does not answer").into_response()
        }
    }
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
