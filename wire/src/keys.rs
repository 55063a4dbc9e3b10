//! Key sets: every secret the services share has an id (`kid`), and every
//! verifier holds a set of keys, so a key can be added, made the signing key
//! and retired without a request failing.
//!
//! A key set is written as comma-separated entries, `kid:secret` or
//! `kid@activate_ms:secret`. Verifiers accept every key in the set. Signers
//! sign with the newest key that is active (`activate_ms` at or before now;
//! a key without one is active from the start), so a rotation is scheduled
//! once, in every party's configuration, and needs no restart at the switch:
//! 1. add `new@T:secret` beside `old:secret` everywhere;
//! 2. at `T` every signer switches to `new`, while verifiers accept both;
//! 3. later, remove `old` everywhere.

use std::fmt;

use hmac::Hmac;
use sha2::Sha256;

use crate::mac::hmac_sha256;

/// The shortest secret a key set accepts: 256 bits of a random string.
pub const KEY_BYTES_MIN: usize = 32;
/// The longest key id.
pub const KID_BYTES_MAX: usize = 32;
/// The most keys one set may hold.
pub const KEYS_PER_SET_MAX: usize = 8;

/// One key: its id, from when it signs, and its secret.
#[derive(Clone)]
pub struct Key {
    pub kid: String,
    pub activate_ms: u64,
    secret: Vec<u8>,
    /// HMAC-SHA256 keyed with the secret, built once: keying hashes two
    /// blocks, as much as a short message costs, and every token verified
    /// and every request signed would pay it again.
    keyed: Hmac<Sha256>,
}

impl Key {
    fn new(kid: &str, activate_ms: u64, secret: &[u8]) -> Key {
        Key {
            kid: kid.into(),
            activate_ms,
            secret: secret.to_vec(),
            keyed: hmac_sha256(secret),
        }
    }

    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// An HMAC-SHA256 keyed with the secret, ready for a message.
    pub fn mac(&self) -> Hmac<Sha256> {
        self.keyed.clone()
    }
}

// The keyed MAC follows from the secret, so equality is that of the rest.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.kid == other.kid
            && self.activate_ms == other.activate_ms
            && self.secret == other.secret
    }
}

impl Eq for Key {}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a secret.
        write!(f, "Key({}@{})", self.kid, self.activate_ms)
    }
}

/// Why a key set was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySetError {
    Empty,
    TooMany,
    /// An entry that is not `kid:secret` or `kid@activate_ms:secret`.
    Entry(usize),
    BadKid(usize),
    DuplicateKid(String),
    ShortSecret(String),
}

impl fmt::Display for KeySetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySetError::Empty => write!(f, "the key set is empty"),
            KeySetError::TooMany => write!(f, "a key set holds at most {KEYS_PER_SET_MAX} keys"),
            KeySetError::Entry(i) => {
                write!(f, "entry {i} is not kid:secret or kid@activate_ms:secret")
            }
            KeySetError::BadKid(i) => write!(
                f,
                "entry {i}: a key id is 1 to {KID_BYTES_MAX} characters of A-Z a-z 0-9 _ -"
            ),
            KeySetError::DuplicateKid(kid) => write!(f, "key id {kid} appears twice"),
            KeySetError::ShortSecret(kid) => write!(
                f,
                "the secret of key {kid} is shorter than {KEY_BYTES_MIN} bytes"
            ),
        }
    }
}

impl std::error::Error for KeySetError {}

/// A non-empty set of keys with distinct ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Key>,
}

pub fn valid_kid(kid: &str) -> bool {
    !kid.is_empty()
        && kid.len() <= KID_BYTES_MAX
        && kid
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

impl KeySet {
    /// Parses `kid:secret,kid@activate_ms:secret,...`.
    pub fn parse(text: &str) -> Result<KeySet, KeySetError> {
        let mut keys: Vec<Key> = Vec::new();
        for (i, entry) in text.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let (head, secret) = entry.split_once(':').ok_or(KeySetError::Entry(i))?;
            let (kid, activate_ms) = match head.split_once('@') {
                Some((kid, at)) => (kid, at.parse().map_err(|_| KeySetError::Entry(i))?),
                None => (head, 0),
            };
            if !valid_kid(kid) {
                return Err(KeySetError::BadKid(i));
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(KeySetError::DuplicateKid(kid.into()));
            }
            if secret.len() < KEY_BYTES_MIN {
                return Err(KeySetError::ShortSecret(kid.into()));
            }
            keys.push(Key::new(kid, activate_ms, secret.as_bytes()));
        }
        if keys.is_empty() {
            return Err(KeySetError::Empty);
        }
        if keys.len() > KEYS_PER_SET_MAX {
            return Err(KeySetError::TooMany);
        }
        Ok(KeySet { keys })
    }

    /// The key with this id, for verifying.
    pub fn get(&self, kid: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.kid == kid)
    }

    /// The key to sign with at `now_ms`: the active key that activated
    /// last; the earliest one if none is active yet.
    pub fn signing(&self, now_ms: u64) -> &Key {
        let active = self
            .keys
            .iter()
            .filter(|k| k.activate_ms <= now_ms)
            .max_by_key(|k| k.activate_ms);
        match active {
            Some(k) => k,
            None => self
                .keys
                .iter()
                .min_by_key(|k| k.activate_ms)
                .unwrap_or(&self.keys[0]),
        }
    }

    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }

    /// Whether `given` is the secret of one of the keys: a bearer token
    /// checked against a set of them. Every key is compared, each in time
    /// independent of where the bytes differ, so the time tells neither
    /// which key matched nor how much of a guess was right.
    pub fn holds_secret(&self, given: &[u8]) -> bool {
        self.keys
            .iter()
            .fold(false, |found, k| found | constant_time_eq(given, &k.secret))
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "a-secret-of-at-least-thirty-two-bytes-1";
    const S2: &str = "a-secret-of-at-least-thirty-two-bytes-2";

    #[test]
    fn each_keys_prebuilt_mac_is_keyed_with_its_own_secret() {
        use hmac::Mac;
        let set = KeySet::parse(&format!("k1:{S1},k2@500:{S2}")).unwrap();
        for (kid, secret) in [("k1", S1), ("k2", S2)] {
            let mut ours = set.get(kid).unwrap().mac();
            let mut fresh = hmac_sha256(secret.as_bytes());
            ours.update(b"flashgate");
            fresh.update(b"flashgate");
            assert_eq!(
                ours.finalize().into_bytes(),
                fresh.finalize().into_bytes(),
                "{kid}"
            );
        }
    }

    #[test]
    fn a_bearer_token_is_any_secret_of_the_set() {
        let set = KeySet::parse(&format!("k1:{S1},k2@500:{S2}")).unwrap();
        assert!(set.holds_secret(S1.as_bytes()));
        assert!(set.holds_secret(S2.as_bytes()));
        assert!(!set.holds_secret(b""));
        assert!(!set.holds_secret(&S1.as_bytes()[..S1.len() - 1]));
        assert!(!set.holds_secret(format!("{S1}x").as_bytes()));
        assert!(!set.holds_secret(b"k1"));
    }

    #[test]
    fn parses_and_refuses() {
        let set = KeySet::parse(&format!("k1:{S1}, k2@500:{S2}")).unwrap();
        assert_eq!(set.kids().collect::<Vec<_>>(), ["k1", "k2"]);
        assert_eq!(set.get("k2").unwrap().activate_ms, 500);
        assert_eq!(set.get("k1").unwrap().secret(), S1.as_bytes());
        let cases = [
            ("", KeySetError::Empty),
            ("k1", KeySetError::Entry(0)),
            (&*format!("k1@soon:{S1}"), KeySetError::Entry(0)),
            (&*format!("k 1:{S1}"), KeySetError::BadKid(0)),
            (
                &*format!("k1:{S1},k1:{S2}"),
                KeySetError::DuplicateKid("k1".into()),
            ),
            ("k1:short", KeySetError::ShortSecret("k1".into())),
        ];
        for (text, want) in cases {
            assert_eq!(KeySet::parse(text), Err(want), "{text}");
        }
        let many: Vec<String> = (0..9).map(|i| format!("k{i}:{S1}")).collect();
        assert_eq!(KeySet::parse(&many.join(",")), Err(KeySetError::TooMany));
        // A secret never shows in debug output.
        assert!(!format!("{set:?}").contains(S1));
    }

    #[test]
    fn the_signing_key_follows_activation() {
        let set = KeySet::parse(&format!("old:{S1},new@1000:{S2}")).unwrap();
        assert_eq!(set.signing(999).kid, "old");
        assert_eq!(set.signing(1000).kid, "new");
        let future = KeySet::parse(&format!("a@5:{S1},b@9:{S2}")).unwrap();
        assert_eq!(future.signing(0).kid, "a", "none active: the earliest");
    }
}
