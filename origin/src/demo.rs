//! The demo payment endpoint, for running flashgate locally: a buyer's page
//! "pays" here, and the origin, standing in for the shop's payment backend,
//! confirms the reservation at the gate with a payment key the browser
//! never sees. Off unless `serve --demo-payments` is given.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use flashgate_wire::keys::KeySet;
use flashgate_wire::signing::{self, Purpose};
use flashgate_wire::{bounds, token};
use serde::Deserialize;
use serde_json::json;

use crate::app::{body_of, now_ms, parse_json, AppState};
use crate::auth;
use crate::problem::{AppError, OriginCode};

/// How long the gate may take to answer a confirmation.
const GATE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct DemoSettings {
    /// `PAYMENT_KEYS`: the confirmation is signed with these.
    pub payment_keys: KeySet,
    /// Where the gate is.
    pub gate_url: String,
    /// The buyer page's origin, allowed by CORS (the gate's URL).
    pub allow_origin: Option<String>,
    pub client: reqwest::Client,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayRequest {
    product_id: String,
    reservation_id: String,
    payment_ref: Option<String>,
}

pub async fn pay(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    let Some(demo) = &state.settings.demo else {
        return Err(AppError::new(
            OriginCode::NotFound,
            "demo payments are off (serve --demo-payments)",
        ));
    };
    let token = auth::bearer(&headers)
        .ok_or_else(|| AppError::unauthorized("send the buyer's token as Authorization: Bearer"))?;
    let claims = token::verify(
        &state.settings.buyer_keys,
        token,
        &state.settings.buyer_audience,
        now_ms() / 1000,
    )
    .map_err(|e| AppError::new(OriginCode::TokenInvalid, e.describe()))?;
    let req: PayRequest = parse_json(&body_of(body)?)?;
    if !bounds::valid_product_id(&req.product_id)
        || !bounds::valid_reservation_id(&req.reservation_id)
    {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            "product_id or reservation_id is not one the gate issues",
        ));
    }
    let payment_ref = req
        .payment_ref
        .unwrap_or_else(|| format!("demo-{}", req.reservation_id));
    if !bounds::valid_payment_ref(&payment_ref) {
        return Err(AppError::new(
            OriginCode::InvalidBody,
            format!(
                "payment_ref must be 1 to {} bytes without control characters",
                bounds::PAYMENT_REF_BYTES_MAX
            ),
        ));
    }
    // The payment succeeded (this is a demo); confirm it at the gate, as a
    // payment provider's webhook handler would.
    let path = format!(
        "/api/products/{}/reservations/{}/confirm",
        req.product_id, req.reservation_id
    );
    let confirm = json!({ "buyer_id": claims.sub, "payment_ref": payment_ref }).to_string();
    let signed = signing::sign(
        &demo.payment_keys,
        &signing::Request {
            purpose: Purpose::Payment,
            method: "POST",
            path: &path,
            body: confirm.as_bytes(),
        },
        now_ms(),
    );
    let mut call = demo
        .client
        .post(format!("{}{path}", demo.gate_url.trim_end_matches('/')))
        .timeout(GATE_TIMEOUT)
        .header(header::CONTENT_TYPE, "application/json")
        .body(confirm);
    for (name, value) in signed.headers() {
        call = call.header(name, value);
    }
    let resp = call.send().await.map_err(|e| {
        tracing::warn!(error = %e, "the gate did not answer a demo payment");
        AppError::new(
            OriginCode::GateUnreachable,
            "the gate did not answer; retry",
        )
    })?;
    state.metrics.demo_payments.inc();
    // The gate's answer, as it is: a confirmation, or its problem document.
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        .unwrap_or(HeaderValue::from_static("application/json"));
    let bytes = resp.bytes().await.map_err(|e| {
        tracing::warn!(error = %e, "the gate's answer to a demo payment broke off");
        AppError::new(
            OriginCode::GateUnreachable,
            "the gate's answer broke off; retry",
        )
    })?;
    let mut out = (status, bytes).into_response();
    out.headers_mut().insert(header::CONTENT_TYPE, content_type);
    Ok(out)
}
