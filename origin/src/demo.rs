//! The demo payment endpoint, for running flashgate locally: a buyer's page
//! "pays" here, and the origin, standing in for the shop's payment backend,
//! confirms the reservation at the gate with a payment key the browser
//! never sees. Off unless `serve --demo-payments` is given.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use flashgate_wire::bounds;
use flashgate_wire::signing::{self, Purpose};
use serde::Deserialize;
use serde_json::json;

use crate::auth::BuyerToken;
use crate::body::{parse_json, RawBody};
use crate::limits::GATE_TIMEOUT;
use crate::problem::{AppError, OriginCode};
use crate::state::{now_ms, Shared};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayRequest {
    product_id: String,
    reservation_id: String,
    payment_ref: Option<String>,
}

/// `POST /v1/demo/payments`, routed only while the demo payments are on.
/// The buyer token is checked from the head (`BuyerToken`) before the body
/// is read.
pub async fn pay(
    State(state): State<Shared>,
    BuyerToken(buyer): BuyerToken,
    RawBody(body): RawBody,
) -> Result<Response, AppError> {
    let Some(demo) = &state.settings.demo else {
        return Err(AppError::new(
            OriginCode::NotFound,
            "demo payments are off (serve --demo-payments)",
        ));
    };
    let req: PayRequest = parse_json(&body)?;
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
    let confirm = json!({ "buyer_id": buyer.id, "payment_ref": payment_ref }).to_string();
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
