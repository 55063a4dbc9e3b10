//! HMAC-SHA256 keyed by a secret of any length, without a fallible call.
//!
//! `Mac::new_from_slice` returns a `Result` although HMAC is defined for
//! keys of every length (RFC 2104: a key longer than the hash's block is
//! hashed first, and a shorter one is padded with zeros). That left an
//! `expect` on every request path that signs or verifies. Here the key is
//! brought to the block size as RFC 2104 says, and the infallible
//! `KeyInit::new` takes it; a test checks that the two agree.

use hmac::digest::{Digest, KeyInit};
use hmac::Hmac;
use sha2::Sha256;

/// SHA-256's block size, the size of an HMAC-SHA256 key block.
const BLOCK_BYTES: usize = 64;

/// An HMAC-SHA256 keyed with `key`.
pub fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    let mut block = [0u8; BLOCK_BYTES];
    if key.len() > BLOCK_BYTES {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    <Hmac<Sha256> as KeyInit>::new(&block.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::Mac;

    #[test]
    fn agrees_with_the_fallible_constructor_at_every_key_length() {
        for len in [0, 1, 31, 32, 63, 64, 65, 100, 200] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut ours = hmac_sha256(&key);
            let mut theirs = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
            ours.update(b"flashgate");
            theirs.update(b"flashgate");
            assert_eq!(
                ours.finalize().into_bytes(),
                theirs.finalize().into_bytes(),
                "key length {len}"
            );
        }
    }

    #[test]
    fn matches_rfc_4231_test_case_2() {
        let mut mac = hmac_sha256(b"Jefe");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
