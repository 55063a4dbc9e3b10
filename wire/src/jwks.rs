//! An identity provider's public keys: a JSON Web Key Set (RFC 7517) of
//! RS256 and ES256 signing keys (RFC 7518), parsed strictly, so that the
//! gate can accept the tokens a shop's OpenID Connect provider already
//! issues (`token::Verifier`).
//!
//! Each key is pinned to one algorithm: `RS256` for `kty: RSA`, `ES256`
//! for `kty: EC` on `crv: P-256`. A key's `alg`, when given, must be that
//! one; when absent it is implied by the key's type, since the gate
//! verifies exactly one algorithm per type. A token is only ever checked
//! with the algorithm its key is pinned to, never the one its header asks
//! for, which is what keeps an HS256 header from being checked against an
//! RSA public key's bytes (alg confusion).
//!
//! This module only parses and checks: it holds no RSA or elliptic-curve
//! code. The signature is verified by the runtime's WebCrypto, which takes
//! a key as the public JWK `Jwk::import_json` writes; whether an EC point
//! lies on the curve is checked there, at import.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};

use crate::bounds::{
    JWKS_BYTES_MAX, JWKS_KEYS_MAX, JWK_KID_BYTES_MAX, RSA_EXPONENT_BYTES_MAX, RSA_MODULUS_BITS_MAX,
    RSA_MODULUS_BITS_MIN,
};

/// The algorithms a JWKS key may be pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256 (WebCrypto's `RSASSA-PKCS1-v1_5`).
    Rs256,
    /// ECDSA on P-256 with SHA-256, the signature as raw r‖s of 64 bytes
    /// (WebCrypto's `ECDSA`, which takes that form).
    Es256,
}

impl Alg {
    /// The name a JWS header and a JWK give it.
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
        }
    }
}

/// A public key, as raw big-endian integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// The modulus, without leading zero bytes, and the public exponent.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// A point of P-256.
    P256 { x: [u8; 32], y: [u8; 32] },
}

/// One signing key of a provider, pinned to its algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwk {
    pub kid: String,
    pub alg: Alg,
    pub key: PublicKey,
}

impl Jwk {
    /// The key as the minimal public JWK that WebCrypto's
    /// `importKey("jwk", ..)` takes: the members that define the key and
    /// its pinned `alg`, nothing a provider added (`x5c`, `use`).
    pub fn import_json(&self) -> String {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let v = match &self.key {
            PublicKey::Rsa { n, e } => serde_json::json!({
                "kty": "RSA", "alg": self.alg.name(), "n": b64(n), "e": b64(e),
            }),
            PublicKey::P256 { x, y } => serde_json::json!({
                "kty": "EC", "alg": self.alg.name(), "crv": "P-256", "x": b64(x), "y": b64(y),
            }),
        };
        v.to_string()
    }

    /// How many bytes a signature by this key has: RS256's is as long as
    /// the modulus, ES256's is r‖s of 32 bytes each.
    pub fn signature_bytes(&self) -> usize {
        match &self.key {
            PublicKey::Rsa { n, .. } => n.len(),
            PublicKey::P256 { .. } => 64,
        }
    }
}

/// Why a JWKS was refused. Each names the key by its position and, when it
/// has one, its `kid`, which is public; never any key material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksError {
    /// Longer than `JWKS_BYTES_MAX`.
    TooLarge,
    /// Not a JSON object with a `keys` array of objects.
    NotJwks,
    Empty,
    /// More than `JWKS_KEYS_MAX` keys.
    TooMany,
    /// Key `i` has no `kid`, or one that is not 1 to `JWK_KID_BYTES_MAX`
    /// visible ASCII characters.
    Kid(usize),
    DuplicateKid(String),
    /// The key's `alg` is `none`: a key that signs nothing.
    AlgNone(String),
    /// The key's `alg` is not RS256 or ES256, or not the one its type
    /// implies (an RSA key pinned to ES256).
    Alg(String),
    /// The key's `use` is not `sig`, or its `key_ops` lack `verify`.
    NotForSigning(String),
    /// The key's type is not RSA or EC on P-256.
    KeyType(String),
    /// A member that defines the key is missing or is not base64url, or an
    /// EC coordinate is not 32 bytes.
    Member(String, &'static str),
    /// An RSA modulus outside `RSA_MODULUS_BITS_MIN..=RSA_MODULUS_BITS_MAX`,
    /// or an exponent that is not an odd number of at most
    /// `RSA_EXPONENT_BYTES_MAX` bytes greater than 1.
    RsaSize(String),
    /// The key carries private members (`d` and the like): a provider
    /// publishes only public keys, so this set was copied from the wrong
    /// place, and the gate will not hold a private key.
    Private(String),
}

impl fmt::Display for JwksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksError::TooLarge => write!(
                f,
                "the JWKS is longer than {JWKS_BYTES_MAX} bytes (strip x5c and keys that do not sign tokens)"
            ),
            JwksError::NotJwks => write!(f, "the JWKS is not a JSON object with a keys array"),
            JwksError::Empty => write!(f, "the JWKS holds no key"),
            JwksError::TooMany => write!(f, "a JWKS holds at most {JWKS_KEYS_MAX} keys"),
            JwksError::Kid(i) => write!(
                f,
                "key {i}: a kid is 1 to {JWK_KID_BYTES_MAX} visible ASCII characters"
            ),
            JwksError::DuplicateKid(kid) => write!(f, "key id {kid} appears twice"),
            JwksError::AlgNone(kid) => write!(f, "key {kid}: alg none signs nothing"),
            JwksError::Alg(kid) => write!(
                f,
                "key {kid}: alg must be RS256 for an RSA key or ES256 for a P-256 key"
            ),
            JwksError::NotForSigning(kid) => write!(f, "key {kid} is not a signing key"),
            JwksError::KeyType(kid) => {
                write!(f, "key {kid}: kty must be RSA, or EC with crv P-256")
            }
            JwksError::Member(kid, m) => write!(f, "key {kid}: {m} is missing or malformed"),
            JwksError::RsaSize(kid) => write!(
                f,
                "key {kid}: an RSA modulus of {RSA_MODULUS_BITS_MIN} to {RSA_MODULUS_BITS_MAX} bits and an odd exponent above 1"
            ),
            JwksError::Private(kid) => write!(
                f,
                "key {kid} holds private key material: give the gate the provider's public keys only"
            ),
        }
    }
}

impl std::error::Error for JwksError {}

/// A provider's signing keys, with distinct ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

/// JWK members that only a private key has (RFC 7518, 6.3.2 and 6.2.2;
/// `k` is a symmetric key's secret).
const PRIVATE_MEMBERS: [&str; 7] = ["d", "p", "q", "dp", "dq", "qi", "k"];

fn valid_jwk_kid(kid: &str) -> bool {
    !kid.is_empty() && kid.len() <= JWK_KID_BYTES_MAX && kid.bytes().all(|c| c.is_ascii_graphic())
}

fn member(obj: &Map<String, Value>, kid: &str, name: &'static str) -> Result<Vec<u8>, JwksError> {
    obj.get(name)
        .and_then(Value::as_str)
        .and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
        .ok_or_else(|| JwksError::Member(kid.into(), name))
}

fn coordinate(
    obj: &Map<String, Value>,
    kid: &str,
    name: &'static str,
) -> Result<[u8; 32], JwksError> {
    member(obj, kid, name)?
        .try_into()
        .map_err(|_| JwksError::Member(kid.into(), name))
}

fn parse_key(i: usize, v: &Value) -> Result<Jwk, JwksError> {
    let obj = v.as_object().ok_or(JwksError::NotJwks)?;
    let kid = obj
        .get("kid")
        .and_then(Value::as_str)
        .filter(|k| valid_jwk_kid(k))
        .ok_or(JwksError::Kid(i))?;
    let str_of = |name: &str| obj.get(name).and_then(Value::as_str);
    if PRIVATE_MEMBERS.iter().any(|m| obj.contains_key(*m)) {
        return Err(JwksError::Private(kid.into()));
    }
    if obj.get("use").is_some_and(|u| u.as_str() != Some("sig")) {
        return Err(JwksError::NotForSigning(kid.into()));
    }
    if let Some(ops) = obj.get("key_ops") {
        let verifies = ops
            .as_array()
            .is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some("verify")));
        if !verifies {
            return Err(JwksError::NotForSigning(kid.into()));
        }
    }
    let (alg, key) = match (str_of("kty"), str_of("crv")) {
        (Some("RSA"), _) => {
            let n = member(obj, kid, "n")?;
            let e = member(obj, kid, "e")?;
            // Base64urlUInt is minimal (RFC 7518, 2), but a zero byte in
            // front changes nothing, and WebCrypto reads it either way; it
            // is dropped so that the modulus's length is the signature's.
            let n: Vec<u8> = n.iter().copied().skip_while(|&b| b == 0).collect();
            let e: Vec<u8> = e.iter().copied().skip_while(|&b| b == 0).collect();
            let bits = n
                .first()
                .map_or(0, |b| n.len() * 8 - b.leading_zeros() as usize);
            let odd_above_one =
                e.last().is_some_and(|b| b & 1 == 1) && !(e.len() == 1 && e[0] == 1);
            if !(RSA_MODULUS_BITS_MIN..=RSA_MODULUS_BITS_MAX).contains(&bits)
                || e.len() > RSA_EXPONENT_BYTES_MAX
                || !odd_above_one
            {
                return Err(JwksError::RsaSize(kid.into()));
            }
            (Alg::Rs256, PublicKey::Rsa { n, e })
        }
        (Some("EC"), Some("P-256")) => {
            let x = coordinate(obj, kid, "x")?;
            let y = coordinate(obj, kid, "y")?;
            (Alg::Es256, PublicKey::P256 { x, y })
        }
        _ => return Err(JwksError::KeyType(kid.into())),
    };
    match obj.get("alg") {
        None => {}
        Some(Value::String(a)) if a == alg.name() => {}
        Some(Value::String(a)) if a.eq_ignore_ascii_case("none") => {
            return Err(JwksError::AlgNone(kid.into()))
        }
        Some(_) => return Err(JwksError::Alg(kid.into())),
    }
    Ok(Jwk {
        kid: kid.into(),
        alg,
        key,
    })
}

impl Jwks {
    /// Parses a JWKS: at most `JWKS_BYTES_MAX` bytes, 1 to `JWKS_KEYS_MAX`
    /// keys, each a public RSA or P-256 signing key with a distinct `kid`.
    /// Members the gate does not read (`x5c`, `x5t`, `n`'s certificate
    /// chain) are ignored; a key it cannot use refuses the whole set, so
    /// that a misconfiguration is named at start-up, not met as refused
    /// tokens.
    pub fn parse(text: &str) -> Result<Jwks, JwksError> {
        if text.len() > JWKS_BYTES_MAX {
            return Err(JwksError::TooLarge);
        }
        let doc: Value = serde_json::from_str(text).map_err(|_| JwksError::NotJwks)?;
        let list = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(JwksError::NotJwks)?;
        if list.is_empty() {
            return Err(JwksError::Empty);
        }
        if list.len() > JWKS_KEYS_MAX {
            return Err(JwksError::TooMany);
        }
        let mut keys: Vec<Jwk> = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let key = parse_key(i, v)?;
            if keys.iter().any(|k| k.kid == key.kid) {
                return Err(JwksError::DuplicateKid(key.kid));
            }
            keys.push(key);
        }
        Ok(Jwks { keys })
    }

    /// The key with this id.
    pub fn get(&self, kid: &str) -> Option<&Jwk> {
        self.keys.iter().find(|k| k.kid == kid)
    }

    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(b: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(b)
    }

    fn rsa(kid: &str, bits: usize) -> Value {
        let mut n = vec![0x5a; bits.div_ceil(8)];
        n[0] = 0x80 >> ((8 - bits % 8) % 8);
        json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64(&n), "e": "AQAB"})
    }

    fn ec(kid: &str) -> Value {
        json!({"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])})
    }

    fn with(mut key: Value, patch: Value) -> Value {
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                key.as_object_mut().unwrap().remove(k);
            } else {
                key[k] = v.clone();
            }
        }
        key
    }

    fn set(keys: Vec<Value>) -> String {
        json!({ "keys": keys }).to_string()
    }

    #[test]
    fn a_providers_set_parses_with_each_key_pinned() {
        // As providers publish them: a certificate chain, a thumbprint, a
        // use, an RSA key without alg, and a padded modulus.
        let mut padded = vec![0];
        padded.extend(vec![0xc1; 256]);
        let text = set(vec![
            with(
                rsa("k1", 2048),
                json!({"x5c": ["MIIDBTCC..."], "x5t": "abc"}),
            ),
            with(rsa("k2", 4096), json!({"alg": null, "use": null})),
            with(rsa("k3", 2048), json!({"n": b64(&padded)})),
            with(ec("k4"), json!({"alg": "ES256", "key_ops": ["verify"]})),
        ]);
        let jwks = Jwks::parse(&text).unwrap();
        assert_eq!(jwks.kids().collect::<Vec<_>>(), ["k1", "k2", "k3", "k4"]);
        let alg = |kid: &str| jwks.get(kid).unwrap().alg;
        assert_eq!(
            [alg("k1"), alg("k2"), alg("k3"), alg("k4")],
            [Alg::Rs256, Alg::Rs256, Alg::Rs256, Alg::Es256]
        );
        assert_eq!(jwks.get("k3").unwrap().signature_bytes(), 256);
        assert_eq!(jwks.get("k2").unwrap().signature_bytes(), 512);
        assert_eq!(jwks.get("k4").unwrap().signature_bytes(), 64);
        assert_eq!(jwks.get("nope"), None);
        // WebCrypto gets the key's defining members and its pinned alg only.
        let import: Value = serde_json::from_str(&jwks.get("k1").unwrap().import_json()).unwrap();
        assert_eq!(import["kty"], "RSA");
        assert_eq!(import["alg"], "RS256");
        assert_eq!(import["e"], "AQAB");
        assert!(import.get("x5c").is_none());
        let import: Value = serde_json::from_str(&jwks.get("k4").unwrap().import_json()).unwrap();
        assert_eq!(
            import,
            json!({"kty": "EC", "alg": "ES256", "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])})
        );
    }

    #[test]
    fn every_key_the_gate_cannot_use_refuses_the_set() {
        let k = || rsa("k1", 2048);
        let cases: Vec<(&str, String, JwksError)> = vec![
            ("not JSON", "{".into(), JwksError::NotJwks),
            ("no keys", "{}".into(), JwksError::NotJwks),
            (
                "a key that is not an object",
                set(vec![json!(1)]),
                JwksError::NotJwks,
            ),
            ("empty", set(vec![]), JwksError::Empty),
            (
                "too many",
                set((0..=JWKS_KEYS_MAX).map(|i| ec(&format!("k{i}"))).collect()),
                JwksError::TooMany,
            ),
            (
                "too large",
                set(vec![with(
                    k(),
                    json!({"x5c": ["A".repeat(JWKS_BYTES_MAX)]}),
                )]),
                JwksError::TooLarge,
            ),
            (
                "no kid",
                set(vec![with(k(), json!({"kid": null}))]),
                JwksError::Kid(0),
            ),
            (
                "a kid with a space",
                set(vec![ec("k0"), with(k(), json!({"kid": "a b"}))]),
                JwksError::Kid(1),
            ),
            (
                "a kid too long",
                set(vec![with(
                    k(),
                    json!({"kid": "k".repeat(JWK_KID_BYTES_MAX + 1)}),
                )]),
                JwksError::Kid(0),
            ),
            (
                "a kid twice",
                set(vec![k(), ec("k1")]),
                JwksError::DuplicateKid("k1".into()),
            ),
            (
                "alg none",
                set(vec![with(k(), json!({"alg": "none"}))]),
                JwksError::AlgNone("k1".into()),
            ),
            (
                "alg PS256",
                set(vec![with(k(), json!({"alg": "PS256"}))]),
                JwksError::Alg("k1".into()),
            ),
            (
                "alg HS256",
                set(vec![with(k(), json!({"alg": "HS256"}))]),
                JwksError::Alg("k1".into()),
            ),
            (
                "an RSA key pinned to ES256",
                set(vec![with(k(), json!({"alg": "ES256"}))]),
                JwksError::Alg("k1".into()),
            ),
            (
                "an EC key pinned to RS256",
                set(vec![with(ec("k1"), json!({"alg": "RS256"}))]),
                JwksError::Alg("k1".into()),
            ),
            (
                "use enc",
                set(vec![with(k(), json!({"use": "enc"}))]),
                JwksError::NotForSigning("k1".into()),
            ),
            (
                "key_ops without verify",
                set(vec![with(k(), json!({"key_ops": ["encrypt"]}))]),
                JwksError::NotForSigning("k1".into()),
            ),
            (
                "kty oct",
                set(vec![json!({"kty": "oct", "kid": "k1", "k": "c2VjcmV0"})]),
                JwksError::Private("k1".into()),
            ),
            (
                "kty OKP",
                set(vec![
                    json!({"kty": "OKP", "kid": "k1", "crv": "Ed25519", "x": "AA"}),
                ]),
                JwksError::KeyType("k1".into()),
            ),
            (
                "P-384",
                set(vec![with(ec("k1"), json!({"crv": "P-384"}))]),
                JwksError::KeyType("k1".into()),
            ),
            (
                "a private RSA key",
                set(vec![with(k(), json!({"d": "AQAB"}))]),
                JwksError::Private("k1".into()),
            ),
            (
                "a private EC key",
                set(vec![with(ec("k1"), json!({"d": b64(&[3; 32])}))]),
                JwksError::Private("k1".into()),
            ),
            (
                "no n",
                set(vec![with(k(), json!({"n": null}))]),
                JwksError::Member("k1".into(), "n"),
            ),
            (
                "n not base64url",
                set(vec![with(k(), json!({"n": "a+b/"}))]),
                JwksError::Member("k1".into(), "n"),
            ),
            (
                "x of 31 bytes",
                set(vec![with(ec("k1"), json!({"x": b64(&[1; 31])}))]),
                JwksError::Member("k1".into(), "x"),
            ),
            (
                "no y",
                set(vec![with(ec("k1"), json!({"y": null}))]),
                JwksError::Member("k1".into(), "y"),
            ),
            (
                "RSA 1024",
                set(vec![rsa("k1", 1024)]),
                JwksError::RsaSize("k1".into()),
            ),
            (
                "RSA 2047",
                set(vec![rsa("k1", 2047)]),
                JwksError::RsaSize("k1".into()),
            ),
            (
                "RSA 8192",
                set(vec![rsa("k1", 8192)]),
                JwksError::RsaSize("k1".into()),
            ),
            (
                "an empty modulus",
                set(vec![with(k(), json!({"n": ""}))]),
                JwksError::RsaSize("k1".into()),
            ),
            (
                "e = 1",
                set(vec![with(k(), json!({"e": "AQ"}))]),
                JwksError::RsaSize("k1".into()),
            ),
            (
                "an even e",
                set(vec![with(k(), json!({"e": "AQAA"}))]),
                JwksError::RsaSize("k1".into()),
            ),
        ];
        for (name, text, want) in cases {
            let got = Jwks::parse(&text);
            assert_eq!(got.as_ref().err(), Some(&want), "{name}");
            // The refusal names the key's id and the member, never a value.
            let said = want.to_string();
            assert!(
                !said.contains("AQAB") && !said.contains("c2VjcmV0"),
                "{name}: {said}"
            );
        }
        assert!(Jwks::parse(&set(vec![rsa("k1", 2048)])).is_ok());
        assert!(Jwks::parse(&set(vec![rsa("k1", 4096)])).is_ok());
    }
}
