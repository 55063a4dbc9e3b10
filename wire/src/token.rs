//! Buyer tokens: JSON Web Tokens (RFC 7519) signed with HS256 (RFC 7518),
//! in the JWS compact form (RFC 7515), so that a shop's existing login can
//! mint them. The header names its key (`kid`) in a `KeySet`.
//!
//! This is a small, strict implementation on the HMAC crates the project
//! already uses, not a general JWT library (docs/security.md says why): it
//! accepts exactly `alg: HS256` with a known `kid`, and the claims `sub`,
//! `aud`, `iat`, `exp` and optionally `nbf`. Anything else is refused.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::bounds;
use crate::keys::{Key, KeySet};

/// The longest token accepted, in bytes.
pub const TOKEN_BYTES_MAX: usize = 2048;
/// Clock skew forgiven on `exp`, `nbf` and `iat`, in seconds.
pub const LEEWAY_S: u64 = 30;
/// The longest lifetime a token may claim (`exp - iat`), in seconds.
pub const LIFETIME_S_MAX: u64 = 24 * 60 * 60;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
    kid: String,
    /// Extensions the issuer says a verifier must understand (RFC 7515,
    /// 4.1.11). The gate understands none, so a token naming any is
    /// refused, however well it is signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crit: Option<Vec<String>>,
}

/// What a buyer token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The buyer id.
    pub sub: String,
    pub aud: String,
    /// Issued at, epoch seconds.
    pub iat: u64,
    /// Expires at, epoch seconds.
    pub exp: u64,
    /// Not before, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
}

/// Why a token was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts of JSON, or too long.
    Malformed,
    /// Any algorithm but HS256, `none` included.
    Algorithm,
    /// The header names a critical extension (`crit`) the gate does not
    /// know.
    Critical,
    UnknownKey,
    Signature,
    Expired,
    NotYetValid,
    Audience,
    /// `exp - iat` is longer than `LIFETIME_S_MAX`.
    Lifetime,
    /// `sub` is not a valid buyer id.
    Subject,
}

impl TokenError {
    pub fn describe(self) -> String {
        match self {
            TokenError::Malformed => "the token is not a JWT".into(),
            TokenError::Algorithm => "the token is not signed with HS256".into(),
            TokenError::Critical => {
                "the token's header names a critical extension the gate does not know".into()
            }
            TokenError::UnknownKey => "the token's key id is not one the gate accepts".into(),
            TokenError::Signature => "the token's signature does not match".into(),
            TokenError::Expired => "the token has expired".into(),
            TokenError::NotYetValid => "the token is not valid yet".into(),
            TokenError::Audience => "the token is for another audience".into(),
            TokenError::Lifetime => {
                format!("the token claims a lifetime longer than {LIFETIME_S_MAX} s")
            }
            TokenError::Subject => format!(
                "the token's subject is not a buyer id (1 to {} of A-Z a-z 0-9 _ - .)",
                bounds::BUYER_ID_BYTES_MAX
            ),
        }
    }
}

fn mac(key: &Key, signing_input: &str) -> Hmac<Sha256> {
    let mut mac = key.mac();
    mac.update(signing_input.as_bytes());
    mac
}

fn encode_json<T: Serialize>(value: &T) -> String {
    // Plain structs of strings and numbers always serialize.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default())
}

/// Mints a token for `claims` with the set's signing key at `now_ms`.
pub fn mint(keys: &KeySet, claims: &Claims, now_ms: u64) -> String {
    let key = keys.signing(now_ms);
    let header = Header {
        alg: "HS256".into(),
        typ: Some("JWT".into()),
        kid: key.kid.clone(),
        crit: None,
    };
    let input = format!("{}.{}", encode_json(&header), encode_json(claims));
    let sig = URL_SAFE_NO_PAD.encode(mac(key, &input).finalize().into_bytes());
    format!("{input}.{sig}")
}

fn decode_json<T: for<'de> Deserialize<'de>>(part: &str) -> Result<T, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

/// Verifies `token` for `audience` at `now_s` (epoch seconds) and returns
/// its claims. The signature is checked, in constant time, before any claim
/// is read.
pub fn verify(
    keys: &KeySet,
    token: &str,
    audience: &str,
    now_s: u64,
) -> Result<Claims, TokenError> {
    let signed = verify_signature(keys, token)?;
    check_claims(&signed.claims, audience, now_s)?;
    Ok(signed.claims)
}

/// A token whose signature one key of a set proved, and its claims: what
/// the clock cannot change, so a verifier may remember it for a token it
/// meets again (`check_claims` is still due at each use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The key that signed it.
    pub kid: String,
    pub claims: Claims,
}

/// The first half of `verify`: the token's form, its algorithm and its
/// signature, checked in constant time before any claim is read.
pub fn verify_signature(keys: &KeySet, token: &str) -> Result<Signed, TokenError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let header: Header = decode_json(h)?;
    if header.alg != "HS256" {
        return Err(TokenError::Algorithm);
    }
    if header.crit.is_some() {
        return Err(TokenError::Critical);
    }
    let key = keys.get(&header.kid).ok_or(TokenError::UnknownKey)?;
    let sig = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed)?;
    let input = &token[..h.len() + 1 + c.len()];
    mac(key, input)
        .verify_slice(&sig)
        .map_err(|_| TokenError::Signature)?;
    let claims: Claims = decode_json(c)?;
    Ok(Signed {
        kid: header.kid,
        claims,
    })
}

/// The second half of `verify`: whether signed claims hold for `audience`
/// at `now_s`.
pub fn check_claims(claims: &Claims, audience: &str, now_s: u64) -> Result<(), TokenError> {
    if claims.aud != audience {
        return Err(TokenError::Audience);
    }
    if now_s >= claims.exp.saturating_add(LEEWAY_S) {
        return Err(TokenError::Expired);
    }
    let not_before = claims.nbf.unwrap_or(claims.iat).max(claims.iat);
    if not_before > now_s.saturating_add(LEEWAY_S) {
        return Err(TokenError::NotYetValid);
    }
    if claims.exp.saturating_sub(claims.iat) > LIFETIME_S_MAX {
        return Err(TokenError::Lifetime);
    }
    if !bounds::valid_buyer_id(&claims.sub) {
        return Err(TokenError::Subject);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &str =
        "t1:0123456789abcdef0123456789abcdef,t2@9000000:fedcba9876543210fedcba9876543210";

    fn claims(now_s: u64) -> Claims {
        Claims {
            sub: "alice".into(),
            aud: "flashgate".into(),
            iat: now_s,
            exp: now_s + 600,
            nbf: None,
        }
    }

    fn forge(header: &str, claims: &str, sig: &[u8]) -> String {
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims),
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    #[test]
    fn a_well_signed_token_naming_a_critical_extension_is_refused() {
        let keys = KeySet::parse("t1:0123456789abcdef0123456789abcdef").unwrap();
        let now = 1_800_000_000;
        let key = keys.signing(now * 1000);
        for crit in [r#"["exp"]"#, r#"["b64"]"#, r#"[]"#] {
            let header = format!(r#"{{"alg":"HS256","kid":"t1","crit":{crit},"b64":true}}"#);
            let claims = serde_json::to_string(&claims(now)).unwrap();
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(&header),
                URL_SAFE_NO_PAD.encode(&claims)
            );
            let sig = URL_SAFE_NO_PAD.encode(mac(key, &input).finalize().into_bytes());
            let token = format!("{input}.{sig}");
            assert_eq!(
                verify(&keys, &token, "flashgate", now),
                Err(TokenError::Critical),
                "{header}"
            );
        }
    }

    #[test]
    fn a_minted_token_verifies_and_every_forgery_fails() {
        let keys = KeySet::parse(KEYS).unwrap();
        let now = 1_800_000_000;
        let token = mint(&keys, &claims(now), now * 1000);
        assert_eq!(
            verify(&keys, &token, "flashgate", now + 10),
            Ok(claims(now))
        );
        let parts: Vec<&str> = token.split('.').collect();
        let other = KeySet::parse("t1:ffffffffffffffffffffffffffffffff").unwrap();
        let swapped_claims = {
            let mut c = claims(now);
            c.sub = "mallory".into();
            format!("{}.{}.{}", parts[0], encode_json(&c), parts[2])
        };
        let cases: Vec<(String, TokenError)> = vec![
            ("not a token".into(), TokenError::Malformed),
            (format!("{token}.x"), TokenError::Malformed),
            ("a".repeat(TOKEN_BYTES_MAX + 1), TokenError::Malformed),
            (
                forge(r#"{"alg":"none","kid":"t1"}"#, r#"{}"#, b""),
                TokenError::Algorithm,
            ),
            (
                forge(r#"{"alg":"HS512","kid":"t1"}"#, r#"{}"#, b"x"),
                TokenError::Algorithm,
            ),
            (
                forge(r#"{"alg":"HS256","kid":"zz"}"#, r#"{}"#, b"x"),
                TokenError::UnknownKey,
            ),
            (
                forge(r#"{"alg":"HS256"}"#, r#"{}"#, b"x"),
                TokenError::Malformed,
            ),
            (swapped_claims, TokenError::Signature),
            (
                mint(&other, &claims(now), now * 1000),
                TokenError::Signature,
            ),
        ];
        for (token, want) in cases {
            assert_eq!(
                verify(&keys, &token, "flashgate", now),
                Err(want),
                "{token}"
            );
        }
        let with = |f: &dyn Fn(&mut Claims)| {
            let mut c = claims(now);
            f(&mut c);
            mint(&keys, &c, now * 1000)
        };
        let claim_cases: Vec<(String, TokenError)> = vec![
            (with(&|c| c.exp = now - LEEWAY_S - 1), TokenError::Expired),
            (
                with(&|c| c.nbf = Some(now + LEEWAY_S + 5)),
                TokenError::NotYetValid,
            ),
            (
                with(&|c| c.iat = now + LEEWAY_S + 5),
                TokenError::NotYetValid,
            ),
            (with(&|c| c.aud = "elsewhere".into()), TokenError::Audience),
            (
                with(&|c| c.exp = now + LIFETIME_S_MAX + 10),
                TokenError::Lifetime,
            ),
            (with(&|c| c.sub = "has space".into()), TokenError::Subject),
        ];
        for (token, want) in claim_cases {
            assert_eq!(verify(&keys, &token, "flashgate", now), Err(want));
        }
        // Within the leeway, clocks that disagree a little still agree.
        let skewed = with(&|c| c.iat = now + 20);
        assert!(verify(&keys, &skewed, "flashgate", now).is_ok());
    }

    #[test]
    fn the_header_names_the_signing_key() {
        let keys = KeySet::parse(KEYS).unwrap();
        let before = mint(&keys, &claims(1), 1_000);
        let after = mint(&keys, &claims(9_001), 9_000_001);
        let kid = |t: &str| {
            decode_json::<Header>(t.split('.').next().unwrap())
                .unwrap()
                .kid
        };
        assert_eq!((kid(&before), kid(&after)), ("t1".into(), "t2".into()));
        // A token minted before the switch verifies after it.
        assert!(verify(&keys, &before, "flashgate", 2).is_ok());
    }
}
