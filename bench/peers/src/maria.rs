//! The MariaDB recipes, in the article's MySQL dialect: the optimistic
//! conditional UPDATE (c) and the lock table (c2, the article's method A).

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use sqlx::MySqlPool;

use crate::pg::Order;
use crate::recipe::{existing, Outcome, Writes};

pub async fn schema(pool: &MySqlPool) -> Result<()> {
    for ddl in [
        "CREATE TABLE IF NOT EXISTS peer_stock (product_id VARCHAR(64) PRIMARY KEY, stock_total BIGINT NOT NULL, sold BIGINT NOT NULL, version BIGINT NOT NULL) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS peer_orders (order_id VARCHAR(64) PRIMARY KEY, product_id VARCHAR(64) NOT NULL, buyer_id VARCHAR(64) NOT NULL, quantity BIGINT NOT NULL, UNIQUE KEY buyer_product (product_id, buyer_id)) ENGINE=InnoDB",
        // The article's lock table: a unique key, its owner, and an expiry
        // (epoch ms) after which another owner may take it over.
        "CREATE TABLE IF NOT EXISTS distributed_lock (lock_key VARCHAR(128) PRIMARY KEY, owner VARCHAR(64) NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB",
    ] {
        sqlx::query(ddl).execute(pool).await?;
    }
    Ok(())
}

pub async fn setup(pool: &MySqlPool, product: &str, stock: u64) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM peer_orders WHERE product_id = ?")
        .bind(product)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM distributed_lock WHERE lock_key = ?")
        .bind(lock_key(product))
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO peer_stock (product_id, stock_total, sold, version) VALUES (?, ?, 0, 0)
         ON DUPLICATE KEY UPDATE stock_total = VALUES(stock_total), sold = 0, version = 0",
    )
    .bind(product)
    .bind(stock as i64)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

fn lock_key(product: &str) -> String {
    format!("stock:{product}")
}

pub async fn find(pool: &MySqlPool, product: &str, buyer: &str) -> Result<Option<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT order_id, quantity FROM peer_orders WHERE product_id = ? AND buyer_id = ?",
    )
    .bind(product)
    .bind(buyer)
    .fetch_optional(pool)
    .await?)
}

/// The stock row's total and units sold, read with no lock.
async fn stock(pool: &MySqlPool, product: &str) -> Result<(i64, i64)> {
    Ok(
        sqlx::query_as("SELECT stock_total, sold FROM peer_stock WHERE product_id = ?")
            .bind(product)
            .fetch_one(pool)
            .await?,
    )
}

pub async fn totals(pool: &MySqlPool, product: &str) -> Result<(i64, i64, i64)> {
    let (total, sold): (i64, i64) =
        sqlx::query_as("SELECT stock_total, sold FROM peer_stock WHERE product_id = ?")
            .bind(product)
            .fetch_optional(pool)
            .await?
            .unwrap_or((0, 0));
    let (units,): (i64,) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED) FROM peer_orders WHERE product_id = ?",
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    Ok((total, sold, units))
}

pub async fn orders(pool: &MySqlPool, product: &str) -> Result<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as("SELECT order_id, buyer_id, quantity FROM peer_orders WHERE product_id = ? ORDER BY order_id")
        .bind(product)
        .fetch_all(pool)
        .await?)
}

fn unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

fn deadlock(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("40001"))
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    o: &Order<'_>,
    writes: &Writes,
) -> Result<bool, sqlx::Error> {
    writes.db(1);
    match sqlx::query(
        "INSERT INTO peer_orders (order_id, product_id, buyer_id, quantity) VALUES (?, ?, ?, ?)",
    )
    .bind(o.order_id)
    .bind(o.product)
    .bind(o.buyer)
    .bind(o.quantity as i64)
    .execute(&mut **tx)
    .await
    {
        Ok(_) => Ok(true),
        Err(e) if unique_violation(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn after_conflict(pool: &MySqlPool, o: &Order<'_>) -> Result<Outcome> {
    Ok(existing(find(pool, o.product, o.buyer).await?, o.order_id).unwrap_or(Outcome::BuyerLimit))
}

/// Inserts the order and commits the stock change with it; if the buyer's
/// order is already there (a retry, or another request of the same buyer),
/// rolls both back and answers with what the buyer holds.
async fn finish(
    mut tx: sqlx::Transaction<'_, sqlx::MySql>,
    pool: &MySqlPool,
    o: &Order<'_>,
    writes: &Writes,
) -> Result<Outcome> {
    if !insert(&mut tx, o, writes).await? {
        tx.rollback().await?;
        return after_conflict(pool, o).await;
    }
    tx.commit().await?;
    Ok(Outcome::Made {
        order_id: o.order_id.into(),
        quantity: o.quantity,
    })
}

/// (c) on MariaDB.
pub async fn optimistic(pool: &MySqlPool, o: &Order<'_>, writes: &Writes) -> Result<Outcome> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(done);
    }
    let mut tx = pool.begin().await?;
    writes.db(1);
    let updated = sqlx::query(
        "UPDATE peer_stock SET sold = sold + ?, version = version + 1 WHERE product_id = ? AND stock_total - sold >= ?",
    )
    .bind(o.quantity as i64)
    .bind(o.product)
    .bind(o.quantity as i64)
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() == 0 {
        tx.rollback().await?;
        return Ok(Outcome::SoldOut);
    }
    finish(tx, pool, o, writes).await
}

/// How the lock table behaves.
#[derive(Clone, Copy, Debug)]
pub struct LockTable {
    pub lease_ms: u64,
    /// How long a request waits for the lock before it gives up (503).
    pub wait_ms: u64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Takes the product's lock row, or fails after `wait_ms`. An expired row
/// (its holder died) is deleted and taken over.
async fn acquire(
    pool: &MySqlPool,
    key: &str,
    owner: &str,
    cfg: LockTable,
    writes: &Writes,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(cfg.wait_ms);
    let mut pause_ms = 1;
    loop {
        writes.db(1);
        match sqlx::query(
            "INSERT INTO distributed_lock (lock_key, owner, expires_at) VALUES (?, ?, ?)",
        )
        .bind(key)
        .bind(owner)
        .bind(now_ms() + cfg.lease_ms as i64)
        .execute(pool)
        .await
        {
            Ok(_) => return Ok(()),
            // Taken, or InnoDB chose this insert as a deadlock's victim
            // (1213: "try restarting transaction"): wait and try again.
            Err(e) if unique_violation(&e) || deadlock(&e) => {}
            Err(e) => return Err(e.into()),
        }
        // A plain read first, so that only a request that saw an expired
        // row takes the delete's locks.
        let expires_at: Option<(i64,)> =
            sqlx::query_as("SELECT expires_at FROM distributed_lock WHERE lock_key = ?")
                .bind(key)
                .fetch_optional(pool)
                .await?;
        if expires_at.is_some_and(|(at,)| at < now_ms()) {
            writes.db(1);
            match sqlx::query("DELETE FROM distributed_lock WHERE lock_key = ? AND expires_at < ?")
                .bind(key)
                .bind(now_ms())
                .execute(pool)
                .await
            {
                Ok(r) if r.rows_affected() > 0 => continue,
                Ok(_) => {}
                Err(e) if deadlock(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if Instant::now() >= deadline {
            bail!("the lock was not free within {} ms", cfg.wait_ms);
        }
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        pause_ms = (pause_ms * 2).min(20);
    }
}

async fn release(pool: &MySqlPool, key: &str, owner: &str, writes: &Writes) -> Result<()> {
    writes.db(1);
    sqlx::query("DELETE FROM distributed_lock WHERE lock_key = ? AND owner = ?")
        .bind(key)
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

/// (c2) The lock row serialises read-decrement-write. With `die` the
/// holder "dies" after taking the lock: it neither works nor releases, so
/// the product is blocked until the lease expires.
pub async fn lock_table(
    pool: &MySqlPool,
    o: &Order<'_>,
    cfg: LockTable,
    writes: &Writes,
    die: bool,
) -> Result<Outcome> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(done);
    }
    // Checked before contending, without the lock, and again under it (as
    // `pg::before_lock` says why).
    let (total, sold) = stock(pool, o.product).await?;
    if total - sold < o.quantity as i64 {
        return Ok(Outcome::SoldOut);
    }
    let key = lock_key(o.product);
    acquire(pool, &key, o.order_id, cfg, writes).await?;
    if die {
        bail!("fault: the lock holder died without releasing");
    }
    let result = async {
        let (total, sold) = stock(pool, o.product).await?;
        if total - sold < o.quantity as i64 {
            return Ok(Outcome::SoldOut);
        }
        let mut tx = pool.begin().await?;
        writes.db(1);
        sqlx::query("UPDATE peer_stock SET sold = ?, version = version + 1 WHERE product_id = ?")
            .bind(sold + o.quantity as i64)
            .bind(o.product)
            .execute(&mut *tx)
            .await?;
        finish(tx, pool, o, writes).await
    }
    .await;
    release(pool, &key, o.order_id, writes).await?;
    result
}
