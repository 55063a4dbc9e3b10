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
//! trips and never a wrong answer. The object builds it from the gate's own
//! filter of paying buyers (`Gate::buyers_filter`, core's `bloom.rs`, whose
//! hashing this shares), since a buyer with only paid orders is not in
//! memory.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use flashgate_core::bloom::{bit_indexes, Bloom, BLOOM_HASHES};
use serde::{Deserialize, Serialize};

use crate::limits::FILTER_BYTES_MAX;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuyerFilter {
    /// The bit array, base64.
    bits: String,
    hashes: u32,
    #[serde(skip)]
    decoded: Vec<u8>,
}

impl BuyerFilter {
    pub fn build<'a>(buyers: impl Iterator<Item = &'a str> + Clone) -> BuyerFilter {
        let mut bloom = Bloom::with_capacity(buyers.clone().count().max(1) as u64);
        for buyer in buyers {
            bloom.insert(buyer);
        }
        BuyerFilter::from_bloom(bloom)
    }

    /// The published form of a filter the gate built (`Gate::buyers_filter`).
    pub fn from_bloom(bloom: Bloom) -> BuyerFilter {
        let bits = bloom.into_bytes();
        BuyerFilter {
            bits: STANDARD.encode(&bits),
            hashes: BLOOM_HASHES,
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
        if self.decoded.is_empty() {
            // Undecoded: assume membership, which only costs a trip.
            return true;
        }
        bit_indexes(self.decoded.len(), self.hashes, buyer)
            .all(|bit| self.decoded[bit / 8] & (1 << (bit % 8)) != 0)
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
