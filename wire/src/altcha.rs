//! The ALTCHA proof of work (protocol v2, as the `altcha` widget 3.x
//! speaks it): the challenge the edge signs, the payload a solver sends
//! back, its verification, and a native solver for the load tool.
//!
//! A challenge's `parameters` name the key derivation (PBKDF2-HMAC-SHA256
//! with `cost` iterations, a 32-byte key), a random `nonce` and `salt`, a
//! `keyPrefix` of hex zeros, an expiry (`expiresAt`, epoch seconds) and
//! `data`, which binds it to one buyer and one product and states its
//! level. Its `signature` is the hex HMAC-SHA256 of the parameters as
//! canonical JSON (keys sorted), under a secret only the edge holds, so the
//! challenge is stateless: the edge keeps nothing between issuing it and
//! checking the answer. A payload is taken only at the level asked when it
//! arrives, or above: one solved before the level rose is refused
//! (`LevelRaised`), so a join pays the price in force, not the price when
//! its challenge was issued.
//!
//! A solver tries counters 0, 1, 2, … until `PBKDF2(nonce ‖ counter as u32
//! big-endian, salt, cost)` written in hex starts with `keyPrefix`. Each
//! hex zero multiplies the expected tries by 16 (`expected_tries`); the
//! tries follow a geometric law, so one buyer in twenty needs three times
//! the mean.
//!
//! Verifying costs one key derivation (`cost` HMAC rounds) after the
//! signature, expiry and binding checks, which cost a few hashes: a forged
//! or stale payload is refused before the derivation. The library's own
//! `verifySolution` (altcha 3.2) compares the derived key and not its
//! prefix, so a key derived from any counter passed it; here the prefix is
//! checked on the key the edge derives itself.
//!
//! Written on `hmac`/`sha2`/`pbkdf2` rather than the `altcha-lib-rs` crate:
//! that crate (0.3) does not build for wasm32 as is, reads the clock
//! itself, and in a probe its verify alone was 589,785 B of wasm against
//! 74,468 B for this one (docs/proof-of-work.md).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::Mac;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::bounds::{LEVEL_MAX, PAYLOAD_BYTES_MAX};
use crate::mac::hmac_sha256;

/// The one key derivation this gate offers: the widget's default, computed
/// by the browser's WebCrypto at native speed, so a script gains little
/// over a page (docs/proof-of-work.md has the measurement).
pub const ALGORITHM: &str = "PBKDF2/SHA-256";
/// The derived key's length in bytes, the widget's default.
pub const KEY_BYTES: u32 = 32;
/// Nonce and salt, in bytes (hex in the challenge).
pub const NONCE_BYTES: usize = 16;

/// What a challenge is bound to, and its level. Fields in key order: the
/// parameters' canonical JSON is their serde serialization.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub buyer: String,
    /// The number of hex zeros of `keyPrefix`.
    pub level: u8,
    pub product: String,
}

/// A challenge's parameters, in the widget's names. Fields in key order
/// (`keyLength` < `keyPrefix`), so that serde writes canonical JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Parameters {
    pub algorithm: String,
    pub cost: u32,
    pub data: Binding,
    /// Epoch seconds.
    pub expires_at: u64,
    pub key_length: u32,
    pub key_prefix: String,
    pub nonce: String,
    pub salt: String,
}

/// A signed challenge, as the widget takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    pub parameters: Parameters,
    pub signature: String,
}

/// A solver's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Solution {
    pub counter: u32,
    pub derived_key: String,
    /// How long the solver took, in ms, as the widget reports it; unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
}

/// What a join carries: the challenge as issued and its solution, as JSON
/// in base64 (the widget's `payload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub challenge: Challenge,
    pub solution: Solution,
}

/// Why a payload was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowError {
    /// Not base64 JSON of a payload, or too long.
    Malformed,
    /// Parameters this gate never issues (another algorithm, key length,
    /// level or cost).
    Unsupported,
    /// The signature does not match the parameters.
    Forged,
    Expired,
    OtherProduct,
    OtherBuyer,
    /// The challenge's level is below the level asked now: it was issued
    /// before the level rose.
    LevelRaised,
    /// The counter does not give a key with the prefix, or the key given is
    /// not the one it derives.
    Wrong,
}

impl PowError {
    pub fn describe(self) -> &'static str {
        match self {
            PowError::Malformed => "the proof of work is not an ALTCHA payload",
            PowError::Unsupported => "the proof of work answers a challenge this gate never issues",
            PowError::Forged => "the proof of work's challenge signature does not match",
            PowError::Expired => "the proof of work's challenge has expired",
            PowError::OtherProduct => "the proof of work was for another product",
            PowError::OtherBuyer => "the proof of work was another buyer's",
            PowError::LevelRaised => {
                "the waiting room asks a higher level of proof of work than this one was solved at"
            }
            PowError::Wrong => "the proof of work's solution is wrong",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PowError::Malformed => "malformed",
            PowError::Unsupported => "unsupported",
            PowError::Forged => "forged",
            PowError::Expired => "expired",
            PowError::OtherProduct => "other_product",
            PowError::OtherBuyer => "other_buyer",
            PowError::LevelRaised => "level_raised",
            PowError::Wrong => "wrong",
        }
    }
}

/// The mean number of tries a solver needs at `level`: 16 per hex zero.
pub fn expected_tries(level: u8) -> u64 {
    16u64.saturating_pow(u32::from(level))
}

/// The key prefix of `level`.
pub fn key_prefix(level: u8) -> String {
    "0".repeat(usize::from(level))
}

/// The edge's signing secret, as ALTCHA's libraries take it: a string,
/// whose UTF-8 bytes key the HMAC.
#[derive(Clone)]
pub struct PowSecret(String);

impl PowSecret {
    pub fn new(secret: String) -> PowSecret {
        PowSecret(secret)
    }

    fn sign(&self, parameters: &Parameters) -> [u8; 32] {
        let mut mac = hmac_sha256(self.0.as_bytes());
        // Strings and numbers always serialize.
        mac.update(&serde_json::to_vec(parameters).unwrap_or_default());
        mac.finalize().into_bytes().into()
    }

    /// A challenge for `binding` at its level, with `cost` rounds, from
    /// `random` (nonce then salt, the runtime's CSPRNG), valid until
    /// `expires_at_s`.
    pub fn issue(
        &self,
        binding: Binding,
        cost: u32,
        random: &[u8; 2 * NONCE_BYTES],
        expires_at_s: u64,
    ) -> Challenge {
        let parameters = Parameters {
            algorithm: ALGORITHM.into(),
            cost,
            key_prefix: key_prefix(binding.level),
            data: binding,
            expires_at: expires_at_s,
            key_length: KEY_BYTES,
            nonce: hex::encode(&random[..NONCE_BYTES]),
            salt: hex::encode(&random[NONCE_BYTES..]),
        };
        let signature = hex::encode(self.sign(&parameters));
        Challenge {
            parameters,
            signature,
        }
    }

    /// The payload's binding, if it answers a challenge this secret signed,
    /// unexpired at `now_ms`, for `asked`'s product and buyer, at
    /// `asked.level` or above, with a right solution. `cost` is the only
    /// cost this gate issues.
    ///
    /// The level is checked before the derivation, as the signature, the
    /// expiry and the binding are: a payload refused for any of them costs
    /// a few hashes.
    pub fn verify(
        &self,
        text: &str,
        asked: &Binding,
        cost: u32,
        now_ms: u64,
    ) -> Result<Binding, PowError> {
        if text.len() > PAYLOAD_BYTES_MAX {
            return Err(PowError::Malformed);
        }
        let json = STANDARD
            .decode(text.trim())
            .map_err(|_| PowError::Malformed)?;
        let payload: Payload = serde_json::from_slice(&json).map_err(|_| PowError::Malformed)?;
        let Payload {
            challenge:
                Challenge {
                    parameters: p,
                    signature,
                },
            solution,
        } = payload;
        let (Ok(nonce), Ok(salt)) = (hex::decode(&p.nonce), hex::decode(&p.salt)) else {
            return Err(PowError::Unsupported);
        };
        if p.algorithm != ALGORITHM
            || p.key_length != KEY_BYTES
            || p.cost != cost
            || p.data.level > LEVEL_MAX
            || p.key_prefix != key_prefix(p.data.level)
            || nonce.len() != NONCE_BYTES
            || salt.len() != NONCE_BYTES
        {
            return Err(PowError::Unsupported);
        }
        let given = hex::decode(&signature).map_err(|_| PowError::Forged)?;
        let mut mac = hmac_sha256(self.0.as_bytes());
        mac.update(&serde_json::to_vec(&p).unwrap_or_default());
        // Constant time.
        mac.verify_slice(&given).map_err(|_| PowError::Forged)?;
        if p.expires_at.saturating_mul(1000) <= now_ms {
            return Err(PowError::Expired);
        }
        if p.data.product != asked.product {
            return Err(PowError::OtherProduct);
        }
        if p.data.buyer != asked.buyer {
            return Err(PowError::OtherBuyer);
        }
        if p.data.level < asked.level {
            return Err(PowError::LevelRaised);
        }
        let key = derive(&nonce, &salt, cost, solution.counter);
        let hex_key = hex::encode(key);
        if !hex_key.starts_with(&p.key_prefix) || hex_key != solution.derived_key {
            return Err(PowError::Wrong);
        }
        Ok(p.data)
    }
}

/// The key a counter derives: PBKDF2-HMAC-SHA256 of `nonce ‖ counter`
/// (big-endian u32, the widget's default), `salt`, `cost` rounds.
pub fn derive(nonce: &[u8], salt: &[u8], cost: u32, counter: u32) -> [u8; 32] {
    let mut password = Vec::with_capacity(nonce.len() + 4);
    password.extend_from_slice(nonce);
    password.extend_from_slice(&counter.to_be_bytes());
    let mut key = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(&password, salt, cost.max(1), &mut key);
    key
}

/// Solves a challenge natively, as a script would (the load tool): the
/// first counter from 0 whose key has the prefix, or `None` past
/// `tries_max`.
pub fn solve(challenge: &Challenge, tries_max: u64) -> Option<Solution> {
    let p = &challenge.parameters;
    let nonce = hex::decode(&p.nonce).ok()?;
    let salt = hex::decode(&p.salt).ok()?;
    (0..=u32::MAX)
        .take(usize::try_from(tries_max).unwrap_or(usize::MAX))
        .find_map(|counter| {
            let key = hex::encode(derive(&nonce, &salt, p.cost, counter));
            key.starts_with(&p.key_prefix).then_some(Solution {
                counter,
                derived_key: key,
                time: None,
            })
        })
}

/// The payload a widget would send for `challenge` and `solution`.
pub fn payload(challenge: &Challenge, solution: &Solution) -> String {
    let p = Payload {
        challenge: challenge.clone(),
        solution: solution.clone(),
    };
    STANDARD.encode(serde_json::to_vec(&p).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COST: u32 = 10;

    fn secret() -> PowSecret {
        PowSecret::new("a0b1c2d3e4f5".into())
    }

    fn binding(level: u8) -> Binding {
        Binding {
            buyer: "alice".into(),
            level,
            product: "p1".into(),
        }
    }

    /// What a join of `product` by `buyer` asks, at `level`.
    fn asked(product: &str, buyer: &str, level: u8) -> Binding {
        Binding {
            buyer: buyer.into(),
            level,
            product: product.into(),
        }
    }

    fn solved(level: u8) -> (Challenge, Solution) {
        let c = secret().issue(binding(level), COST, &[7; 32], 1_000);
        let s = solve(&c, 1 << 20).expect("a level-2 challenge solves");
        (c, s)
    }

    #[test]
    fn parameters_serialize_as_canonical_json() {
        let c = secret().issue(binding(2), COST, &[7; 32], 1_000);
        let json = serde_json::to_string(&c.parameters).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"algorithm":"PBKDF2/SHA-256","cost":10,"data":{{"buyer":"alice","level":2,"product":"p1"}},"expiresAt":1000,"keyLength":32,"keyPrefix":"00","nonce":"{n}","salt":"{n}"}}"#,
                n = "07".repeat(16)
            )
        );
    }

    #[test]
    fn a_solution_verifies_for_its_buyer_product_and_time_only() {
        let (c, s) = solved(2);
        let text = payload(&c, &s);
        let k = secret();
        assert_eq!(
            k.verify(&text, &asked("p1", "alice", 2), COST, 999_000),
            Ok(binding(2))
        );
        assert_eq!(
            k.verify(&text, &asked("p1", "alice", 2), COST, 1_000_000),
            Err(PowError::Expired)
        );
        assert_eq!(
            k.verify(&text, &asked("p2", "alice", 2), COST, 0),
            Err(PowError::OtherProduct)
        );
        assert_eq!(
            k.verify(&text, &asked("p1", "bob", 2), COST, 0),
            Err(PowError::OtherBuyer)
        );
        assert_eq!(
            PowSecret::new("another".into()).verify(&text, &asked("p1", "alice", 2), COST, 0),
            Err(PowError::Forged)
        );
        assert_eq!(
            k.verify(&text, &asked("p1", "alice", 2), COST + 1, 0),
            Err(PowError::Unsupported)
        );
    }

    #[test]
    fn a_solution_below_the_level_asked_now_is_refused_before_any_derivation() {
        let (c, s) = solved(2);
        let text = payload(&c, &s);
        let k = secret();
        // The level asked fell, or stayed: taken.
        for level in [1, 2] {
            assert_eq!(
                k.verify(&text, &asked("p1", "alice", level), COST, 0),
                Ok(binding(2))
            );
        }
        // It rose since the challenge was issued: refused, at any level
        // above, whatever the solution.
        for level in [3, 4, LEVEL_MAX] {
            assert_eq!(
                k.verify(&text, &asked("p1", "alice", level), COST, 0),
                Err(PowError::LevelRaised)
            );
        }
        let wrong_key = Solution {
            derived_key: "00".repeat(32),
            ..s
        };
        assert_eq!(
            k.verify(&payload(&c, &wrong_key), &asked("p1", "alice", 3), COST, 0),
            Err(PowError::LevelRaised)
        );
    }

    #[test]
    fn forged_and_wrong_answers_are_refused() {
        let (c, s) = solved(2);
        let k = secret();
        let v = |c: &Challenge, s: &Solution| {
            k.verify(&payload(c, s), &asked("p1", "alice", 2), COST, 0)
        };
        // The key of another counter: right for that counter, without the
        // prefix (altcha's own verifySolution takes it).
        let lazy_counter = (0..).find(|&n| n != s.counter).unwrap();
        let nonce = hex::decode(&c.parameters.nonce).unwrap();
        let lazy = Solution {
            counter: lazy_counter,
            derived_key: hex::encode(derive(&nonce, &nonce, COST, lazy_counter)),
            time: None,
        };
        if !lazy.derived_key.starts_with("00") {
            assert_eq!(v(&c, &lazy), Err(PowError::Wrong));
        }
        let wrong_key = Solution {
            derived_key: "00".repeat(32),
            ..s.clone()
        };
        assert_eq!(v(&c, &wrong_key), Err(PowError::Wrong));
        // Parameters changed after signing: an easier prefix, a later
        // expiry, another buyer written in.
        let mut easier = c.clone();
        easier.parameters.data.level = 0;
        easier.parameters.key_prefix = String::new();
        assert_eq!(v(&easier, &s), Err(PowError::Forged));
        let mut later = c.clone();
        later.parameters.expires_at += 1;
        assert_eq!(v(&later, &s), Err(PowError::Forged));
        let mut prefix_only = c.clone();
        prefix_only.parameters.key_prefix = "0".into();
        assert_eq!(v(&prefix_only, &s), Err(PowError::Unsupported));
        let mut other_algorithm = c.clone();
        other_algorithm.parameters.algorithm = "SHA-256".into();
        assert_eq!(v(&other_algorithm, &s), Err(PowError::Unsupported));
        // Junk.
        for junk in [
            "",
            "not base64!",
            "e30=",
            &"A".repeat(PAYLOAD_BYTES_MAX + 1),
        ] {
            assert_eq!(
                k.verify(junk, &asked("p1", "alice", 2), COST, 0),
                Err(PowError::Malformed),
                "{junk:.20}"
            );
        }
        // An unknown member in the parameters is not ignored.
        let json = serde_json::to_string(&Payload {
            challenge: c.clone(),
            solution: s.clone(),
        })
        .unwrap()
        .replace(r#""cost":10"#, r#""cost":10,"memoryCost":1"#);
        assert_eq!(
            k.verify(&STANDARD.encode(json), &asked("p1", "alice", 2), COST, 0),
            Err(PowError::Malformed)
        );
    }

    #[test]
    fn levels_state_their_tries() {
        assert_eq!(expected_tries(0), 1);
        assert_eq!(expected_tries(3), 4_096);
        assert_eq!(key_prefix(3), "000");
    }

    /// A payload the altcha 3.2.2 library made (its `createChallenge` with
    /// this secret and `solveChallenge`, PBKDF2/SHA-256), checked here:
    /// the two agree on the canonical JSON, the signature, the password
    /// layout and the derivation.
    #[test]
    fn verifies_a_payload_the_altcha_library_solved() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../tests/altcha-fixture.json")).unwrap();
        let k = PowSecret::new(fixture["secret"].as_str().unwrap().into());
        let text = fixture["payload"].as_str().unwrap();
        assert_eq!(
            k.verify(
                text,
                &binding(1),
                fixture["cost"].as_u64().unwrap() as u32,
                0
            ),
            Ok(binding(fixture["level"].as_u64().unwrap() as u8))
        );
    }
}
