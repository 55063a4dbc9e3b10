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

/// Checks a delivery's signature headers with the forwarding keys, before
/// its body is read: a request that cannot be genuine (no signature, an
/// unknown key, a stale timestamp, a malformed signature) is refused
/// without reading up to `BODY_BYTES_MAX` of body. `Checked::verify` then
/// checks the MAC over the body (`forwarded_body`).
pub fn forwarded_headers<'k>(
    keys: &'k KeySet,
    headers: &HeaderMap,
    now_ms: u64,
) -> Result<signing::Checked<'k>, SignatureError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let presented = Presented {
        kid: h(signing::KEY_ID_HEADER),
        timestamp: h(signing::TIMESTAMP_HEADER),
        signature: h(signing::SIGNATURE_HEADER),
    };
    signing::check_presented(keys, &presented, now_ms)
}

/// The second half: the MAC over the method, path and body.
pub fn forwarded_body(
    checked: signing::Checked<'_>,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> Result<(), SignatureError> {
    checked
        .verify(&signing::Request {
            purpose: Purpose::Forward,
            method,
            path: path_and_query,
            body,
        })
        .map(drop)
}
