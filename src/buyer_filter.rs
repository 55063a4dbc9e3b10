//! The set of buyers whose retries must still reach a sold-out product's
//! object, as a Bloom filter the object publishes and the edge reads.
//!
//! When nothing is available, the edge answers a reserve with `sold_out`
//! itself, unless the buyer holds or bought units: such a buyer's retry may
//! be a replay, and a replay must get its reservation, never a cached
//! `sold_out` (I3). The buyers with units are at most `stock_total`, and a
//! Bloom filter holds them in 16 bits each with no false negatives: a false
//! positive (about 0.05% at the design size) only costs that request a trip
//! to the object. The filter is capped at `FILTER_BYTES_MAX`; past the size
//! it was designed for, its false-positive rate rises, which again costs
//! trips and never a wrong answer.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// The largest filter published, in bytes.
pub const FILTER_BYTES_MAX: usize = 256 * 1024;
/// Bits per buyer: about a 0.05% false-positive rate with 11 hashes. Two
/// bytes a buyer keep a sale of 100,000 units under the size cap.
const BITS_PER_BUYER: usize = 16;
const HASHES: u32 = 11;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuyerFilter {
    /// The bit array, base64.
    bits: String,
    hashes: u32,
    #[serde(skip)]
    decoded: Vec<u8>,
}

/// Two independent 64-bit hashes of a buyer id: FNV-1a, then two rounds of
/// a splitmix-style finaliser (Kirsch and Mitzenmacher: k hashes from two).
fn hashes(buyer: &str) -> (u64, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in buyer.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let h1 = mix(h);
    (h1, mix(h1 ^ 0x9e37_79b9_7f4a_7c15) | 1)
}

impl BuyerFilter {
    pub fn build<'a>(buyers: impl Iterator<Item = &'a str> + Clone) -> BuyerFilter {
        let n = buyers.clone().count().max(1);
        let bytes = (n * BITS_PER_BUYER).div_ceil(8).clamp(8, FILTER_BYTES_MAX);
        let mut bits = vec![0u8; bytes];
        let m = (bytes * 8) as u64;
        for buyer in buyers {
            let (h1, h2) = hashes(buyer);
            for i in 0..u64::from(HASHES) {
                let bit = h1.wrapping_add(i.wrapping_mul(h2)) % m;
                bits[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        BuyerFilter {
            bits: STANDARD.encode(&bits),
            hashes: HASHES,
            decoded: bits,
        }
    }

    /// Decodes the published form; `None` if it is not a filter.
    pub fn decode(mut self) -> Option<BuyerFilter> {
        self.decoded = STANDARD.decode(&self.bits).ok()?;
        let ok = !self.decoded.is_empty()
            && self.decoded.len() <= FILTER_BYTES_MAX
            && (1..=32).contains(&self.hashes);
        ok.then_some(self)
    }

    /// Whether `buyer` may be in the set: always true for a member.
    pub fn may_contain(&self, buyer: &str) -> bool {
        let m = (self.decoded.len() * 8) as u64;
        if m == 0 {
            // Undecoded: assume membership, which only costs a trip.
            return true;
        }
        let (h1, h2) = hashes(buyer);
        (0..u64::from(self.hashes)).all(|i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) % m;
            self.decoded[(bit / 8) as usize] & (1 << (bit % 8)) != 0
        })
    }

    pub fn byte_len(&self) -> usize {
        self.decoded.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_always_found_and_strangers_rarely() {
        let members: Vec<String> = (0..5_000).map(|i| format!("buyer-{i}")).collect();
        let f = BuyerFilter::build(members.iter().map(String::as_str));
        let json = serde_json::to_string(&f).unwrap();
        let f: BuyerFilter = serde_json::from_str::<BuyerFilter>(&json)
            .unwrap()
            .decode()
            .unwrap();
        assert!(members.iter().all(|b| f.may_contain(b)));
        let strangers = (0..20_000)
            .filter(|i| f.may_contain(&format!("stranger-{i}")))
            .count();
        assert!(strangers < 20_000 / 500, "{strangers} false positives");
    }

    #[test]
    fn empty_and_capped() {
        let f = BuyerFilter::build(std::iter::empty());
        assert!(!f.may_contain("anyone"));
        let many: Vec<String> = (0..200_000).map(|i| format!("b{i}")).collect();
        let f = BuyerFilter::build(many.iter().map(String::as_str));
        assert_eq!(f.byte_len(), FILTER_BYTES_MAX);
        assert!(many.iter().take(1000).all(|b| f.may_contain(b)));
        let bad = BuyerFilter {
            bits: "not base64!".into(),
            hashes: 7,
            decoded: Vec::new(),
        };
        assert!(bad.decode().is_none());
    }
}
