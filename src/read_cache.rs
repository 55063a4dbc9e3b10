//! The policy of the edge's product-read cache, kept pure so it is tested
//! natively; the Worker holds one per isolate.
//!
//! Product reads are answered from the isolate's memory for up to a second.
//! Every buyer page polls its product; without this, a crowd watching a
//! sold-out product would send every poll to the one Durable Object, whose
//! soft limit is about 1,000 requests/s. A read decides nothing, so a second
//! of staleness cannot oversell or break idempotency: every reserve still
//! goes to the object.

use std::collections::HashMap;

/// How long a read is served from the cache.
pub const PRODUCT_CACHE_TTL_MS: u64 = 1_000;
/// The cache is cleared whole when it reaches this many products, which
/// bounds its memory against requests for many random ids.
pub const PRODUCT_CACHE_ENTRIES_MAX: usize = 1_024;

/// One cached answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedRead {
    pub fetched_at_ms: u64,
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

#[derive(Default)]
pub struct ReadCache {
    entries: HashMap<String, CachedRead>,
}

impl ReadCache {
    /// Whether an answer with this status may be cached: a product, or the
    /// news that there is none. Errors are not.
    pub fn cacheable(status: u16) -> bool {
        matches!(status, 200 | 404)
    }

    /// A fresh answer for `product_id`, if any.
    pub fn get(&self, product_id: &str, now_ms: u64) -> Option<&CachedRead> {
        self.entries
            .get(product_id)
            .filter(|hit| now_ms.saturating_sub(hit.fetched_at_ms) < PRODUCT_CACHE_TTL_MS)
    }

    pub fn insert(&mut self, product_id: &str, read: CachedRead) {
        if !Self::cacheable(read.status) {
            return;
        }
        if self.entries.len() >= PRODUCT_CACHE_ENTRIES_MAX && !self.entries.contains_key(product_id)
        {
            self.entries.clear();
        }
        self.entries.insert(product_id.to_string(), read);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(at: u64, status: u16) -> CachedRead {
        CachedRead {
            fetched_at_ms: at,
            status,
            content_type: "application/json".into(),
            body: b"{}".to_vec(),
        }
    }

    #[test]
    fn reads_are_fresh_for_the_ttl_only() {
        let mut c = ReadCache::default();
        c.insert("p", read(1_000, 200));
        assert!(c.get("p", 1_000).is_some());
        assert!(c.get("p", 1_000 + PRODUCT_CACHE_TTL_MS - 1).is_some());
        assert!(c.get("p", 1_000 + PRODUCT_CACHE_TTL_MS).is_none());
        assert!(c.get("q", 1_000).is_none());
        // A clock that went back still counts as fresh, not as a panic.
        assert!(c.get("p", 0).is_some());
    }

    #[test]
    fn errors_are_not_cached_and_the_size_is_bounded() {
        let mut c = ReadCache::default();
        c.insert("p", read(0, 500));
        c.insert("q", read(0, 503));
        assert!(c.is_empty());
        c.insert("gone", read(0, 404));
        assert_eq!(c.len(), 1);
        for i in 0..PRODUCT_CACHE_ENTRIES_MAX * 2 {
            c.insert(&format!("p{i}"), read(0, 200));
            assert!(c.len() <= PRODUCT_CACHE_ENTRIES_MAX);
        }
    }
}
