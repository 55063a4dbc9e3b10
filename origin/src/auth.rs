//! Who may call the origin, and how each proves it (docs/security.md, "Who
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

/// Checks a delivery's signature from its headers alone, before its body
/// is read or waited for: a known key, a fresh timestamp, and the MAC over
/// the method, the path and the body's digest as the digest header states
/// it. So only a holder of a forwarding key gets this far; anyone else is
/// refused without reading up to `BODY_BYTES_MAX` of body, and cannot hold
/// one of the batches' slots. `forwarded_body` then checks the body
/// against the digest.
pub fn forwarded_headers<'k>(
    keys: &'k KeySet,
    headers: &HeaderMap,
    method: &str,
    path_and_query: &str,
    now_ms: u64,
) -> Result<signing::Head<'k>, SignatureError> {
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
pub fn forwarded_body(head: &signing::Head<'_>, body: &[u8]) -> Result<(), SignatureError> {
    head.body(body).map(drop)
}
