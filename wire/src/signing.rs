//! The HMAC-SHA256 signature of a request between services: the gate's
//! deliveries to the origin (`Purpose::Forward`) and the shop's payment
//! confirmations to the gate (`Purpose::Payment`).
//!
//! The signature covers everything that decides what the request does: the
//! purpose, the key id, the timestamp, the method, the path (with its query)
//! and the SHA-256 of the body. So a captured request cannot be replayed on
//! another route or product, with another body, after the skew window, or
//! under another purpose: a forwarding key never signs a payment, even if an
//! operator gave both sets the same secret.
//!
//! The canonical string, one field per line:
//! `flashgate-v2`, purpose, kid, timestamp (epoch ms), METHOD, path, and the
//! lowercase hex SHA-256 of the body. The signature is `v2=` and the hex
//! HMAC-SHA256 of it under the key's secret.
//!
//! A signer also sends that digest as `x-flashgate-content-sha256`. Then a
//! receiver can check the MAC, and so that the sender holds a key, from
//! the headers alone (`Checked::verify_head`), before it reads or even
//! waits for the body, and afterwards check the body against the digest
//! (`Head::body`). The origin requires it of batches: only a key holder
//! may take one of its slots. What is signed is the same either way.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::bounds::SIGNATURE_SKEW_MS_MAX;
use crate::keys::{Key, KeySet};

pub const KEY_ID_HEADER: &str = "x-flashgate-key-id";
pub const TIMESTAMP_HEADER: &str = "x-flashgate-timestamp";
pub const SIGNATURE_HEADER: &str = "x-flashgate-signature";
/// The lowercase hex SHA-256 of the body, as signed.
pub const DIGEST_HEADER: &str = "x-flashgate-content-sha256";

/// What a signature is for. Part of what is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The gate delivering its outbox to the origin.
    Forward,
    /// The shop's payment backend confirming a paid reservation at the gate.
    Payment,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Forward => "forward",
            Purpose::Payment => "payment",
        }
    }
}

/// The headers of a signed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    pub kid: String,
    pub timestamp_ms: u64,
    pub signature: String,
    /// The body's digest as signed (lowercase hex SHA-256).
    pub digest: String,
}

impl Signed {
    /// `(header, value)` pairs to send.
    pub fn headers(&self) -> [(&'static str, String); 4] {
        [
            (KEY_ID_HEADER, self.kid.clone()),
            (TIMESTAMP_HEADER, self.timestamp_ms.to_string()),
            (SIGNATURE_HEADER, self.signature.clone()),
            (DIGEST_HEADER, self.digest.clone()),
        ]
    }
}

/// What the receiver read from the three headers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Presented<'a> {
    pub kid: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Why a signature was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureError {
    Missing,
    UnknownKey,
    BadTimestamp,
    Stale,
    Malformed,
    Mismatch,
    /// `verify_head` without a well-formed digest header.
    DigestMissing,
}

impl SignatureError {
    pub fn describe(self) -> String {
        match self {
            SignatureError::Missing => {
                "the key id, timestamp or signature header is missing".into()
            }
            SignatureError::UnknownKey => "the key id is not one this service accepts".into(),
            SignatureError::BadTimestamp => "the timestamp is not epoch milliseconds".into(),
            SignatureError::Stale => format!(
                "the timestamp is more than {} s from the receiver's clock",
                SIGNATURE_SKEW_MS_MAX / 1000
            ),
            SignatureError::Malformed => "the signature is not v2=<64 hex digits>".into(),
            SignatureError::Mismatch => "the signature does not match the request".into(),
            SignatureError::DigestMissing => format!(
                "the {DIGEST_HEADER} header (the lowercase hex SHA-256 of the body) is \
                 missing or malformed"
            ),
        }
    }
}

/// The request as signed: everything that decides what it does.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub purpose: Purpose,
    pub method: &'a str,
    /// The path and query, as sent (percent-encoded).
    pub path: &'a str,
    pub body: &'a [u8],
}

/// The lowercase hex SHA-256 of a body, as signed.
pub fn digest(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

fn mac(key: &Key, timestamp_ms: u64, req: &Request) -> Hmac<Sha256> {
    mac_over(
        key,
        timestamp_ms,
        req.purpose,
        req.method,
        req.path,
        &digest(req.body),
    )
}

/// The MAC of the canonical string, given the body's digest.
fn mac_over(
    key: &Key,
    timestamp_ms: u64,
    purpose: Purpose,
    method: &str,
    path: &str,
    digest: &str,
) -> Hmac<Sha256> {
    let mut mac = key.mac();
    for field in [
        "flashgate-v2",
        purpose.as_str(),
        &key.kid,
        &timestamp_ms.to_string(),
        &method.to_ascii_uppercase(),
        path,
        digest,
    ] {
        mac.update(field.as_bytes());
        mac.update(b"\n");
    }
    mac
}

/// Signs `req` at `now_ms` with the set's signing key.
pub fn sign(keys: &KeySet, req: &Request, now_ms: u64) -> Signed {
    let key = keys.signing(now_ms);
    let digest = digest(req.body);
    let mac = mac_over(key, now_ms, req.purpose, req.method, req.path, &digest);
    Signed {
        kid: key.kid.clone(),
        timestamp_ms: now_ms,
        signature: format!("v2={}", hex::encode(mac.finalize().into_bytes())),
        digest,
    }
}

/// Checks the presented headers against the request, with any key of the
/// set. Returns the key id that verified. The comparison is constant-time.
pub fn verify<'k>(
    keys: &'k KeySet,
    presented: &Presented,
    req: &Request,
    now_ms: u64,
) -> Result<&'k str, SignatureError> {
    check_presented(keys, presented, now_ms)?.verify(req)
}

/// The presented headers, checked for everything but the MAC itself: a
/// known key, a timestamp inside the window, a well-formed signature.
/// Checking them before the body is read means a request that cannot be
/// genuine costs no body read.
pub struct Checked<'k> {
    key: &'k Key,
    timestamp_ms: u64,
    given: Vec<u8>,
}

impl<'k> Checked<'k> {
    /// Checks the MAC over `req` (constant-time), returning the key id.
    pub fn verify(self, req: &Request) -> Result<&'k str, SignatureError> {
        mac(self.key, self.timestamp_ms, req)
            .verify_slice(&self.given)
            .map(|()| self.key.kid.as_str())
            .map_err(|_| SignatureError::Mismatch)
    }

    /// Checks the MAC (constant-time) with the body's digest as the
    /// sender's `DIGEST_HEADER` states it, before the body is read: it
    /// proves the sender holds the key. `Head::body` then checks the body.
    pub fn verify_head(
        self,
        purpose: Purpose,
        method: &str,
        path: &str,
        digest: Option<&str>,
    ) -> Result<Head, SignatureError> {
        let digest = digest
            .map(str::trim)
            .filter(|d| d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or(SignatureError::DigestMissing)?;
        mac_over(self.key, self.timestamp_ms, purpose, method, path, digest)
            .verify_slice(&self.given)
            .map_err(|_| SignatureError::Mismatch)?;
        Ok(Head {
            kid: self.key.kid.clone(),
            digest: digest.to_string(),
        })
    }
}

/// Headers whose MAC verified over a stated digest: a request from a key
/// holder, whose body is yet to be checked. It owns what it holds, so a
/// receiver can keep it from the head to the body (an axum extractor).
pub struct Head {
    kid: String,
    digest: String,
}

impl Head {
    /// Whether `body` is the one signed, returning the key id.
    pub fn body(&self, body: &[u8]) -> Result<&str, SignatureError> {
        // The digest is public (it was sent in the clear), so a plain
        // comparison tells an attacker nothing.
        if digest(body) == self.digest {
            Ok(&self.kid)
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

/// The first half of `verify`: the headers alone.
pub fn check_presented<'k>(
    keys: &'k KeySet,
    presented: &Presented,
    now_ms: u64,
) -> Result<Checked<'k>, SignatureError> {
    let (Some(kid), Some(timestamp), Some(signature)) =
        (presented.kid, presented.timestamp, presented.signature)
    else {
        return Err(SignatureError::Missing);
    };
    let key = keys.get(kid.trim()).ok_or(SignatureError::UnknownKey)?;
    let ts: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if ts.abs_diff(now_ms) > SIGNATURE_SKEW_MS_MAX {
        return Err(SignatureError::Stale);
    }
    let given = signature
        .trim()
        .strip_prefix("v2=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|b| b.len() == 32)
        .ok_or(SignatureError::Malformed)?;
    Ok(Checked {
        key,
        timestamp_ms: ts,
        given,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> KeySet {
        KeySet::parse(text).unwrap()
    }

    const S1: &str = "k1:0123456789abcdef0123456789abcdef";
    const S2: &str = "k2:fedcba9876543210fedcba9876543210";

    /// The check from the headers alone proves the key and binds the body
    /// by its digest: a forged MAC, a missing or altered digest, or a body
    /// other than the one signed is refused, and each at its own step.
    #[test]
    fn a_signature_checks_from_the_headers_then_the_body() {
        let set = keys(S1);
        let now = 1_000_000_000;
        let body: &[u8] = b"{\"events\":[1]}";
        let req = Request {
            purpose: Purpose::Forward,
            method: "POST",
            path: "/v1/batches",
            body,
        };
        let s = sign(&set, &req, now);
        assert_eq!(s.digest, digest(body));
        assert_eq!(s.headers()[3], (DIGEST_HEADER, s.digest.clone()));
        let ts = s.timestamp_ms.to_string();
        let head = |sig: &str, purpose: Purpose, path: &str, digest: Option<&str>| {
            let presented = Presented {
                kid: Some("k1"),
                timestamp: Some(&ts),
                signature: Some(sig),
            };
            check_presented(&set, &presented, now)
                .and_then(|c| c.verify_head(purpose, "POST", path, digest))
                .map(|h| (h.kid, h.digest))
        };
        let (real, forward, path) = (s.signature.as_str(), Purpose::Forward, "/v1/batches");
        let ok = check_presented(
            &set,
            &Presented {
                kid: Some("k1"),
                timestamp: Some(&ts),
                signature: Some(real),
            },
            now,
        )
        .and_then(|c| c.verify_head(forward, "POST", path, Some(&s.digest)))
        .unwrap();
        assert_eq!(ok.body(body), Ok("k1"));
        assert_eq!(ok.body(b"{\"events\":[2]}"), Err(SignatureError::Mismatch));
        assert_eq!(ok.body(b""), Err(SignatureError::Mismatch));
        // A made-up MAC with a true digest: refused before any body.
        let forged = format!("v2={}", "ab".repeat(32));
        let refused = |r: Result<(String, String), SignatureError>| r.err();
        assert_eq!(
            refused(head(&forged, forward, path, Some(&s.digest))),
            Some(SignatureError::Mismatch)
        );
        // The digest of another body, or none, or not lowercase hex.
        let other = digest(b"{}");
        assert_eq!(
            refused(head(real, forward, path, Some(&other))),
            Some(SignatureError::Mismatch)
        );
        let upper = s.digest.to_ascii_uppercase();
        for bad in [
            None,
            Some(""),
            Some("AB"),
            Some(&s.digest[..63]),
            Some(&upper),
        ] {
            assert_eq!(
                refused(head(real, forward, path, bad)),
                Some(SignatureError::DigestMissing),
                "{bad:?}"
            );
        }
        // Another path or purpose.
        assert_eq!(
            refused(head(real, forward, "/v1/other", Some(&s.digest))),
            Some(SignatureError::Mismatch)
        );
        assert_eq!(
            refused(head(real, Purpose::Payment, path, Some(&s.digest))),
            Some(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_signature_covers_every_part_of_the_request() {
        let set = keys(S1);
        let now = 1_000_000_000;
        let req = Request {
            purpose: Purpose::Forward,
            method: "POST",
            path: "/v1/batches",
            body: b"{\"events\":[]}",
        };
        let s = sign(&set, &req, now);
        let p = |s: &Signed| {
            (
                s.kid.clone(),
                s.timestamp_ms.to_string(),
                s.signature.clone(),
            )
        };
        let (kid, ts, sig) = p(&s);
        let presented = Presented {
            kid: Some(&kid),
            timestamp: Some(&ts),
            signature: Some(&sig),
        };
        assert_eq!(verify(&set, &presented, &req, now + 1_000), Ok("k1"));
        let altered = [
            Request {
                purpose: Purpose::Payment,
                ..req
            },
            Request {
                method: "PUT",
                ..req
            },
            Request {
                path: "/v1/batches?x=1",
                ..req
            },
            Request {
                body: b"{\"events\":[1]}",
                ..req
            },
        ];
        for other in altered {
            assert_eq!(
                verify(&set, &presented, &other, now),
                Err(SignatureError::Mismatch),
                "{other:?}"
            );
        }
        // The same secret under another key id does not verify either.
        let renamed = keys(&S1.replace("k1:", "k9:"));
        let as_k9 = Presented {
            kid: Some("k9"),
            ..presented
        };
        assert_eq!(
            verify(&renamed, &as_k9, &req, now),
            Err(SignatureError::Mismatch)
        );
        let cases = [
            (
                Presented {
                    kid: None,
                    ..presented
                },
                SignatureError::Missing,
            ),
            (
                Presented {
                    kid: Some("nope"),
                    ..presented
                },
                SignatureError::UnknownKey,
            ),
            (
                Presented {
                    timestamp: Some("soon"),
                    ..presented
                },
                SignatureError::BadTimestamp,
            ),
            (
                Presented {
                    signature: Some("v1=00"),
                    ..presented
                },
                SignatureError::Malformed,
            ),
        ];
        for (presented, want) in cases {
            assert_eq!(verify(&set, &presented, &req, now), Err(want));
        }
        assert_eq!(
            verify(&set, &presented, &req, now + SIGNATURE_SKEW_MS_MAX + 1),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&keys(S2), &presented, &req, now),
            Err(SignatureError::UnknownKey)
        );
    }

    /// A rotation scheduled in every party's set, stage by stage as an
    /// operator rolls it out (`k2` becomes the signing key at 5000): at
    /// every stage, at every instant the stage can happen, every signature
    /// the signer makes verifies at the verifier.
    #[test]
    fn a_scheduled_rotation_never_fails_a_request() {
        let req = Request {
            purpose: Purpose::Payment,
            method: "POST",
            path: "/api/products/p/reservations/1/confirm",
            body: b"{}",
        };
        let both = format!("{S1},{}", S2.replace("k2:", "k2@5000:"));
        let any_time: &[u64] = &[0, 4_999, 5_000, 9_000];
        let after_switch: &[u64] = &[5_000, 9_000];
        let stages: [(&str, &str, &[u64]); 5] = [
            (S1, S1, any_time),
            // The new key reaches the verifiers first...
            (S1, &both, any_time),
            // ...then the signers, which switch by themselves at 5000...
            (&both, &both, any_time),
            // ...and after the switch the old key is retired everywhere.
            (&both, S2, after_switch),
            (S2, S2, after_switch),
        ];
        for (stage, (signer, verifier, times)) in stages.iter().enumerate() {
            let (signer, verifier) = (keys(signer), keys(verifier));
            for &now in *times {
                let s = sign(&signer, &req, now);
                let (ts, kid) = (s.timestamp_ms.to_string(), s.kid.clone());
                let presented = Presented {
                    kid: Some(&kid),
                    timestamp: Some(&ts),
                    signature: Some(&s.signature),
                };
                assert!(
                    verify(&verifier, &presented, &req, now).is_ok(),
                    "stage {stage} at {now}: signed with {kid}"
                );
            }
        }
    }
}
