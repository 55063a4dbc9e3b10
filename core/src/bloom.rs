//! A Bloom filter over buyer ids, of a fixed size: no false negatives, and
//! a false positive only costs work (a read of storage, or a request that
//! reaches the object), never a wrong answer.
//!
//! It has two uses, with one hashing so that they combine: the gate keeps
//! one over the buyers with paid records in storage (`archive.rs`), so
//! that it reads storage only for a buyer who may have some; and the edge's
//! filter of buyers whose retries must reach a sold-out product
//! (`src/protocol/buyer_filter.rs`) starts from it.

use crate::config::limits::BLOOM_BYTES_MAX;

/// Bits per buyer the filter is sized for: about a 0.05% false-positive
/// rate with 11 hashes.
pub const BLOOM_BITS_PER_ITEM: usize = 16;
pub const BLOOM_HASHES: u32 = 11;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    bits: Vec<u8>,
}

impl Default for Bloom {
    fn default() -> Self {
        Bloom::with_capacity(0)
    }
}

/// Two independent 64-bit hashes of a buyer id (or any key): FNV-1a, then
/// two rounds of a splitmix-style finaliser (Kirsch and Mitzenmacher: k
/// hashes from two).
fn hashes(key: &[u8]) -> (u64, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
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

/// The bits of `buyer` in a filter of `bytes` bytes with `k` hashes.
pub fn bit_indexes(bytes: usize, k: u32, buyer: &str) -> impl Iterator<Item = usize> {
    key_bit_indexes(bytes, k, buyer.as_bytes())
}

fn key_bit_indexes(bytes: usize, k: u32, key: &[u8]) -> impl Iterator<Item = usize> {
    let m = (bytes * 8) as u64;
    let (h1, h2) = hashes(key);
    (0..u64::from(k)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m.max(1)) as usize)
}

impl Bloom {
    /// An empty filter sized for `items` buyers, within the byte bounds.
    pub fn with_capacity(items: u64) -> Bloom {
        let items = usize::try_from(items).unwrap_or(usize::MAX);
        let bytes = items
            .saturating_mul(BLOOM_BITS_PER_ITEM)
            .div_ceil(8)
            .clamp(8, BLOOM_BYTES_MAX);
        Bloom {
            bits: vec![0; bytes],
        }
    }

    pub fn insert(&mut self, buyer: &str) {
        self.insert_bytes(buyer.as_bytes());
    }

    /// Whether `buyer` may have been inserted: always true if it was.
    pub fn may_contain(&self, buyer: &str) -> bool {
        self.may_contain_bytes(buyer.as_bytes())
    }

    /// `insert` of any key: one filter holds one kind of key.
    pub fn insert_bytes(&mut self, key: &[u8]) {
        for bit in key_bit_indexes(self.bits.len(), BLOOM_HASHES, key) {
            self.bits[bit / 8] |= 1 << (bit % 8);
        }
    }

    pub fn may_contain_bytes(&self, key: &[u8]) -> bool {
        key_bit_indexes(self.bits.len(), BLOOM_HASHES, key)
            .all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bits
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bits
    }
}
