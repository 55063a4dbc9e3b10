//! Who may call the origin, and how each proves it (docs/security.md, "Who
//! may do what"):
//! - the gate delivers batches, signed with a forwarding key
//!   (`flashgate_wire::signing`, purpose `forward`);
//! - the shop reads orders, products and metrics with a read token, and
//!   mints buyer tokens with a shop token (bearer tokens with ids, for
//!   rotation, compared in constant time);
//! - a buyer pays (the demo payments) with a buyer token;
//! - `/healthz` is open.
//!
//! Each is an extractor (`ReadToken`, `ShopToken`, `BuyerToken`, `Signed`)
//! that a handler takes before anything else, and that reads the head
//! alone: a caller without the credential is answered 401 before a byte of
//! its body is read or waited for, so an anonymous client can make the
//! origin hold no body.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use flashgate_wire::keys::KeySet;
use flashgate_wire::signing::{self, Presented, Purpose, SignatureError};
use flashgate_wire::token;

use crate::problem::{AppError, OriginCode};
use crate::state::{now_ms, Shared};

/// The credential of `Authorization: Bearer`.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, credentials) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// Whether the bearer token is one of `tokens`. Every token is compared, so
/// the time does not tell which one matched, or how far.
pub fn token_ok(tokens: &KeySet, headers: &HeaderMap) -> bool {
    tokens.holds_secret(bearer(headers).unwrap_or("").as_bytes())
}

/// Checks a delivery's signature from its headers alone, before its body
/// is read or waited for: a known key, a fresh timestamp, and the MAC over
/// the method, the path and the body's digest as the digest header states
/// it. So only a holder of a forwarding key gets this far; anyone else is
/// refused without reading up to `BODY_BYTES_MAX` of body, and cannot hold
/// one of the batches' slots. `forwarded_body` then checks the body
/// against the digest.
pub fn forwarded_headers(
    keys: &KeySet,
    headers: &HeaderMap,
    method: &str,
    path_and_query: &str,
    now_ms: u64,
) -> Result<signing::Head, SignatureError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let presented = Presented {
        kid: h(signing::KEY_ID_HEADER),
        timestamp: h(signing::TIMESTAMP_HEADER),
        signature: h(signing::SIGNATURE_HEADER),
    };
    signing::check_presented(keys, &presented, now_ms)?.verify_head(
        Purpose::Forward,
        method,
        path_and_query,
        h(signing::DIGEST_HEADER),
    )
}

/// The second half: the body is the one whose digest was signed.
pub fn forwarded_body(head: &signing::Head, body: &[u8]) -> Result<(), SignatureError> {
    head.body(body).map(drop)
}

/// The bearer token is one of `tokens`, or the 401 (counted).
fn bearer_in(state: &Shared, tokens: &KeySet, parts: &Parts, what: &str) -> Result<(), AppError> {
    if token_ok(tokens, &parts.headers) {
        Ok(())
    } else {
        state.metrics.unauthorized.inc();
        Err(AppError::unauthorized(format!(
            "send Authorization: Bearer with {what}"
        )))
    }
}

/// The caller holds one of the shop's read tokens (`ORIGIN_READ_TOKENS`).
pub struct ReadToken;

impl FromRequestParts<Shared> for ReadToken {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<ReadToken, AppError> {
        bearer_in(state, &state.settings.read_tokens, parts, "a read token").map(|()| ReadToken)
    }
}

/// The caller holds one of the shop's tokens for minting buyer tokens
/// (`ORIGIN_SHOP_TOKENS`).
pub struct ShopToken;

impl FromRequestParts<Shared> for ShopToken {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<ShopToken, AppError> {
        bearer_in(state, &state.settings.shop_tokens, parts, "a shop token").map(|()| ShopToken)
    }
}

/// The caller is the buyer a valid buyer token names.
pub struct BuyerToken(pub token::Buyer);

impl FromRequestParts<Shared> for BuyerToken {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<BuyerToken, AppError> {
        let token = bearer(&parts.headers).ok_or_else(|| {
            AppError::unauthorized("send the buyer's token as Authorization: Bearer")
        })?;
        token::verify(
            &state.settings.buyer_keys,
            token,
            &state.settings.buyer_audience,
            now_ms() / 1000,
        )
        .map(BuyerToken)
        .map_err(|e| AppError::new(OriginCode::TokenInvalid, e.describe()))
    }
}

/// The request is signed with a forwarding key (`FORWARD_KEYS`): a known
/// key id, a timestamp inside the window, and a MAC over the method, the
/// path and the body's digest as its header states it. The body is checked
/// against that digest once it is read (`Signed::body`).
pub struct Signed(signing::Head);

impl Signed {
    /// Whether `body` is the one whose digest was signed.
    pub fn body(&self, body: &[u8]) -> Result<(), SignatureError> {
        forwarded_body(&self.0, body)
    }
}

impl FromRequestParts<Shared> for Signed {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Signed, AppError> {
        let path = parts
            .uri
            .path_and_query()
            .map_or(parts.uri.path(), |p| p.as_str());
        forwarded_headers(
            &state.settings.forward_keys,
            &parts.headers,
            parts.method.as_str(),
            path,
            now_ms(),
        )
        .map(Signed)
        .map_err(|e| refused_signature(state, e))
    }
}

/// The 401 for a batch whose signature is refused (counted and logged).
pub fn refused_signature(state: &Shared, e: SignatureError) -> AppError {
    state.metrics.unauthorized.inc();
    tracing::warn!(
        reason = e.describe(),
        "refused an unsigned or badly signed batch"
    );
    AppError::new(OriginCode::BadSignature, e.describe())
}
