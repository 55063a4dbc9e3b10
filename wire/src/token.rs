//! Buyer tokens: JSON Web Tokens (RFC 7519) in the JWS compact form (RFC
//! 7515), of two kinds:
//! - HS256 (RFC 7518), signed with a key of a shared `KeySet`: what the
//!   shop's login mints, or the origin's `/v1/buyer-tokens`, or the gate's
//!   dev sessions. Minted and verified here, whole.
//! - RS256 and ES256, signed by the shop's identity provider with a key of
//!   its published `Jwks`. Parsed, checked and matched to their key here;
//!   the signature itself is left to the runtime's WebCrypto, so `decide`
//!   answers such a token with `Decision::Verify`, a value naming what to
//!   verify with which key, and the buyer it proves if it verifies.
//!
//! This is a small, strict implementation, not a general JWT library
//! (docs/security.md says why). The header must name a known `kid`, and
//! its `alg` must be the one that key is pinned to: HS256 for a shared key,
//! the JWKS key's own for a provider's. Nothing in the header ever chooses
//! a key or an algorithm the configuration did not (`jku`, `jwk`, `x5u`
//! are not read). The claims are `aud` (a string, or an array of them, RFC
//! 7519 4.1.3), `exp`, optionally `iat` and `nbf`, `iss` for a provider's
//! token, and the subject. Every refusal is a `TokenError`, whose
//! `describe` is the one text a verifier answers with: it names the check
//! that failed, never a key.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::bounds::{
    self, HS256_TOKEN_BYTES_MAX, TOKEN_BYTES_MAX, TOKEN_LEEWAY_S, TOKEN_LIFETIME_S_MAX,
};
use crate::jwks::{Jwk, Jwks};
use crate::keys::{Key, KeySet};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    /// Extensions the issuer says a verifier must understand (RFC 7515,
    /// 4.1.11). The gate understands none, so a token naming any is
    /// refused, however well it is signed, whatever the value's form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crit: Option<Value>,
}

/// What a minted buyer token says (`mint`).
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

/// A claim a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// `sub`, or the claim a provider's buyers are named by
    /// (`Provider::subject_claim`).
    Subject,
    Iss,
    Aud,
    Exp,
    Nbf,
    Iat,
}

impl Claim {
    fn name(self) -> &'static str {
        match self {
            Claim::Subject => "subject",
            Claim::Iss => "iss",
            Claim::Aud => "aud",
            Claim::Exp => "exp",
            Claim::Nbf => "nbf",
            Claim::Iat => "iat",
        }
    }

    /// What the claim must be.
    fn form(self) -> &'static str {
        match self {
            Claim::Subject => "a non-empty string",
            Claim::Iss => "a string",
            Claim::Aud => "a string or an array of strings",
            Claim::Exp | Claim::Nbf | Claim::Iat => "a NumericDate (seconds since the epoch)",
        }
    }
}

/// Why a token was refused: each check that can fail, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Longer than the bound for its kind: `TOKEN_BYTES_MAX` for any
    /// token, `HS256_TOKEN_BYTES_MAX` for one signed with a shared key.
    TooLarge {
        bytes_max: usize,
    },
    /// Not three base64url parts, a header and claims of JSON objects.
    Malformed,
    /// An algorithm the gate never accepts: anything but HS256, RS256 and
    /// ES256, `none` included.
    Algorithm,
    /// The header names a critical extension (`crit`) the gate does not
    /// know.
    Critical,
    /// The header names no key (`kid`).
    KeyIdMissing,
    /// No key of the configuration has this id.
    UnknownKey,
    /// The header's `alg` is not the one its key is pinned to: an HS256
    /// header naming a provider's RSA key (alg confusion), an RS256 one
    /// naming a shared key, an ES256 one naming an RSA key.
    KeyAlgorithm,
    Signature,
    /// A claim the checks need is absent.
    Missing(Claim),
    /// A claim is present but not of its form (`Claim::form`).
    Ill(Claim),
    Expired,
    NotYetValid,
    /// `aud` does not name the gate's audience.
    Audience,
    /// `iss` is not the provider the gate trusts.
    Issuer,
    /// `exp - iat` (or `exp - now` without `iat`) is longer than
    /// `TOKEN_LIFETIME_S_MAX`.
    Lifetime,
    /// An HS256 token's `sub` is not a buyer id.
    Subject,
}

impl TokenError {
    /// The refusal's text, for a problem document's `detail`.
    pub fn describe(self) -> String {
        match self {
            TokenError::TooLarge { bytes_max } => {
                format!("the token is longer than {bytes_max} bytes")
            }
            TokenError::Malformed => {
                "the token is not a JWT (three base64url parts: a header and claims of JSON, and a signature)"
                    .into()
            }
            TokenError::Algorithm => {
                "the token's alg is not one the gate accepts (HS256, RS256, ES256; never none)"
                    .into()
            }
            TokenError::Critical => {
                "the token's header names a critical extension the gate does not know".into()
            }
            TokenError::KeyIdMissing => "the token's header names no key id (kid)".into(),
            TokenError::UnknownKey => "the token's key id is not one the gate accepts".into(),
            TokenError::KeyAlgorithm => {
                "the token's alg is not the algorithm its key is pinned to".into()
            }
            TokenError::Signature => "the token's signature does not match".into(),
            TokenError::Missing(Claim::Iss) => {
                "the token has no iss claim, which a token signed by the identity provider's key must have"
                    .into()
            }
            TokenError::Missing(c) => format!("the token has no {} claim", c.name()),
            TokenError::Ill(c) => format!("the token's {} claim is not {}", c.name(), c.form()),
            TokenError::Expired => "the token has expired".into(),
            TokenError::NotYetValid => "the token is not valid yet".into(),
            TokenError::Audience => "the token's aud does not name this gate".into(),
            TokenError::Issuer => "the token's iss is not the issuer the gate trusts".into(),
            TokenError::Lifetime => format!(
                "the token claims a lifetime longer than {TOKEN_LIFETIME_S_MAX} s"
            ),
            TokenError::Subject => format!(
                "the token's sub is not a buyer id (1 to {} of A-Z a-z 0-9 _ - .)",
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
        kid: Some(key.kid.clone()),
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

/// The buyer a token proves, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buyer {
    /// A buyer id (`bounds::valid_buyer_id`).
    pub id: String,
    /// The token's `exp`, epoch seconds.
    pub exp_s: u64,
}

/// A token whose form, key and claims passed, signed by a provider's key:
/// its buyer is proven once the runtime verifies `signature` over
/// `signing_input` with `key` (`key.alg` says how; for ES256 the signature
/// is raw r‖s, 64 bytes, the form WebCrypto takes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unverified<'a> {
    pub key: &'a Jwk,
    /// The token's first two parts and the dot between them, as signed.
    pub signing_input: &'a str,
    pub signature: Vec<u8>,
    pub buyer: Buyer,
}

impl Unverified<'_> {
    /// The buyer, if the runtime's verify said the signature holds.
    pub fn conclude(self, verified: bool) -> Result<Buyer, TokenError> {
        if verified {
            Ok(self.buyer)
        } else {
            Err(TokenError::Signature)
        }
    }
}

/// What a token that passed every pure check asks for next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<'a> {
    /// Signed with a shared key, and the signature checked: proven.
    Proven(Buyer),
    /// Signed by a provider's key: one verify call to go.
    Verify(Unverified<'a>),
}

/// The identity provider whose tokens the gate accepts beside its HS256
/// ones: its keys, who it is, and how its users become buyers.
#[derive(Clone)]
pub struct Provider {
    jwks: Jwks,
    issuer: String,
    subject_claim: String,
    /// Keys the buyer ids derived from subjects that are not buyer ids
    /// (`buyer_id`); derived by the gate from its own secret.
    buyer_ids: Hmac<Sha256>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The derived key is never printed.
        f.debug_struct("Provider")
            .field("jwks", &self.jwks)
            .field("issuer", &self.issuer)
            .field("subject_claim", &self.subject_claim)
            .finish_non_exhaustive()
    }
}

/// The claim a provider's users are named by unless configured otherwise.
pub const SUBJECT_CLAIM_DEFAULT: &str = "sub";

impl Provider {
    /// A provider whose tokens carry `iss` equal to `issuer`, signed by a
    /// key of `jwks`, naming the user in claim `subject_claim` (`sub` by
    /// default; Firebase's `user_id`, a custom `uid`). `buyer_ids` keys
    /// the ids derived from subjects that are not buyer ids.
    pub fn new(
        jwks: Jwks,
        issuer: &str,
        subject_claim: &str,
        buyer_ids: Hmac<Sha256>,
    ) -> Result<Provider, ConfigError> {
        if issuer.is_empty() {
            return Err(ConfigError::Issuer);
        }
        if subject_claim.is_empty() {
            return Err(ConfigError::SubjectClaim);
        }
        Ok(Provider {
            jwks,
            issuer: issuer.into(),
            subject_claim: subject_claim.into(),
            buyer_ids,
        })
    }
}

/// Why a verifier's configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A key id both in the HS256 key set and in the JWKS: a token naming
    /// it could be checked against either, so neither may have it.
    KidInBoth(String),
    /// A provider without an issuer: some providers share keys across
    /// tenants, so `iss` is what binds a token to the shop's.
    Issuer,
    SubjectClaim,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::KidInBoth(kid) => write!(
                f,
                "key id {kid} is both an HS256 key and a JWKS key; rename one"
            ),
            ConfigError::Issuer => write!(f, "a JWKS needs the issuer its tokens must name"),
            ConfigError::SubjectClaim => write!(f, "the subject claim's name is empty"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Everything a verifier of buyer tokens holds: the HS256 keys, the
/// audience every token must name, and the identity provider, if one is
/// trusted.
#[derive(Clone, Debug)]
pub struct Verifier {
    hs256: KeySet,
    audience: String,
    provider: Option<Provider>,
}

impl Verifier {
    /// Refuses a provider whose JWKS shares a key id with `hs256`.
    pub fn new(
        hs256: KeySet,
        audience: &str,
        provider: Option<Provider>,
    ) -> Result<Verifier, ConfigError> {
        if let Some(p) = &provider {
            if let Some(kid) = p.jwks.kids().find(|k| hs256.get(k).is_some()) {
                return Err(ConfigError::KidInBoth(kid.into()));
            }
        }
        Ok(Verifier {
            hs256,
            audience: audience.into(),
            provider,
        })
    }

    /// The HS256 keys, which also mint the gate's own tokens.
    pub fn hs256(&self) -> &KeySet {
        &self.hs256
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// Every check of `token` at `now_ms` that needs no public-key
    /// arithmetic: its size, form, algorithm and key, the HS256 signature,
    /// and the claims. A provider's token passes as `Decision::Verify`.
    pub fn decide<'a>(&'a self, token: &'a str, now_ms: u64) -> Result<Decision<'a>, TokenError> {
        decide(
            &self.hs256,
            &self.audience,
            self.provider.as_ref(),
            token,
            now_ms / 1000,
        )
    }
}

/// Verifies an HS256 `token` for `audience` at `now_s` (epoch seconds),
/// for a verifier that trusts no provider (the origin).
pub fn verify(keys: &KeySet, token: &str, audience: &str, now_s: u64) -> Result<Buyer, TokenError> {
    match decide(keys, audience, None, token, now_s)? {
        Decision::Proven(buyer) => Ok(buyer),
        // Without a provider no key is a public key, so no token comes
        // here; were one to, an unverified signature is a bad one.
        Decision::Verify(_) => Err(TokenError::Signature),
    }
}

/// The key a token's `kid` names.
enum Chosen<'a> {
    Shared(&'a Key),
    Provider(&'a Provider, &'a Jwk),
}

fn decide<'a>(
    hs256: &'a KeySet,
    audience: &str,
    provider: Option<&'a Provider>,
    token: &'a str,
    now_s: u64,
) -> Result<Decision<'a>, TokenError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(TokenError::TooLarge {
            bytes_max: TOKEN_BYTES_MAX,
        });
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let header: Header = decode_json(h)?;
    if !matches!(header.alg.as_str(), "HS256" | "RS256" | "ES256") {
        return Err(TokenError::Algorithm);
    }
    if header.crit.is_some() {
        return Err(TokenError::Critical);
    }
    let kid = header.kid.as_deref().ok_or(TokenError::KeyIdMissing)?;
    let chosen = match (hs256.get(kid), provider) {
        (Some(key), _) => Chosen::Shared(key),
        (None, Some(p)) => Chosen::Provider(p, p.jwks.get(kid).ok_or(TokenError::UnknownKey)?),
        (None, None) => return Err(TokenError::UnknownKey),
    };
    let signature = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed)?;
    let signing_input = &token[..h.len() + 1 + c.len()];
    match chosen {
        Chosen::Shared(key) => {
            if header.alg != "HS256" {
                return Err(TokenError::KeyAlgorithm);
            }
            if token.len() > HS256_TOKEN_BYTES_MAX {
                return Err(TokenError::TooLarge {
                    bytes_max: HS256_TOKEN_BYTES_MAX,
                });
            }
            // The signature, in constant time, before any claim is read.
            mac(key, signing_input)
                .verify_slice(&signature)
                .map_err(|_| TokenError::Signature)?;
            let claims: Map<String, Value> = decode_json(c)?;
            let exp_s = check_claims(&claims, audience, None, now_s)?;
            let sub = subject(&claims, "sub")?;
            if !bounds::valid_buyer_id(sub) {
                return Err(TokenError::Subject);
            }
            Ok(Decision::Proven(Buyer {
                id: sub.into(),
                exp_s,
            }))
        }
        Chosen::Provider(p, key) => {
            if header.alg != key.alg.name() {
                return Err(TokenError::KeyAlgorithm);
            }
            // A signature of another length cannot verify; for ES256 this
            // refuses the DER form, which WebCrypto does not take.
            if signature.len() != key.signature_bytes() {
                return Err(TokenError::Signature);
            }
            let claims: Map<String, Value> = decode_json(c)?;
            let exp_s = check_claims(&claims, audience, Some(&p.issuer), now_s)?;
            let value = subject(&claims, &p.subject_claim)?;
            Ok(Decision::Verify(Unverified {
                key,
                signing_input,
                signature,
                buyer: Buyer {
                    id: buyer_id(&p.buyer_ids, &p.issuer, value),
                    exp_s,
                },
            }))
        }
    }
}

/// A NumericDate claim, if present: whole seconds, or a fraction of one
/// (RFC 7519, 2), taken down to the second.
fn date(claims: &Map<String, Value>, claim: Claim) -> Result<Option<u64>, TokenError> {
    let Some(v) = claims.get(claim.name()) else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    match v.as_f64() {
        Some(f) if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 => Ok(Some(f as u64)),
        _ => Err(TokenError::Ill(claim)),
    }
}

/// The subject claim `name`: a non-empty string.
fn subject<'c>(claims: &'c Map<String, Value>, name: &str) -> Result<&'c str, TokenError> {
    match claims.get(name) {
        None => Err(TokenError::Missing(Claim::Subject)),
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(TokenError::Ill(Claim::Subject)),
    }
}

/// Whether the claims hold for `audience` (and `issuer`, for a provider's
/// token) at `now_s`; their `exp` if so. One set of checks for every kind
/// of token.
fn check_claims(
    claims: &Map<String, Value>,
    audience: &str,
    issuer: Option<&str>,
    now_s: u64,
) -> Result<u64, TokenError> {
    let exp = date(claims, Claim::Exp)?.ok_or(TokenError::Missing(Claim::Exp))?;
    let iat = date(claims, Claim::Iat)?;
    let nbf = date(claims, Claim::Nbf)?;
    let names_us = match claims.get("aud") {
        None => return Err(TokenError::Missing(Claim::Aud)),
        Some(Value::String(a)) => a == audience,
        Some(Value::Array(list)) => {
            if !list.iter().all(Value::is_string) {
                return Err(TokenError::Ill(Claim::Aud));
            }
            list.iter().any(|a| a.as_str() == Some(audience))
        }
        Some(_) => return Err(TokenError::Ill(Claim::Aud)),
    };
    if !names_us {
        return Err(TokenError::Audience);
    }
    if let Some(issuer) = issuer {
        match claims.get("iss") {
            None => return Err(TokenError::Missing(Claim::Iss)),
            Some(Value::String(i)) if i == issuer => {}
            Some(Value::String(_)) => return Err(TokenError::Issuer),
            Some(_) => return Err(TokenError::Ill(Claim::Iss)),
        }
    }
    if now_s >= exp.saturating_add(TOKEN_LEEWAY_S) {
        return Err(TokenError::Expired);
    }
    let not_before = nbf.max(iat);
    if not_before.is_some_and(|t| t > now_s.saturating_add(TOKEN_LEEWAY_S)) {
        return Err(TokenError::NotYetValid);
    }
    // Without `iat` the lifetime left is what `exp` allows from now.
    if exp.saturating_sub(iat.unwrap_or(now_s)) > TOKEN_LIFETIME_S_MAX {
        return Err(TokenError::Lifetime);
    }
    Ok(exp)
}

/// What a buyer id derived from a subject starts with. A subject that
/// starts with it is derived too, even if it is a buyer id, so that no
/// user can be named, by a provider that lets users choose their subject,
/// as the buyer another user's subject became.
pub const DERIVED_BUYER_ID_PREFIX: &str = "h.";

/// The buyer id of the user a provider names `value`, as issuer `issuer`:
/// the value itself when it is a buyer id (so that the shop finds the
/// orders of its user `alice` under `alice`); otherwise `h.` and the
/// base64url of HMAC-SHA256(key, issuer, value), 45 characters. The same
/// user always gets the same id, which is what holds the per-buyer limit;
/// without the key no one can tell which user an id is, nor make a value
/// that lands on another's id.
pub fn buyer_id(key: &Hmac<Sha256>, issuer: &str, value: &str) -> String {
    if bounds::valid_buyer_id(value) && !value.starts_with(DERIVED_BUYER_ID_PREFIX) {
        return value.into();
    }
    let mut mac = key.clone();
    // The issuer's length first, so that no (issuer, value) pair reads as
    // another.
    mac.update(&(issuer.len() as u64).to_be_bytes());
    mac.update(issuer.as_bytes());
    mac.update(value.as_bytes());
    format!(
        "{DERIVED_BUYER_ID_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mac::hmac_sha256;
    use proptest::prelude::*;
    use serde_json::json;

    const KEYS: &str =
        "t1:0123456789abcdef0123456789abcdef,t2@9000000:fedcba9876543210fedcba9876543210";
    const NOW: u64 = 1_800_000_000;
    const ISSUER: &str = "https://login.example.com/";
    const RSA_KID: &str = "rsa-key-2026";
    const EC_KID: &str = "ec-key-2026";

    fn b64(b: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(b)
    }

    /// A 2048-bit modulus's bytes. The pure checks read only its length:
    /// the arithmetic is WebCrypto's.
    fn modulus() -> Vec<u8> {
        (0..256)
            .map(|i| if i == 0 { 0xb3 } else { i as u8 })
            .collect()
    }

    fn jwks_json() -> String {
        json!({"keys": [
            {"kty": "RSA", "kid": RSA_KID, "alg": "RS256", "use": "sig",
             "n": b64(&modulus()), "e": "AQAB", "x5c": ["MIIC..."]},
            {"kty": "EC", "kid": EC_KID, "crv": "P-256",
             "x": b64(&[1; 32]), "y": b64(&[2; 32])},
        ]})
        .to_string()
    }

    fn ids_key() -> Hmac<Sha256> {
        hmac_sha256(b"the buyer ids key of these tests")
    }

    fn verifier(subject_claim: &str) -> Verifier {
        let jwks = Jwks::parse(&jwks_json()).unwrap();
        let provider = Provider::new(jwks, ISSUER, subject_claim, ids_key()).unwrap();
        Verifier::new(KeySet::parse(KEYS).unwrap(), "flashgate", Some(provider)).unwrap()
    }

    /// Claims that pass, with `patch` applied: a null removes a claim.
    fn claims(patch: Value) -> String {
        let mut c = json!({
            "sub": "alice", "aud": "flashgate", "iss": ISSUER,
            "iat": NOW, "exp": NOW + 600,
        });
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c.to_string()
    }

    /// A token signed with HS256 key `kid` of `KEYS`, whatever its header
    /// says.
    fn hs(header: Value, claims: &str) -> String {
        let keys = KeySet::parse(KEYS).unwrap();
        let key = keys.get(header["kid"].as_str().unwrap_or("t1")).unwrap();
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.as_bytes())
        );
        let sig = b64(&mac(key, &input).finalize().into_bytes());
        format!("{input}.{sig}")
    }

    /// A token with a signature of `sig_bytes` bytes, which only a verify
    /// call could judge.
    fn signed_by_provider(header: Value, claims: &str, sig_bytes: usize) -> String {
        format!(
            "{}.{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.as_bytes()),
            b64(&vec![7; sig_bytes])
        )
    }

    fn rs(claims: &str) -> String {
        signed_by_provider(
            json!({"alg": "RS256", "kid": RSA_KID, "typ": "JWT"}),
            claims,
            256,
        )
    }

    fn es(claims: &str) -> String {
        signed_by_provider(json!({"alg": "ES256", "kid": EC_KID}), claims, 64)
    }

    /// What a case must come to.
    #[derive(Debug)]
    enum Want {
        /// HS256: proven, as this buyer.
        Proven(&'static str),
        /// A provider's token: to verify with this key, as this buyer.
        Verify(&'static str, String),
        /// Refused, with a detail that contains this.
        Refused(TokenError, &'static str),
    }

    /// Every case through one verifier at `NOW`; a refusal's detail must
    /// name its check and never a key's id or secret.
    fn check(v: &Verifier, cases: Vec<(&str, String, Want)>) {
        for (name, token, want) in cases {
            let got = v.decide(&token, NOW * 1000);
            match (&got, &want) {
                (Ok(Decision::Proven(b)), Want::Proven(id)) => assert_eq!(b.id, *id, "{name}"),
                (Ok(Decision::Verify(u)), Want::Verify(kid, id)) => {
                    assert_eq!((u.key.kid.as_str(), &u.buyer.id), (*kid, id), "{name}");
                    assert_eq!(u.signing_input, token.rsplit_once('.').unwrap().0, "{name}");
                }
                (Err(e), Want::Refused(want, detail)) => {
                    assert_eq!(e, want, "{name}");
                    let text = e.describe();
                    assert!(text.contains(detail), "{name}: {text}");
                    for secret in [RSA_KID, EC_KID, "0123456789abcdef", "t1"] {
                        assert!(!text.contains(secret), "{name} names a key: {text}");
                    }
                }
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn refused(e: TokenError, detail: &'static str) -> Want {
        Want::Refused(e, detail)
    }

    #[test]
    fn hs256_tokens_are_checked_as_before_with_aud_as_a_string_or_an_array() {
        let keys = KeySet::parse(KEYS).unwrap();
        let minted = mint(
            &keys,
            &Claims {
                sub: "alice".into(),
                aud: "flashgate".into(),
                iat: NOW,
                exp: NOW + 600,
                nbf: None,
            },
            NOW * 1000,
        );
        assert_eq!(
            verify(&keys, &minted, "flashgate", NOW + 10),
            Ok(Buyer {
                id: "alice".into(),
                exp_s: NOW + 600
            })
        );
        let h = json!({"alg": "HS256", "kid": "t1", "typ": "JWT"});
        let other = KeySet::parse("t1:ffffffffffffffffffffffffffffffff").unwrap();
        let parts: Vec<String> = hs(h.clone(), &claims(json!({})))
            .split('.')
            .map(String::from)
            .collect();
        check(
            &verifier("sub"),
            vec![
                ("minted", minted, Want::Proven("alice")),
                (
                    "aud string",
                    hs(h.clone(), &claims(json!({}))),
                    Want::Proven("alice"),
                ),
                (
                    "aud array",
                    hs(
                        h.clone(),
                        &claims(json!({"aud": ["shop-api", "flashgate"]})),
                    ),
                    Want::Proven("alice"),
                ),
                (
                    "no iat, exp bounds it",
                    hs(h.clone(), &claims(json!({"iat": null}))),
                    Want::Proven("alice"),
                ),
                (
                    "a fraction of a second",
                    hs(h.clone(), &claims(json!({"exp": (NOW + 600) as f64 + 0.5}))),
                    Want::Proven("alice"),
                ),
                (
                    "within the leeway, clocks that disagree a little agree",
                    hs(h.clone(), &claims(json!({"iat": NOW + 20}))),
                    Want::Proven("alice"),
                ),
                (
                    "an HS256 token needs no iss, even beside a provider",
                    hs(h.clone(), &claims(json!({"iss": null}))),
                    Want::Proven("alice"),
                ),
                (
                    "the second key",
                    hs(json!({"alg": "HS256", "kid": "t2"}), &claims(json!({}))),
                    Want::Proven("alice"),
                ),
                (
                    "not a token",
                    "not a token".into(),
                    refused(TokenError::Malformed, "not a JWT"),
                ),
                (
                    "four parts",
                    format!("{}.x", hs(h.clone(), &claims(json!({})))),
                    refused(TokenError::Malformed, "not a JWT"),
                ),
                (
                    "claims that are not an object",
                    hs(h.clone(), "[1,2]"),
                    refused(TokenError::Malformed, "not a JWT"),
                ),
                (
                    "larger than any token",
                    "a".repeat(TOKEN_BYTES_MAX + 1),
                    refused(
                        TokenError::TooLarge {
                            bytes_max: TOKEN_BYTES_MAX,
                        },
                        "longer than 8192 bytes",
                    ),
                ),
                (
                    "larger than an HS256 token",
                    hs(
                        h.clone(),
                        &claims(json!({"pad": "x".repeat(HS256_TOKEN_BYTES_MAX)})),
                    ),
                    refused(
                        TokenError::TooLarge {
                            bytes_max: HS256_TOKEN_BYTES_MAX,
                        },
                        "longer than 2048 bytes",
                    ),
                ),
                (
                    "alg none",
                    format!(
                        "{}.{}.",
                        b64(br#"{"alg":"none","kid":"t1"}"#),
                        b64(claims(json!({})).as_bytes())
                    ),
                    refused(TokenError::Algorithm, "never none"),
                ),
                (
                    "alg HS512",
                    hs(json!({"alg": "HS512", "kid": "t1"}), &claims(json!({}))),
                    refused(TokenError::Algorithm, "alg"),
                ),
                (
                    "no kid",
                    hs(json!({"alg": "HS256"}), &claims(json!({}))),
                    refused(TokenError::KeyIdMissing, "no key id"),
                ),
                (
                    "unknown kid",
                    format!(
                        "{}.{}.{}",
                        b64(br#"{"alg":"HS256","kid":"zz"}"#),
                        parts[1],
                        parts[2]
                    ),
                    refused(TokenError::UnknownKey, "key id is not one"),
                ),
                (
                    "altered claims",
                    format!(
                        "{}.{}.{}",
                        parts[0],
                        b64(claims(json!({"sub": "mallory"})).as_bytes()),
                        parts[2]
                    ),
                    refused(TokenError::Signature, "signature does not match"),
                ),
                (
                    "another secret under the same kid",
                    mint(
                        &other,
                        &Claims {
                            sub: "alice".into(),
                            aud: "flashgate".into(),
                            iat: NOW,
                            exp: NOW + 600,
                            nbf: None,
                        },
                        NOW * 1000,
                    ),
                    refused(TokenError::Signature, "signature does not match"),
                ),
                (
                    "expired",
                    hs(
                        h.clone(),
                        &claims(json!({"iat": NOW - 700, "exp": NOW - TOKEN_LEEWAY_S - 1})),
                    ),
                    refused(TokenError::Expired, "expired"),
                ),
                (
                    "nbf ahead",
                    hs(h.clone(), &claims(json!({"nbf": NOW + TOKEN_LEEWAY_S + 5}))),
                    refused(TokenError::NotYetValid, "not valid yet"),
                ),
                (
                    "iat ahead",
                    hs(h.clone(), &claims(json!({"iat": NOW + TOKEN_LEEWAY_S + 5}))),
                    refused(TokenError::NotYetValid, "not valid yet"),
                ),
                (
                    "another audience",
                    hs(h.clone(), &claims(json!({"aud": "elsewhere"}))),
                    refused(TokenError::Audience, "aud"),
                ),
                (
                    "an array without the audience",
                    hs(
                        h.clone(),
                        &claims(json!({"aud": ["elsewhere", "flashgate2"]})),
                    ),
                    refused(TokenError::Audience, "aud"),
                ),
                (
                    "an empty array",
                    hs(h.clone(), &claims(json!({"aud": []}))),
                    refused(TokenError::Audience, "aud"),
                ),
                (
                    "an array of numbers",
                    hs(h.clone(), &claims(json!({"aud": ["flashgate", 7]}))),
                    refused(
                        TokenError::Ill(Claim::Aud),
                        "aud claim is not a string or an array",
                    ),
                ),
                (
                    "no aud",
                    hs(h.clone(), &claims(json!({"aud": null}))),
                    refused(TokenError::Missing(Claim::Aud), "no aud claim"),
                ),
                (
                    "no exp",
                    hs(h.clone(), &claims(json!({"exp": null}))),
                    refused(TokenError::Missing(Claim::Exp), "no exp claim"),
                ),
                (
                    "exp as text",
                    hs(h.clone(), &claims(json!({"exp": "tomorrow"}))),
                    refused(
                        TokenError::Ill(Claim::Exp),
                        "exp claim is not a NumericDate",
                    ),
                ),
                (
                    "a day and more from iat",
                    hs(
                        h.clone(),
                        &claims(json!({"exp": NOW + TOKEN_LIFETIME_S_MAX + 10})),
                    ),
                    refused(TokenError::Lifetime, "lifetime longer than 86400 s"),
                ),
                (
                    "a day and more from now, without iat",
                    hs(
                        h.clone(),
                        &claims(json!({"iat": null, "exp": NOW + TOKEN_LIFETIME_S_MAX + 10})),
                    ),
                    refused(TokenError::Lifetime, "lifetime"),
                ),
                (
                    "a sub that is not a buyer id",
                    hs(h.clone(), &claims(json!({"sub": "auth0|abc"}))),
                    refused(TokenError::Subject, "sub is not a buyer id"),
                ),
                (
                    "no sub",
                    hs(h.clone(), &claims(json!({"sub": null}))),
                    refused(TokenError::Missing(Claim::Subject), "no subject claim"),
                ),
                (
                    "critical extension",
                    hs(
                        json!({"alg": "HS256", "kid": "t1", "crit": ["exp"]}),
                        &claims(json!({})),
                    ),
                    refused(TokenError::Critical, "critical extension"),
                ),
                (
                    "critical extension, empty",
                    hs(
                        json!({"alg": "HS256", "kid": "t1", "crit": []}),
                        &claims(json!({})),
                    ),
                    refused(TokenError::Critical, "critical extension"),
                ),
            ],
        );
    }

    #[test]
    fn provider_tokens_are_checked_and_matched_to_their_pinned_key() {
        let h_rs = json!({"alg": "RS256", "kid": RSA_KID});
        let derived = |v: &str| buyer_id(&ids_key(), ISSUER, v);
        let rsa_n = modulus();
        check(
            &verifier("sub"),
            vec![
                (
                    "RS256",
                    rs(&claims(json!({}))),
                    Want::Verify(RSA_KID, "alice".into()),
                ),
                (
                    "ES256",
                    es(&claims(json!({}))),
                    Want::Verify(EC_KID, "alice".into()),
                ),
                (
                    "aud array",
                    rs(&claims(
                        json!({"aud": ["https://api.example.com", "flashgate"]}),
                    )),
                    Want::Verify(RSA_KID, "alice".into()),
                ),
                (
                    "a provider's sub",
                    es(&claims(json!({"sub": "auth0|5f7c8ec7c33c6c004bbafe82"}))),
                    Want::Verify(EC_KID, derived("auth0|5f7c8ec7c33c6c004bbafe82")),
                ),
                (
                    "no iat",
                    rs(&claims(json!({"iat": null}))),
                    Want::Verify(RSA_KID, "alice".into()),
                ),
                (
                    "a token as large as providers issue",
                    rs(&claims(json!({"roles": "r".repeat(5000)}))),
                    Want::Verify(RSA_KID, "alice".into()),
                ),
                (
                    "larger than any token",
                    rs(&claims(json!({"roles": "r".repeat(TOKEN_BYTES_MAX)}))),
                    refused(
                        TokenError::TooLarge {
                            bytes_max: TOKEN_BYTES_MAX,
                        },
                        "longer than 8192 bytes",
                    ),
                ),
                (
                    "alg confusion: HS256 with the RSA key's bytes as its secret",
                    {
                        let input = format!(
                            "{}.{}",
                            b64(json!({"alg": "HS256", "kid": RSA_KID})
                                .to_string()
                                .as_bytes()),
                            b64(claims(json!({})).as_bytes())
                        );
                        let mut m = hmac_sha256(&rsa_n);
                        m.update(input.as_bytes());
                        format!("{input}.{}", b64(&m.finalize().into_bytes()))
                    },
                    refused(TokenError::KeyAlgorithm, "pinned"),
                ),
                (
                    "ES256 naming the RSA key",
                    signed_by_provider(
                        json!({"alg": "ES256", "kid": RSA_KID}),
                        &claims(json!({})),
                        64,
                    ),
                    refused(TokenError::KeyAlgorithm, "pinned"),
                ),
                (
                    "RS256 naming an HS256 key",
                    signed_by_provider(
                        json!({"alg": "RS256", "kid": "t1"}),
                        &claims(json!({})),
                        256,
                    ),
                    refused(TokenError::KeyAlgorithm, "pinned"),
                ),
                (
                    "alg none naming the RSA key",
                    signed_by_provider(
                        json!({"alg": "none", "kid": RSA_KID}),
                        &claims(json!({})),
                        0,
                    ),
                    refused(TokenError::Algorithm, "never none"),
                ),
                (
                    "a key id of another JWKS",
                    signed_by_provider(
                        json!({"alg": "RS256", "kid": "someone-elses"}),
                        &claims(json!({})),
                        256,
                    ),
                    refused(TokenError::UnknownKey, "key id is not one"),
                ),
                (
                    "an ES256 signature in DER",
                    signed_by_provider(
                        json!({"alg": "ES256", "kid": EC_KID}),
                        &claims(json!({})),
                        71,
                    ),
                    refused(TokenError::Signature, "signature"),
                ),
                (
                    "an RS256 signature shorter than the modulus",
                    signed_by_provider(h_rs.clone(), &claims(json!({})), 255),
                    refused(TokenError::Signature, "signature"),
                ),
                (
                    "critical extension",
                    signed_by_provider(
                        json!({"alg": "RS256", "kid": RSA_KID, "crit": ["b64"]}),
                        &claims(json!({})),
                        256,
                    ),
                    refused(TokenError::Critical, "critical extension"),
                ),
                (
                    "no iss",
                    rs(&claims(json!({"iss": null}))),
                    refused(TokenError::Missing(Claim::Iss), "no iss claim"),
                ),
                (
                    "another tenant's iss",
                    rs(&claims(
                        json!({"iss": "https://login.example.com/other-tenant/"}),
                    )),
                    refused(TokenError::Issuer, "iss is not the issuer"),
                ),
                (
                    "iss as a number",
                    rs(&claims(json!({"iss": 1}))),
                    refused(TokenError::Ill(Claim::Iss), "iss claim is not a string"),
                ),
                (
                    "another audience",
                    es(&claims(json!({"aud": ["elsewhere"]}))),
                    refused(TokenError::Audience, "aud"),
                ),
                (
                    "expired",
                    rs(&claims(json!({"iat": NOW - 4000, "exp": NOW - 3600}))),
                    refused(TokenError::Expired, "expired"),
                ),
                (
                    "not yet valid",
                    rs(&claims(json!({"nbf": NOW + 3600, "exp": NOW + 7200}))),
                    refused(TokenError::NotYetValid, "not valid yet"),
                ),
                (
                    "a week long",
                    rs(&claims(json!({"exp": NOW + 7 * 86_400}))),
                    refused(TokenError::Lifetime, "lifetime"),
                ),
                (
                    "an empty sub",
                    rs(&claims(json!({"sub": ""}))),
                    refused(
                        TokenError::Ill(Claim::Subject),
                        "subject claim is not a non-empty string",
                    ),
                ),
                (
                    "a numeric sub",
                    rs(&claims(json!({"sub": 42}))),
                    refused(TokenError::Ill(Claim::Subject), "subject claim"),
                ),
            ],
        );
        // The claim named by the configuration, here Firebase's user_id.
        check(
            &verifier("user_id"),
            vec![
                (
                    "user_id",
                    rs(&claims(json!({"user_id": "KbTnbkTbbDVd2Mq5p1jH3iVdTjX2"}))),
                    Want::Verify(RSA_KID, "KbTnbkTbbDVd2Mq5p1jH3iVdTjX2".into()),
                ),
                (
                    "no user_id",
                    rs(&claims(json!({}))),
                    refused(TokenError::Missing(Claim::Subject), "no subject claim"),
                ),
            ],
        );
    }

    #[test]
    fn a_provider_token_is_proven_only_by_its_verify() {
        let v = verifier("sub");
        let token = es(&claims(json!({})));
        let Ok(Decision::Verify(u)) = v.decide(&token, NOW * 1000) else {
            panic!("not a verify")
        };
        assert_eq!(u.key.alg, crate::jwks::Alg::Es256);
        assert_eq!(u.signature.len(), 64);
        assert_eq!(u.clone().conclude(false), Err(TokenError::Signature));
        assert_eq!(u.conclude(true).map(|b| b.id), Ok("alice".to_string()));
        // A verifier without a provider refuses every provider token by
        // its key id, and `verify` never yields an unverified one.
        let keys = KeySet::parse(KEYS).unwrap();
        assert_eq!(
            verify(&keys, &token, "flashgate", NOW),
            Err(TokenError::UnknownKey)
        );
    }

    #[test]
    fn a_key_id_in_both_sets_is_refused() {
        let jwks = Jwks::parse(&jwks_json()).unwrap();
        let both = KeySet::parse(&format!("{RSA_KID}:0123456789abcdef0123456789abcdef")).unwrap();
        let provider = Provider::new(jwks.clone(), ISSUER, "sub", ids_key()).unwrap();
        assert_eq!(
            Verifier::new(both, "flashgate", Some(provider)).err(),
            Some(ConfigError::KidInBoth(RSA_KID.into()))
        );
        assert_eq!(
            Provider::new(jwks.clone(), "", "sub", ids_key())
                .err()
                .map(|e| e.to_string()),
            Some("a JWKS needs the issuer its tokens must name".into())
        );
        assert_eq!(
            Provider::new(jwks, ISSUER, "", ids_key()).err(),
            Some(ConfigError::SubjectClaim)
        );
    }

    #[test]
    fn the_header_names_the_signing_key() {
        let keys = KeySet::parse(KEYS).unwrap();
        let minted = |now_s: u64| {
            let c = Claims {
                sub: "alice".into(),
                aud: "flashgate".into(),
                iat: now_s,
                exp: now_s + 600,
                nbf: None,
            };
            mint(&keys, &c, now_s * 1000)
        };
        let (before, after) = (minted(1), minted(9_001));
        let kid = |t: &str| {
            decode_json::<Header>(t.split('.').next().unwrap())
                .unwrap()
                .kid
                .unwrap()
        };
        assert_eq!((kid(&before), kid(&after)), ("t1".into(), "t2".into()));
        // A token minted before the switch verifies after it.
        assert!(verify(&keys, &before, "flashgate", 2).is_ok());
    }

    #[test]
    fn derived_buyer_ids_are_pinned() {
        // Computed apart from this code, with Python's hmac and base64:
        // the encoding is a contract, since a changed one would make
        // every provider user a new buyer.
        let key = hmac_sha256(b"the buyer ids key of these tests");
        assert_eq!(
            buyer_id(&key, ISSUER, "auth0|5f7c8ec7c33c6c004bbafe82"),
            PINNED_AUTH0
        );
        assert_eq!(buyer_id(&key, ISSUER, "alice"), "alice");
    }

    const PINNED_AUTH0: &str = "h.ho7yY28a2zWNW7wZvwELNLqCuDp8FqEm6b80dR_Y7NQ";

    proptest! {
        #[test]
        fn any_subject_maps_to_one_buyer_id(
            value in any::<String>(),
            issuer in "[a-z:/.]{0,40}",
        ) {
            let key = ids_key();
            let id = buyer_id(&key, &issuer, &value);
            prop_assert!(bounds::valid_buyer_id(&id), "{id}");
            prop_assert_eq!(&id, &buyer_id(&key, &issuer, &value));
            if bounds::valid_buyer_id(&value) && !value.starts_with(DERIVED_BUYER_ID_PREFIX) {
                prop_assert_eq!(&id, &value);
            } else {
                prop_assert!(id.starts_with(DERIVED_BUYER_ID_PREFIX));
                // Another issuer's user of the same name is another buyer.
                prop_assert_ne!(&id, &buyer_id(&key, &format!("{issuer}x"), &value));
            }
        }

        #[test]
        fn distinct_subjects_are_distinct_buyers(a in any::<String>(), b in any::<String>()) {
            prop_assume!(a != b);
            let key = ids_key();
            prop_assert_ne!(buyer_id(&key, ISSUER, &a), buyer_id(&key, ISSUER, &b));
        }
    }
}
