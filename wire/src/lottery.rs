//! The waiting room's lottery, as anyone can recompute it: the commitment
//! a product publishes before its pre-queue opens, and a ticket's
//! tiebreak. The gate issues tickets by these functions and
//! `flashgate-load --audit` checks a sale by them, so both sides use the
//! one definition; no secret of the gate enters either.

use sha2::{Digest, Sha256};

/// Separates the tiebreak's hash from every other use of SHA-256.
const TIEBREAK_DOMAIN: &[u8] = b"flashgate-tiebreak-v1";

/// `SHA-256(key)`, in hex: what the product read shows before the opening.
pub fn commitment(key: &[u8; 32]) -> String {
    hex::encode(Sha256::digest(key))
}

/// A buyer's tiebreak in a product's queue: the first four bytes, big
/// endian, of `SHA-256(domain ‖ key ‖ len(product) ‖ product ‖ buyer)`.
/// The product's length (one byte; ids are at most 64 bytes) keeps
/// `("ab", "c")` and `("a", "bc")` apart. The buyer cannot choose it, and
/// the gate could not either once the key was committed to.
pub fn tiebreak(key: &[u8; 32], product_id: &str, buyer_id: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(TIEBREAK_DOMAIN);
    h.update(key);
    h.update([product_id.len().min(255) as u8]);
    h.update(product_id.as_bytes());
    h.update(buyer_id.as_bytes());
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// A key from its 64 hex digits, as the product read shows it.
pub fn parse_key(hex_key: &str) -> Option<[u8; 32]> {
    if hex_key.len() != 64 || hex_key.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    hex::decode(hex_key).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // SHA-256 of 32 zero bytes.
        assert_eq!(
            commitment(&[0; 32]),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
        let k = [7u8; 32];
        assert_eq!(tiebreak(&k, "p1", "alice"), tiebreak(&k, "p1", "alice"));
        assert_ne!(tiebreak(&k, "p1", "alice"), tiebreak(&k, "p1", "bob"));
        assert_ne!(tiebreak(&k, "p1", "alice"), tiebreak(&k, "p2", "alice"));
        assert_ne!(tiebreak(&k, "ab", "c"), tiebreak(&k, "a", "bc"));
        assert_ne!(
            tiebreak(&k, "p1", "alice"),
            tiebreak(&[8; 32], "p1", "alice")
        );
        assert_eq!(parse_key(&hex::encode(k)), Some(k));
        for junk in ["", "07", &"0G".repeat(32), &"AB".repeat(32)] {
            assert_eq!(parse_key(junk), None, "{junk}");
        }
    }
}
