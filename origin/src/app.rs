//! The origin's HTTP API. `routes()` is the only list of its routes: the
//! router is built from it, and a test checks it against `openapi.yaml`.
//! Each route belongs to an access group (who may call it) and the read
//! group runs behind a concurrency limit that sheds the excess, so a flood
//! of reads is answered 503 quickly and never delays ingest.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{BoxError, Json, Router};
use flashgate_wire::batch::BatchError;
use flashgate_wire::keys::KeySet;
use flashgate_wire::token::{self, Claims};
use flashgate_wire::{bounds, Batch, BatchResult, EventStatus};
use serde::Deserialize;
use serde_json::json;
use tower::ServiceBuilder;
use tower_http::cors::CorsLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::auth;
use crate::db::Db;
use crate::demo;
use crate::metrics::Metrics;
use crate::problem::{AppError, OriginCode};
use crate::reads::ReadRuntime;

/// The largest request body: a full batch of 500 events is far below it.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
pub const ORDERS_PAGE_MAX: i64 = 1000;
/// Reads served at once; more are shed with 503 and `Retry-After`.
pub const READS_IN_FLIGHT_MAX: usize = 16;
/// Batches taken at once (from their signed headers to their answer); more
/// are shed with 503 and `Retry-After`, which the gate's outbox retries.
/// Each may hold a body of up to `BODY_BYTES_MAX`, so this bounds what
/// batches in flight hold in memory to 32 MiB.
pub const BATCHES_IN_FLIGHT_MAX: usize = 32;
/// The longest a request may take, end to end.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a request body may take to arrive.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a minted buyer token lives unless the shop asks for less.
pub const BUYER_TOKEN_TTL_S: u64 = 60 * 60;

/// Who may call the origin, and with what.
pub struct Settings {
    /// `FORWARD_KEYS`: the gate's batches are signed with one of these.
    pub forward_keys: KeySet,
    /// `ORIGIN_READ_TOKENS`: the shop's bearer tokens for reads.
    pub read_tokens: KeySet,
    /// `ORIGIN_SHOP_TOKENS`: the shop's bearer tokens for minting buyer
    /// tokens.
    pub shop_tokens: KeySet,
    /// `BUYER_TOKEN_KEYS` and the audience: buyer tokens are minted (and,
    /// for the demo payments, checked) with these.
    pub buyer_keys: KeySet,
    pub buyer_audience: String,
    /// The demo payment endpoint, off unless configured.
    pub demo: Option<demo::DemoSettings>,
    /// A batch that takes longer is abandoned (rolled back) with a 503.
    pub batch_timeout: Duration,
}

pub struct AppState {
    pub db: Db,
    pub metrics: Metrics,
    pub settings: Settings,
    /// Where the read routes run: below ingest's priority (`reads`).
    pub reads: ReadRuntime,
    /// `BATCHES_IN_FLIGHT_MAX` permits, one per batch being taken.
    pub batch_slots: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(db: Db, settings: Settings) -> anyhow::Result<Arc<AppState>> {
        Ok(Arc::new(AppState {
            db,
            metrics: Metrics::default(),
            settings,
            reads: ReadRuntime::start()?,
            batch_slots: Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT_MAX)),
        }))
    }
}

type Shared = Arc<AppState>;

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
    let mut reads = Router::new();
    let mut others = Router::new();
    for (_, path, access, handler) in routes() {
        match access {
            // `/healthz` reads the database too, so it is shed with the
            // reads rather than left unbounded.
            Access::Read | Access::Open => reads = reads.route(path, handler),
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
        // A body that trickles in is cut off (slowloris); the head has its
        // own deadline in `server.rs`.
        .layer(RequestBodyTimeoutLayer::new(BODY_READ_TIMEOUT))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .timeout(REQUEST_TIMEOUT),
        )
        .with_state(state)
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, AppError> {
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

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            AppError::new(OriginCode::MalformedJson, e.to_string())
        } else {
            AppError::new(OriginCode::InvalidBody, e.to_string())
        }
    })
}

fn require(
    state: &AppState,
    tokens: &KeySet,
    headers: &HeaderMap,
    what: &str,
) -> Result<(), AppError> {
    if auth::token_ok(tokens, headers) {
        Ok(())
    } else {
        state.metrics.unauthorized.inc();
        Err(AppError::unauthorized(format!(
            "send Authorization: Bearer with {what}"
        )))
    }
}

async fn ingest(
    State(state): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Result<Json<BatchResult>, AppError> {
    let refused = |e: flashgate_wire::signing::SignatureError| {
        state.metrics.unauthorized.inc();
        tracing::warn!(
            reason = e.describe(),
            "refused an unsigned or badly signed batch"
        );
        AppError::new(OriginCode::BadSignature, e.describe())
    };
    // The signature first, from the headers alone: a request that is not
    // from a forwarding key's holder costs no body read and takes no slot.
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let head = auth::forwarded_headers(
        &state.settings.forward_keys,
        &headers,
        Method::POST.as_str(),
        path,
        now_ms(),
    )
    .map_err(refused)?;
    // Then a slot, held until the answer, so that the batches in flight
    // hold a bounded memory. Past the bound the batch is shed before its
    // body is read, and the gate retries it.
    let Ok(_slot) = state.batch_slots.clone().try_acquire_owned() else {
        state.metrics.batches_shed.inc();
        return Err(AppError::new(
            OriginCode::Overloaded,
            format!("at most {BATCHES_IN_FLIGHT_MAX} batches are taken at once; retry shortly"),
        )
        .retry_after(1));
    };
    let body =
        body_of(<Bytes as axum::extract::FromRequest<()>>::from_request(request, &()).await)?;
    auth::forwarded_body(&head, &body).map_err(refused)?;
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
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    require(
        &state,
        &state.settings.read_tokens,
        &headers,
        "a read token",
    )?;
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
    headers: HeaderMap,
    query: Result<Query<OrdersQuery>, QueryRejection>,
) -> Result<Response, AppError> {
    require(
        &state,
        &state.settings.read_tokens,
        &headers,
        "a read token",
    )?;
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    require(
        &state,
        &state.settings.shop_tokens,
        &headers,
        "a shop token",
    )?;
    let body = body_of(body)?;
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
    if !(1..=token::LIFETIME_S_MAX).contains(&ttl_s) {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            format!("ttl_s must be 1 to {}", token::LIFETIME_S_MAX),
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
        Ok(()) => {
            Json(json!({ "status": "ok", "backend": state.db.backend().as_str() })).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            AppError::new(OriginCode::Unhealthy, "the database does not answer").into_response()
        }
    }
}

async fn metrics(State(state): State<Shared>, headers: HeaderMap) -> Result<Response, AppError> {
    require(
        &state,
        &state.settings.read_tokens,
        &headers,
        "a read token",
    )?;
    let mut resp = state.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(resp)
}

impl demo::DemoSettings {
    /// The CORS layer of the demo route, for the buyer page's origin.
    pub fn cors(&self) -> Option<CorsLayer> {
        let origin = HeaderValue::from_str(self.allow_origin.as_deref()?).ok()?;
        Some(
            CorsLayer::new()
                .allow_origin(origin)
                .allow_methods([Method::POST])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
                .max_age(Duration::from_secs(600)),
        )
    }
}
