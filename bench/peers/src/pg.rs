//! The PostgreSQL recipes: optimistic (c), pessimistic (d), naive (f), and
//! the critical section the Redis lock (b) guards. Orders have a unique
//! index on (product, buyer), as the article's.

use anyhow::Result;
use sqlx::{PgPool, Postgres, Transaction};

use crate::recipe::{existing, Outcome, Writes};

pub async fn schema(pool: &PgPool) -> Result<()> {
    for ddl in [
        "CREATE TABLE IF NOT EXISTS peer_stock (product_id TEXT PRIMARY KEY, stock_total BIGINT NOT NULL, sold BIGINT NOT NULL, version BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS peer_orders (order_id TEXT PRIMARY KEY, product_id TEXT NOT NULL, buyer_id TEXT NOT NULL, quantity BIGINT NOT NULL, UNIQUE (product_id, buyer_id))",
    ] {
        sqlx::query(ddl).execute(pool).await?;
    }
    Ok(())
}

pub async fn setup(pool: &PgPool, product: &str, stock: u64) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM peer_orders WHERE product_id = $1")
        .bind(product)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO peer_stock (product_id, stock_total, sold, version) VALUES ($1, $2, 0, 0)
         ON CONFLICT (product_id) DO UPDATE SET stock_total = $2, sold = 0, version = 0",
    )
    .bind(product)
    .bind(stock as i64)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub async fn find(pool: &PgPool, product: &str, buyer: &str) -> Result<Option<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT order_id, quantity FROM peer_orders WHERE product_id = $1 AND buyer_id = $2",
    )
    .bind(product)
    .bind(buyer)
    .fetch_optional(pool)
    .await?)
}

/// Stock total, units sold by the stock row, units in orders.
pub async fn totals(pool: &PgPool, product: &str) -> Result<(i64, i64, i64)> {
    let (total, sold): (i64, i64) =
        sqlx::query_as("SELECT stock_total, sold FROM peer_stock WHERE product_id = $1")
            .bind(product)
            .fetch_optional(pool)
            .await?
            .unwrap_or((0, 0));
    let (units,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(SUM(quantity), 0)::BIGINT FROM peer_orders WHERE product_id = $1",
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    Ok((total, sold, units))
}

pub async fn orders(pool: &PgPool, product: &str) -> Result<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as("SELECT order_id, buyer_id, quantity FROM peer_orders WHERE product_id = $1 ORDER BY order_id")
        .bind(product)
        .fetch_all(pool)
        .await?)
}

fn unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

pub struct Order<'a> {
    pub product: &'a str,
    pub buyer: &'a str,
    pub order_id: &'a str,
    pub quantity: u64,
}

async fn insert(
    tx: &mut Transaction<'_, Postgres>,
    o: &Order<'_>,
    writes: &Writes,
) -> Result<Option<Outcome>, sqlx::Error> {
    writes.db(1);
    match sqlx::query("INSERT INTO peer_orders (order_id, product_id, buyer_id, quantity) VALUES ($1, $2, $3, $4)")
        .bind(o.order_id)
        .bind(o.product)
        .bind(o.buyer)
        .bind(o.quantity as i64)
        .execute(&mut **tx)
        .await
    {
        Ok(_) => Ok(None),
        // Another request of the same buyer won the race: the caller rolls
        // back and reports what it holds.
        Err(e) if unique_violation(&e) => Ok(Some(Outcome::BuyerLimit)),
        Err(e) => Err(e),
    }
}

/// After a unique violation: the buyer's order decides replay or limit.
async fn after_conflict(pool: &PgPool, o: &Order<'_>) -> Result<Outcome> {
    Ok(existing(find(pool, o.product, o.buyer).await?, o.order_id).unwrap_or(Outcome::BuyerLimit))
}

/// Inserts the order and commits the stock change with it; if the buyer's
/// order is already there (a retry, or another request of the same buyer),
/// rolls both back and answers with what the buyer holds.
async fn finish(
    mut tx: Transaction<'_, Postgres>,
    pool: &PgPool,
    o: &Order<'_>,
    writes: &Writes,
) -> Result<Outcome> {
    if insert(&mut tx, o, writes).await?.is_some() {
        tx.rollback().await?;
        return after_conflict(pool, o).await;
    }
    tx.commit().await?;
    Ok(Outcome::Made {
        order_id: o.order_id.into(),
        quantity: o.quantity,
    })
}

/// (c) One conditional UPDATE decides; the version column counts changes
/// for readers that cache the row.
pub async fn optimistic(pool: &PgPool, o: &Order<'_>, writes: &Writes) -> Result<Outcome> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(done);
    }
    let mut tx = pool.begin().await?;
    writes.db(1);
    let updated = sqlx::query(
        "UPDATE peer_stock SET sold = sold + $2, version = version + 1 WHERE product_id = $1 AND stock_total - sold >= $2",
    )
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

/// (d) The stock row is locked for the transaction.
pub async fn for_update(pool: &PgPool, o: &Order<'_>, writes: &Writes) -> Result<Outcome> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(done);
    }
    let mut tx = pool.begin().await?;
    let (total, sold): (i64, i64) =
        sqlx::query_as("SELECT stock_total, sold FROM peer_stock WHERE product_id = $1 FOR UPDATE")
            .bind(o.product)
            .fetch_one(&mut *tx)
            .await?;
    if total - sold < o.quantity as i64 {
        tx.rollback().await?;
        return Ok(Outcome::SoldOut);
    }
    writes.db(1);
    sqlx::query("UPDATE peer_stock SET sold = $2, version = version + 1 WHERE product_id = $1")
        .bind(o.product)
        .bind(sold + o.quantity as i64)
        .execute(&mut *tx)
        .await?;
    finish(tx, pool, o, writes).await
}

/// The stock row's total and units sold, read with no lock.
async fn stock(pool: &PgPool, product: &str) -> Result<(i64, i64)> {
    Ok(
        sqlx::query_as("SELECT stock_total, sold FROM peer_stock WHERE product_id = $1")
            .bind(product)
            .fetch_one(pool)
            .await?,
    )
}

/// The lock recipes' check before they contend: the buyer's earlier order,
/// or sold out, read without any lock. Their authors check this first so
/// that the sold-out part of a burst does not queue for the lock; the
/// critical section checks both again.
pub async fn before_lock(pool: &PgPool, o: &Order<'_>) -> Result<Option<Outcome>> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(Some(done));
    }
    let (total, sold) = stock(pool, o.product).await?;
    Ok((total - sold < o.quantity as i64).then_some(Outcome::SoldOut))
}

/// Read, then write what was read minus the units: correct only while
/// something outside serialises the callers (the Redis lock), and the
/// naive recipe (f) when nothing does. `stall_ms` pauses between the read
/// and the write, as a GC pause would.
pub async fn read_decrement_write(
    pool: &PgPool,
    o: &Order<'_>,
    writes: &Writes,
    stall_ms: u64,
) -> Result<Outcome> {
    if let Some(done) = existing(find(pool, o.product, o.buyer).await?, o.order_id) {
        return Ok(done);
    }
    let (total, sold) = stock(pool, o.product).await?;
    if total - sold < o.quantity as i64 {
        return Ok(Outcome::SoldOut);
    }
    if stall_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(stall_ms)).await;
    }
    let mut tx = pool.begin().await?;
    writes.db(1);
    sqlx::query("UPDATE peer_stock SET sold = $2, version = version + 1 WHERE product_id = $1")
        .bind(o.product)
        .bind(sold + o.quantity as i64)
        .execute(&mut *tx)
        .await?;
    finish(tx, pool, o, writes).await
}

/// The consumer's idempotent insert of an order that Redis already counted
/// (a): a redelivered message inserts nothing.
pub async fn insert_delivered(pool: &PgPool, o: &Order<'_>, writes: &Writes) -> Result<()> {
    writes.db(1);
    sqlx::query(
        "INSERT INTO peer_orders (order_id, product_id, buyer_id, quantity) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(o.order_id)
    .bind(o.product)
    .bind(o.buyer)
    .bind(o.quantity as i64)
    .execute(pool)
    .await?;
    Ok(())
}
