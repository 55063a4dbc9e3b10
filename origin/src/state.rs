//! What every handler shares: the settings (who may call, with which keys),
//! the database, the metrics and the read runtime. The routes (`app`) and
//! the demo payments (`demo`) both read it, and it reads neither.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::http::{header, HeaderValue, Method};
use flashgate_wire::keys::KeySet;
use tower_http::cors::CorsLayer;

use crate::db::Db;
use crate::limits::BATCHES_IN_FLIGHT_MAX;
use crate::metrics::Metrics;
use crate::reads::ReadRuntime;

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
    pub demo: Option<DemoSettings>,
    /// A batch that takes longer is abandoned (rolled back) with a 503.
    pub batch_timeout: Duration,
    /// A request body must arrive whole within this of its head
    /// (`limits::BODY_READ_TIMEOUT` unless configured).
    pub body_deadline: Duration,
}

/// The demo payment endpoint's settings (`demo`).
pub struct DemoSettings {
    /// `PAYMENT_KEYS`: the confirmation is signed with these.
    pub payment_keys: KeySet,
    /// Where the gate is.
    pub gate_url: String,
    /// The buyer page's origin, allowed by CORS (the gate's URL).
    pub allow_origin: Option<String>,
    pub client: reqwest::Client,
}

impl DemoSettings {
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

/// Parses the key set in the variable `name`, and refuses it unless every
/// secret in it is long, unpublished and random-looking
/// (`flashgate_wire::keys::check_secret`). The error names the variable and
/// the key, never the secret.
pub fn key_set(name: &str, text: &str) -> anyhow::Result<KeySet> {
    let set = KeySet::parse(text).with_context(|| format!("{name} is refused"))?;
    if let Some((kid, why)) = set.refused_secret() {
        anyhow::bail!(
            "{name} is refused: the secret of key {kid} {why}; generate one with \
             `openssl rand -hex 32`"
        );
    }
    Ok(set)
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

pub type Shared = Arc<AppState>;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
