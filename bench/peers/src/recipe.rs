//! The recipes, each as its authors would build it, and what they share:
//! the outcome of a reserve, the order id, and the write counters.

use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// The recipes of the article this project grew from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Recipe {
    /// (a) A Redis Lua check-and-decrement, then the order through
    /// RabbitMQ to PostgreSQL.
    LuaMq,
    /// (b) A Redis lock (SET NX PX, token-checked release, a watchdog that
    /// renews the lease), then read-decrement-write in PostgreSQL.
    RedisLock,
    /// (c) A conditional UPDATE with a version column on PostgreSQL.
    OptimisticPg,
    /// (c) The same on MariaDB.
    OptimisticMariadb,
    /// (c2) A lock row in MariaDB's `distributed_lock`, then
    /// read-decrement-write.
    LockTable,
    /// (d) PostgreSQL `SELECT ... FOR UPDATE`.
    ForUpdate,
    /// (e) A ZooKeeper lock (Curator's InterProcessMutex recipe), then
    /// read-decrement-write in PostgreSQL.
    Zookeeper,
    /// (f) Read, then write, with no lock.
    Naive,
}

impl Recipe {
    pub fn name(self) -> &'static str {
        match self {
            Recipe::LuaMq => "lua-mq",
            Recipe::RedisLock => "redis-lock",
            Recipe::OptimisticPg => "optimistic-pg",
            Recipe::OptimisticMariadb => "optimistic-mariadb",
            Recipe::LockTable => "lock-table",
            Recipe::ForUpdate => "for-update",
            Recipe::Zookeeper => "zookeeper",
            Recipe::Naive => "naive",
        }
    }
}

/// What a reserve came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Made {
        order_id: String,
        quantity: u64,
    },
    /// The buyer's earlier order with the same key.
    Replayed {
        order_id: String,
        quantity: u64,
    },
    SoldOut,
    /// The buyer already has an order (under another key).
    BuyerLimit,
}

/// The order id of a buyer's reserve with an idempotency key: the same on
/// every retry, so that the unique index turns a retry into a replay.
pub fn order_id(product: &str, buyer: &str, key: &str) -> String {
    let mut h = Sha256::new();
    for part in [product, buyer, key] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    hex::encode(&h.finalize()[..8])
}

/// An existing order of the buyer: a replay if it has the same id, else the
/// buyer is at the limit.
pub fn existing(found: Option<(String, i64)>, order_id: &str) -> Option<Outcome> {
    found.map(|(id, quantity)| {
        if id == order_id {
            Outcome::Replayed {
                order_id: id,
                quantity: quantity as u64,
            }
        } else {
            Outcome::BuyerLimit
        }
    })
}

/// Writes since the product was set up.
#[derive(Default)]
pub struct Writes {
    pub db: AtomicU64,
    pub cache: AtomicU64,
}

impl Writes {
    pub fn db(&self, n: u64) {
        self.db.fetch_add(n, Ordering::Relaxed);
    }
    pub fn cache(&self, n: u64) {
        self.cache.fetch_add(n, Ordering::Relaxed);
    }
    pub fn reset(&self) {
        self.db.store(0, Ordering::Relaxed);
        self.cache.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_are_stable_per_key_and_differ_across_keys() {
        assert_eq!(order_id("p", "b", "k"), order_id("p", "b", "k"));
        assert_ne!(order_id("p", "b", "k"), order_id("p", "b", "k2"));
        // No ambiguity from concatenation.
        assert_ne!(order_id("p", "bk", ""), order_id("p", "b", "k"));
        assert_eq!(order_id("p", "b", "k").len(), 16);
    }

    #[test]
    fn an_existing_order_is_a_replay_only_under_its_own_id() {
        assert_eq!(existing(None, "x"), None);
        assert_eq!(
            existing(Some(("x".into(), 1)), "x"),
            Some(Outcome::Replayed {
                order_id: "x".into(),
                quantity: 1
            })
        );
        assert_eq!(
            existing(Some(("y".into(), 1)), "x"),
            Some(Outcome::BuyerLimit)
        );
    }
}
