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

use crate::bounds::{
    KEYS_PER_SET_MAX, KEY_BYTES_MIN, KID_BYTES_MAX, SECRET_BITS_MIN, SECRET_BYTES_ESTIMATED_MAX,
};
use crate::mac::hmac_sha256;

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

    /// The first key whose secret `check_secret` refuses, and why. Parsing
    /// checks only the length; a service that starts with a set calls this
    /// too, and refuses to start on an answer.
    pub fn refused_secret(&self) -> Option<(&str, SecretRefusal)> {
        self.keys.iter().find_map(|k| {
            // Every secret was parsed from a `&str`, so it is UTF-8.
            let text = std::str::from_utf8(&k.secret).unwrap_or("");
            check_secret(text).err().map(|why| (k.kid.as_str(), why))
        })
    }
}

/// Secrets that anyone can read: the placeholders of the example
/// configuration and every secret that the repository's tests and fixtures
/// ever held. A service given one of these is serving with a key an
/// attacker has; `check_secret` refuses them. The tests now make their
/// secrets at random when they run, so no usable one is written down.
pub const PUBLISHED_SECRETS: &[&str] = &[
    // `.dev.vars.example`, before it held no usable value.
    "replace-with-32-or-more-random-bytes-000000",
    "replace-with-32-or-more-random-bytes-0000000000",
    // The end-to-end tests' fixed secrets (`tests/support/keys.mjs`).
    "test-admin-token-0123456789abcdef0123456",
    "test-buyer-key-0123456789abcdef01234567",
    "test-payment-key-0123456789abcdef0123456",
    "test-forward-key-0123456789abcdef0123456",
    "test-id-secret-0123456789abcdef0123456789",
    "test-read-token-0123456789abcdef01234567",
    "test-shop-token-0123456789abcdef01234567",
    "the-new-forward-key-0123456789abcdef01234",
    "the-new-payment-key-0123456789abcdef01234",
    "the-new-buyer-key-0123456789abcdef0123456",
    "an-attackers-key-0123456789abcdef0123456",
    "an-attackers-secret-0123456789abcdef0123",
    "another-key-0123456789abcdef0123456789ab",
    // The origin's tests (`origin/tests`).
    "forward-key-0123456789abcdef0123456789",
    "read-token-0123456789abcdef0123456789",
    "shop-token-0123456789abcdef0123456789",
    "buyer-key-0123456789abcdef0123456789ab",
    "payment-key-0123456789abcdef012345678",
    // The gate's unit tests.
    "buyer-token-key-0123456789abcdef0123",
    "payment-key-0123456789abcdef01234567",
    "admin-token-0123456789abcdef01234567",
    "id-secret-0123456789abcdef0123456789",
    "forward-key-0123456789abcdef0123456",
    "another-payment-key-0123456789abcdef",
    "another-secret-of-thirty-two-byte",
    "another-secret-of-at-least-thirty-two-bytes",
    // This crate's unit tests.
    "a-secret-of-at-least-thirty-two-bytes-1",
    "a-secret-of-at-least-thirty-two-bytes-2",
    "0123456789abcdef0123456789abcdef",
    "fedcba9876543210fedcba9876543210",
];

/// Why `check_secret` refused a secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretRefusal {
    /// Shorter than `KEY_BYTES_MIN` bytes.
    TooShort,
    /// One of `PUBLISHED_SECRETS`: anyone who reads the repository has it.
    Published,
    /// Its estimated strength (`estimated_bits`) is below
    /// `SECRET_BITS_MIN`: a word, a run, a count or a repeat, not random
    /// bytes.
    NotRandom,
}

impl fmt::Display for SecretRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRefusal::TooShort => write!(f, "is shorter than {KEY_BYTES_MIN} bytes"),
            SecretRefusal::Published => {
                write!(f, "is a published example, which anyone can read")
            }
            SecretRefusal::NotRandom => write!(
                f,
                "is plainly not random (estimated below {SECRET_BITS_MIN} bits)"
            ),
        }
    }
}

impl std::error::Error for SecretRefusal {}

/// Whether `secret` may key a service: at least `KEY_BYTES_MIN` bytes, not
/// one of `PUBLISHED_SECRETS`, and with an estimated strength of at least
/// `SECRET_BITS_MIN` bits (`estimated_bits`). 32 random bytes written as
/// hex (`openssl rand -hex 32`) or base64 pass by a wide margin; a
/// placeholder, a run of one character, a count such as `0123456789…`, or
/// a short pattern repeated do not. Every service that parses a key set or
/// a secret for use calls this before it starts.
///
/// The estimate cannot prove a secret random (nothing can); it refuses
/// what is plainly not, which is what copied examples and made-up values
/// are.
pub fn check_secret(secret: &str) -> Result<(), SecretRefusal> {
    if secret.len() < KEY_BYTES_MIN {
        return Err(SecretRefusal::TooShort);
    }
    if PUBLISHED_SECRETS.contains(&secret) {
        return Err(SecretRefusal::Published);
    }
    if estimated_bits(secret) < SECRET_BITS_MIN {
        return Err(SecretRefusal::NotRandom);
    }
    Ok(())
}

/// A rough lower estimate of a secret's strength in bits, from the length,
/// the character classes and the patterns in it; over at most its first
/// `SECRET_BYTES_ESTIMATED_MAX` bytes.
///
/// Each character costs what it would take to write it down, given the
/// ones before it:
/// - a character that continues a run (`aaaa`) or a count (`0123`, `fedc`)
///   costs nothing after the first; the whole run costs 1 bit plus the bits
///   of its length;
/// - a stretch of 4 or more that repeats an earlier one costs the bits of
///   where it starts and how long it is;
/// - in a string that is not hex, a letter inside a word (3 or more
///   letters, all lower case, all upper case, or capitalised) costs 2 bits,
///   about what a letter of English carries, and so does a symbol that
///   came before (the `-` between the words of a phrase);
/// - any other character costs the bits of its alphabet: 16 for hex (of one
///   case; `-` `_` `:` `.` separators between its digits cost nothing), else the sum
///   of the classes present (26 lower, 26 upper, 10 digits, 33 other
///   printable ASCII, 128 for anything else).
pub fn estimated_bits(secret: &str) -> f64 {
    let b = &secret.as_bytes()[..secret.len().min(SECRET_BYTES_ESTIMATED_MAX)];
    let is_separator = |c: u8| matches!(c, b'-' | b'_' | b':' | b'.');
    let core = || b.iter().copied().filter(|&c| !is_separator(c));
    let hex = core().all(|c| c.is_ascii_hexdigit())
        && !(core().any(|c| c.is_ascii_lowercase()) && core().any(|c| c.is_ascii_uppercase()));
    let alphabet: f64 = if hex {
        if core().any(|c| c.is_ascii_alphabetic()) {
            16.0
        } else {
            10.0
        }
    } else {
        let has = |f: fn(&u8) -> bool| b.iter().any(f);
        let mut n = 0.0;
        if has(u8::is_ascii_lowercase) {
            n += 26.0;
        }
        if has(u8::is_ascii_uppercase) {
            n += 26.0;
        }
        if has(u8::is_ascii_digit) {
            n += 10.0;
        }
        if has(|c| c.is_ascii_graphic() && !c.is_ascii_alphanumeric() || *c == b' ') {
            n += 33.0;
        }
        if has(|c| !c.is_ascii_graphic() && *c != b' ') {
            n += 128.0;
        }
        n
    };
    let literal_bits = alphabet.log2();
    let in_word = words(b);
    // Whether b[i] continues the run or count that b[i-2], b[i-1] began.
    let continues = |i: usize| {
        i >= 2 && {
            let step = |x: u8, y: u8| i16::from(y) - i16::from(x);
            step(b[i - 1], b[i]) == step(b[i - 2], b[i - 1])
        } || i >= 1 && b[i] == b[i - 1]
    };
    let mut bits = 0.0;
    let mut i = 0;
    while i < b.len() {
        if continues(i) {
            let mut len = 1;
            while i + len < b.len() && continues(i + len) {
                len += 1;
            }
            bits += 1.0 + (len as f64).log2();
            i += len;
            continue;
        }
        let repeat = (0..i)
            .map(|j| {
                b[i..]
                    .iter()
                    .zip(&b[j..])
                    .take_while(|(x, y)| x == y)
                    .count()
            })
            .max()
            .unwrap_or(0);
        if repeat >= 4 {
            bits += (i as f64).log2() + (repeat as f64).log2();
            i += repeat;
            continue;
        }
        bits += if hex && is_separator(b[i]) {
            // Where the separators go is the format's, not the secret's.
            0.0
        } else if !hex && in_word[i] {
            2.0
        } else if !hex && !b[i].is_ascii_alphanumeric() && b[..i].contains(&b[i]) {
            // A delimiter used again, as between the words of a phrase.
            2.0
        } else {
            literal_bits
        };
        i += 1;
    }
    bits
}

/// For each byte, whether it is a letter inside a word: a run of 3 or more
/// ASCII letters that is all lower case, all upper case, or capitalised.
fn words(b: &[u8]) -> Vec<bool> {
    let mut marks = vec![false; b.len()];
    let mut start = 0;
    while start < b.len() {
        if !b[start].is_ascii_alphabetic() {
            start += 1;
            continue;
        }
        let end = start
            + b[start..]
                .iter()
                .take_while(|c| c.is_ascii_alphabetic())
                .count();
        let rest = &b[start + 1..end];
        let one_case = rest.iter().all(u8::is_ascii_lowercase)
            || b[start..end].iter().all(u8::is_ascii_uppercase);
        if end - start >= 3 && one_case {
            marks[start..end].fill(true);
        }
        start = end;
    }
    marks
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

    /// splitmix64: random bytes from a seed, so a failure can be rerun.
    fn random_bytes(seed: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *seed;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    #[test]
    fn random_secrets_pass_as_operators_make_them() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let mut state = seed;
        let b64 = |b: &[u8]| {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            b.chunks(3)
                .flat_map(|c| {
                    let n =
                        c.iter().fold(0u32, |n, &x| n << 8 | u32::from(x)) << (8 * (3 - c.len()));
                    (0..=c.len()).map(move |i| A[(n >> (18 - 6 * i) & 63) as usize] as char)
                })
                .collect::<String>()
        };
        let mut least = f64::MAX;
        for _ in 0..20_000 {
            let bytes = random_bytes(&mut state, 32);
            // `openssl rand -hex 32`, upper-cased, and `openssl rand -base64 32`.
            for secret in [hex::encode(&bytes), hex::encode_upper(&bytes), b64(&bytes)] {
                let bits = estimated_bits(&secret);
                least = least.min(bits);
                assert_eq!(
                    check_secret(&secret),
                    Ok(()),
                    "seed {seed}: {secret} estimated at {bits:.0} bits"
                );
            }
        }
        // A margin: over these 60,000 draws the least estimate seen was
        // about 160 bits (one CI run drew 162), so random 32 bytes stay
        // clear of the bound by more than 20.
        assert!(
            least > SECRET_BITS_MIN + 20.0,
            "seed {seed}: {least:.0} bits"
        );
    }

    #[test]
    fn plainly_not_random_secrets_are_refused() {
        let cases: Vec<(String, SecretRefusal)> = vec![
            ("k".repeat(31), SecretRefusal::TooShort),
            (
                "replace-with-32-or-more-random-bytes-000000".into(),
                SecretRefusal::Published,
            ),
            (
                "replace-with-32-or-more-random-bytes-111111".into(),
                SecretRefusal::NotRandom,
            ),
            ("a".repeat(64), SecretRefusal::NotRandom),
            ("a".repeat(100_000), SecretRefusal::NotRandom),
            ("0123456789".repeat(5), SecretRefusal::NotRandom),
            ("0123456789abcdef".repeat(4), SecretRefusal::NotRandom),
            (
                "abcdefghijklmnopqrstuvwxyz0123456789".into(),
                SecretRefusal::NotRandom,
            ),
            ("deadbeef".repeat(8), SecretRefusal::NotRandom),
            (
                "Password1Password1Password1Password1".into(),
                SecretRefusal::NotRandom,
            ),
            (
                "please-replace-this-with-a-real-random-token".into(),
                SecretRefusal::NotRandom,
            ),
            (
                "my-shop-admin-token-for-production-2024".into(),
                SecretRefusal::NotRandom,
            ),
            (
                "test-admin-token-0123456789abcdef0123457".into(),
                SecretRefusal::NotRandom,
            ),
        ];
        for (secret, want) in cases {
            let bits = estimated_bits(&secret);
            assert_eq!(
                check_secret(&secret),
                Err(want),
                "{secret:.60} estimated at {bits:.0} bits"
            );
        }
        for published in PUBLISHED_SECRETS {
            assert_eq!(check_secret(published), Err(SecretRefusal::Published));
        }
    }

    /// The example configuration holds no value a service would accept:
    /// each is refused when parsed, or when its secrets are checked.
    #[test]
    fn the_example_configuration_holds_no_usable_secret() {
        let example = include_str!("../../.dev.vars.example");
        let mut values = 0;
        for line in example.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.split_once('=') else {
                continue;
            };
            values += 1;
            let as_set = KeySet::parse(value).map(|set| set.refused_secret().map(|(_, why)| why));
            let refused = match as_set {
                Err(_) | Ok(Some(_)) => true,
                Ok(None) => false,
            };
            // A plain secret (ID_SECRET) is checked as it is.
            let plain_refused = check_secret(value).is_err();
            assert!(
                refused && plain_refused,
                "{name} in .dev.vars.example is usable"
            );
        }
        assert!(values >= 5, "{values} values in .dev.vars.example");
    }

    #[test]
    fn a_key_set_names_its_first_refused_secret() {
        let good = hex::encode(random_bytes(&mut 7, 32));
        let set = KeySet::parse(&format!("k1:{good},k2:{}", "b".repeat(40))).unwrap();
        assert_eq!(set.refused_secret(), Some(("k2", SecretRefusal::NotRandom)));
        assert_eq!(
            KeySet::parse(&format!("k1:{good}"))
                .unwrap()
                .refused_secret(),
            None
        );
        assert_eq!(
            SecretRefusal::Published.to_string(),
            "is a published example, which anyone can read"
        );
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
