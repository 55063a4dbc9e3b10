//! Who may call the origin, and how each proves it (ARCHITECTURE.md, "Who
//! may do what, proven how"):
//! - the gate delivers batches, signed with a forwarding key
//!   (`flashgate_wire::signing`, purpose `forward`);
//! - the shop reads orders, products and metrics with a read token, and
//!   mints buyer tokens with a shop token (bearer tokens with ids, for
//!   rotation, compared in constant time);
//! - `/healthz` is open.

use axum::http::HeaderMap;
use flashgate_wire::keys::KeySet;
use flashgate_wire::signing::{self, Presented, Purpose, SignatureError};

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

/// Checks a delivery's signature with the forwarding keys.
pub fn forwarded(
    keys: &KeySet,
    headers: &HeaderMap,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    now_ms: u64,
) -> Result<(), SignatureError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let presented = Presented {
        kid: h(signing::KEY_ID_HEADER),
        timestamp: h(signing::TIMESTAMP_HEADER),
        signature: h(signing::SIGNATURE_HEADER),
    };
    let req = signing::Request {
        purpose: Purpose::Forward,
        method,
        path: path_and_query,
        body,
    };
    signing::verify(keys, &presented, &req, now_ms).map(drop)
}
