//! The HMAC-SHA256 signature the gate puts on every request to the origin,
//! over the timestamp and the body, and its verification.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A signature older or newer than this is refused, so a captured request
/// cannot be replayed later.
pub const SIGNATURE_SKEW_MS_MAX: u64 = 5 * 60 * 1000;
pub const TIMESTAMP_HEADER: &str = "x-flashgate-timestamp";
pub const SIGNATURE_HEADER: &str = "x-flashgate-signature";

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
    pub fn describe(self) -> String {
        match self {
            SignatureError::Missing => "the timestamp or signature header is missing".into(),
            SignatureError::BadTimestamp => "the timestamp is not epoch milliseconds".into(),
            SignatureError::Stale => format!(
                "the timestamp is more than {} s from the receiver's clock",
                SIGNATURE_SKEW_MS_MAX / 1000
            ),
            SignatureError::Malformed => "the signature is not v1=<64 hex digits>".into(),
            SignatureError::Mismatch => "the signature does not match the body".into(),
        }
    }
}

fn mac(secret: &[u8], timestamp_ms: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .expect("HMAC is defined for keys of every length");
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
