//! The shapes a peer of `bench/peers` answers with where flashgate has
//! no equal: its stats, and the orders its database holds. Defined once
//! here, beside the codes the peers answer with, so that the peers service
//! (which serialises them) and `flashgate-load` (which reads them) share
//! them without either depending on the other.

use serde::{Deserialize, Serialize};

/// `GET /admin/products/{id}/stats` on a peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStats {
    pub recipe: String,
    pub stock_total: u64,
    /// Units sold as the recipe's own authority counts them (Redis for the
    /// Lua recipe, the stock row for the others).
    pub sold: u64,
    /// Units in the orders table.
    pub order_units: u64,
    /// Statements that wrote to PostgreSQL or MariaDB, since the product
    /// was set up: updates that matched nothing and lock-row inserts and
    /// deletes included.
    pub db_writes: u64,
    /// Commands that wrote to Redis (or ZooKeeper nodes created and
    /// deleted), since the product was set up.
    pub cache_writes: u64,
    /// Whether the database agrees with the authority (no order still on
    /// its way through a queue).
    pub settled: bool,
}

/// One stored order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerOrder {
    pub reservation_id: String,
    pub buyer_id: String,
    pub quantity: u64,
}

/// `GET /admin/products/{id}/orders` on a peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerOrders {
    pub orders: Vec<PeerOrder>,
}

/// `PUT /admin/products/{id}` on a peer: a fresh sale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerSetup {
    pub stock_total: u64,
    pub per_buyer_max: u32,
}
