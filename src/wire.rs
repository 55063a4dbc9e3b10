//! The contract between the gate and the origin: the batch of confirmed
//! reservations the gate forwards, the origin's answer, and the HMAC-SHA256
//! signature over both the timestamp and the body. Both sides use this
//! module, so they cannot drift apart.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The most orders one batch may carry.
pub const BATCH_SIZE_MAX: usize = flashgate_core::limits::OUTBOX_BATCH_SIZE_MAX;
/// A signature older or newer than this is refused, so a captured request
/// cannot be replayed later.
pub const SIGNATURE_SKEW_MS_MAX: u64 = 5 * 60 * 1000;
pub const TIMESTAMP_HEADER: &str = "x-flashgate-timestamp";
pub const SIGNATURE_HEADER: &str = "x-flashgate-signature";

/// One confirmed reservation on its way to the origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Order {
    /// Globally unique: `{product_id}:{reservation id in the product}`.
    pub reservation_id: String,
    pub product_id: String,
    pub buyer_id: String,
    pub quantity: u32,
    pub payment_ref: String,
    pub confirmed_at_ms: u64,
    /// The gate's stock total when the batch was sent. The origin uses it
    /// only to register a product it has not seen; its own total rules.
    pub stock_total: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub orders: Vec<Order>,
}

/// What became of one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Stored now, and the product's `sold` went up.
    Inserted,
    /// Stored by an earlier delivery; nothing changed.
    Exists,
    /// Stored, but it would have oversold the product. This should never
    /// happen; the origin alerts on it.
    RejectedOversell,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemResult {
    pub reservation_id: String,
    pub status: ItemStatus,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub results: Vec<ItemResult>,
}

/// Why a signature was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureError {
    Missing,
    BadTimestamp,
    Stale,
    Malformed,
    Mismatch,
}

impl SignatureError {
    pub fn describe(self) -> &'static str {
        match self {
            SignatureError::Missing => "the timestamp or signature header is missing",
            SignatureError::BadTimestamp => "the timestamp is not epoch milliseconds",
            SignatureError::Stale => "the timestamp is more than 5 minutes from the origin's clock",
            SignatureError::Malformed => "the signature is not v1=<64 hex digits>",
            SignatureError::Mismatch => "the signature does not match the body",
        }
    }
}

fn mac(secret: &[u8], timestamp_ms: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The signature header value for `body` sent at `timestamp_ms`.
pub fn sign(secret: &[u8], timestamp_ms: u64, body: &[u8]) -> String {
    format!(
        "v1={}",
        hex::encode(mac(secret, timestamp_ms, body).finalize().into_bytes())
    )
}

/// Checks the headers against the body. The comparison is constant-time.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: u64,
) -> Result<(), SignatureError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(SignatureError::Missing);
    };
    let ts: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if ts.abs_diff(now_ms) > SIGNATURE_SKEW_MS_MAX {
        return Err(SignatureError::Stale);
    }
    let given = signature
        .trim()
        .strip_prefix("v1=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|b| b.len() == 32)
        .ok_or(SignatureError::Malformed)?;
    mac(secret, ts, body)
        .verify_slice(&given)
        .map_err(|_| SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip_and_fail_closed() {
        let (secret, body, now) = (
            b"s3cret".as_slice(),
            br#"{"orders":[]}"#.as_slice(),
            1_000_000_000,
        );
        let sig = sign(secret, now, body);
        let ts = now.to_string();
        assert_eq!(
            verify(secret, Some(&ts), Some(&sig), body, now + 1000),
            Ok(())
        );
        let cases = [
            (None, Some(sig.as_str()), body, SignatureError::Missing),
            (Some(ts.as_str()), None, body, SignatureError::Missing),
            (
                Some("soon"),
                Some(sig.as_str()),
                body,
                SignatureError::BadTimestamp,
            ),
            (
                Some(ts.as_str()),
                Some("v1=zz"),
                body,
                SignatureError::Malformed,
            ),
            (
                Some(ts.as_str()),
                Some("v2=00"),
                body,
                SignatureError::Malformed,
            ),
            (
                Some(ts.as_str()),
                Some(sig.as_str()),
                b"{}".as_slice(),
                SignatureError::Mismatch,
            ),
        ];
        for (t, s, b, want) in cases {
            assert_eq!(verify(secret, t, s, b, now), Err(want));
        }
        let stale = now - SIGNATURE_SKEW_MS_MAX - 1;
        let old = sign(secret, stale, body);
        assert_eq!(
            verify(secret, Some(&stale.to_string()), Some(&old), body, now),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(b"other", Some(&ts), Some(&sig), body, now),
            Err(SignatureError::Mismatch)
        );
    }
}
