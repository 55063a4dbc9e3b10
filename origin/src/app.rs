//! The origin's HTTP API.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use flashgate::api::valid_product_id;
use flashgate::wire::{self, Batch, BatchResult, ItemStatus};
use serde::Deserialize;
use serde_json::json;

use crate::db::{Db, SetTotal};
use crate::metrics::Metrics;

/// The largest request body: a full batch of 500 orders is far below it.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
pub const ORDERS_PAGE_MAX: i64 = 1000;
const RESERVATION_ID_BYTES_MAX: usize = 200;
const TEXT_BYTES_MAX: usize = 256;

pub struct Settings {
    pub hmac_secret: Vec<u8>,
    /// A batch that takes longer is abandoned (rolled back) with a 503.
    pub batch_timeout: Duration,
    /// For tests of duplicate delivery: this many batches are committed and
    /// then answered with a 500, as if the response was lost.
    pub fault_after_commit: u32,
}

pub struct AppState {
    pub db: Db,
    pub metrics: Metrics,
    hmac_secret: Vec<u8>,
    batch_timeout: Duration,
    faults_left: AtomicU32,
}

impl AppState {
    pub fn new(db: Db, settings: Settings) -> Arc<AppState> {
        Arc::new(AppState {
            db,
            metrics: Metrics::default(),
            hmac_secret: settings.hmac_secret,
            batch_timeout: settings.batch_timeout,
            faults_left: AtomicU32::new(settings.fault_after_commit),
        })
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/reservations/batch", post(ingest))
        .route("/v1/products/{id}", get(get_product).put(put_product))
        .route("/v1/orders", get(list_orders))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(|| async { AppError::new(StatusCode::NOT_FOUND, "not_found", "No such route") })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(state)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every error, as an RFC 9457 problem document. Server errors are logged
/// and answered without internals.
#[derive(Debug)]
pub struct AppError {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

impl AppError {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> AppError {
        AppError {
            status,
            code,
            detail: detail.into(),
        }
    }
}

impl From<anyhow::Error> for AppError {
    fn from(e: anyhow::Error) -> AppError {
        tracing::error!(error = %format!("{e:#}"), "request failed");
        AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the origin could not complete the request; retrying is safe",
        )
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let body = json!({
            "type": format!("/problems/{}", self.code),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let mut resp = (self.status, Json(body)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/problem+json"),
        );
        resp
    }
}

fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, AppError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the body must be at most {BODY_BYTES_MAX} bytes"),
            )
        } else {
            AppError::new(StatusCode::BAD_REQUEST, "bad_body", r.body_text())
        }
    })
}

fn check_signature(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<(), AppError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    wire::verify(
        &state.hmac_secret,
        h(wire::TIMESTAMP_HEADER),
        h(wire::SIGNATURE_HEADER),
        body,
        now_ms(),
    )
    .map_err(|e| {
        state.metrics.unauthorized.inc();
        tracing::warn!(
            reason = e.describe(),
            "refused an unsigned or badly signed request"
        );
        AppError::new(StatusCode::UNAUTHORIZED, "bad_signature", e.describe())
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            AppError::new(StatusCode::BAD_REQUEST, "malformed_json", e.to_string())
        } else {
            AppError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                e.to_string(),
            )
        }
    })
}

fn validate(batch: &Batch) -> Result<(), AppError> {
    let invalid = |d: String| {
        Err(AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            d,
        ))
    };
    if batch.orders.len() > wire::BATCH_SIZE_MAX {
        return Err(AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("a batch holds at most {} orders", wire::BATCH_SIZE_MAX),
        ));
    }
    if batch.orders.is_empty() {
        return invalid("a batch holds at least one order".into());
    }
    for o in &batch.orders {
        if o.reservation_id.is_empty() || o.reservation_id.len() > RESERVATION_ID_BYTES_MAX {
            return invalid(format!(
                "reservation_id must be 1 to {RESERVATION_ID_BYTES_MAX} bytes"
            ));
        }
        if !valid_product_id(&o.product_id) {
            return invalid(format!("{}: product_id is not valid", o.reservation_id));
        }
        if o.quantity == 0 {
            return invalid(format!("{}: quantity must be at least 1", o.reservation_id));
        }
        if o.buyer_id.is_empty()
            || o.buyer_id.len() > TEXT_BYTES_MAX
            || o.payment_ref.len() > TEXT_BYTES_MAX
        {
            return invalid(format!(
                "{}: buyer_id or payment_ref out of bounds",
                o.reservation_id
            ));
        }
        if o.stock_total > flashgate_core::limits::STOCK_UNITS_MAX {
            return invalid(format!("{}: stock_total out of bounds", o.reservation_id));
        }
    }
    Ok(())
}

async fn ingest(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchResult>, AppError> {
    let body = body_of(body)?;
    check_signature(&state, &headers, &body)?;
    let batch: Batch = parse_json(&body)?;
    validate(&batch)?;
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
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
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
    let faulty = state
        .faults_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if faulty {
        tracing::warn!(
            orders = results.len(),
            "fault injection: committed, answering 500"
        );
        return Err(AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "fault_injected",
            "the batch was committed but this answer is deliberately lost",
        ));
    }
    Ok(Json(BatchResult { results }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProductPut {
    stock_total: u64,
}

async fn put_product(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let body = body_of(body)?;
    check_signature(&state, &headers, &body)?;
    if !valid_product_id(&id) {
        return Err(AppError::new(
            StatusCode::BAD_REQUEST,
            "invalid_product_id",
            "product ids are 1 to 64 of A-Z a-z 0-9 _ -",
        ));
    }
    let put: ProductPut = parse_json(&body)?;
    if put.stock_total > flashgate_core::limits::STOCK_UNITS_MAX {
        return Err(AppError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            "stock_total out of bounds",
        ));
    }
    match state.db.set_total(&id, put.stock_total).await? {
        SetTotal::Done(p) => Ok(Json(p).into_response()),
        SetTotal::BelowSold { sold } => Err(AppError::new(
            StatusCode::CONFLICT,
            "below_sold",
            format!("{sold} units are sold; the total cannot be lower"),
        )),
    }
}

async fn get_product(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, AppError> {
    match state.db.product(&id).await? {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(AppError::new(
            StatusCode::NOT_FOUND,
            "unknown_product",
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
    State(state): State<Arc<AppState>>,
    query: Result<Query<OrdersQuery>, QueryRejection>,
) -> Result<Response, AppError> {
    let Query(q) =
        query.map_err(|r| AppError::new(StatusCode::BAD_REQUEST, "bad_query", r.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=ORDERS_PAGE_MAX).contains(&limit) {
        return Err(AppError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
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

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.db.ping().await {
        Ok(()) => Json(json!({ "status": "ok", "backend": format!("{:?}", state.db.backend()) }))
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unhealthy",
                "the database does not answer",
            )
            .into_response()
        }
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
