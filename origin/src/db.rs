//! The origin's database: SQLite under a data directory by default, or
//! PostgreSQL when `DATABASE_URL` says so. One code path serves both through
//! sqlx's `Any` driver; each backend has its own migrations.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use flashgate_wire::{ItemResult, ItemStatus, Order};
use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, Executor, Row};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "Sqlite",
            Backend::Postgres => "Postgres",
        }
    }
}

#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
}

/// A migration compiled into the binary: version, description, SQL. The
/// binary needs no files at run time, and no proc macro at build time.
type EmbeddedMigration = (i64, &'static str, &'static str);

const SQLITE_MIGRATIONS: &[EmbeddedMigration] = &[(
    1,
    "init",
    include_str!("../migrations/sqlite/0001_init.sql"),
)];
const POSTGRES_MIGRATIONS: &[EmbeddedMigration] = &[(
    1,
    "init",
    include_str!("../migrations/postgres/0001_init.sql"),
)];

/// sqlx's migration source over the embedded migrations. A database
/// migrated before keeps working: version, description and checksum (of the
/// SQL) are what sqlx's `migrate!` recorded.
#[derive(Debug)]
struct Embedded(&'static [EmbeddedMigration]);

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Vec<Migration>, BoxDynError>> + Send>,
    > {
        let migrations = self
            .0
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    Cow::Borrowed(sql),
                    false,
                )
            })
            .collect();
        Box::pin(std::future::ready(Ok(migrations)))
    }
}

/// How many times a batch transaction is retried when the database reports
/// a deadlock or a serialization failure, which concurrent batches for the
/// same product can cause on PostgreSQL.
const TX_ATTEMPTS_MAX: u32 = 5;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Product {
    pub id: String,
    pub stock_total: i64,
    pub sold: i64,
    pub orders_accepted: i64,
    pub units_accepted: i64,
    pub orders_rejected: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredOrder {
    pub cursor: i64,
    pub reservation_id: String,
    pub product_id: String,
    pub buyer_id: String,
    pub quantity: i64,
    pub payment_ref: String,
    pub confirmed_at_ms: i64,
    pub received_at_ms: i64,
    pub status: String,
}

/// The outcome of setting a product's total.
#[derive(Debug, PartialEq, Eq)]
pub enum SetTotal {
    Done(Product),
    BelowSold { sold: i64 },
}

impl Db {
    /// Connects, and runs the backend's migrations.
    pub async fn connect(database_url: Option<&str>, data_dir: &Path) -> anyhow::Result<Db> {
        sqlx::any::install_default_drivers();
        let (url, backend) = match database_url.filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                (u.to_string(), Backend::Postgres)
            }
            Some(u) if u.starts_with("sqlite:") => (u.to_string(), Backend::Sqlite),
            Some(u) => anyhow::bail!("DATABASE_URL must be postgres://… or sqlite:…, not {u}"),
            None => {
                std::fs::create_dir_all(data_dir)
                    .with_context(|| format!("creating {}", data_dir.display()))?;
                let file = data_dir.join("origin.db");
                (
                    format!("sqlite://{}?mode=rwc", file.display()),
                    Backend::Sqlite,
                )
            }
        };
        let options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        let pool = match backend {
            // One connection: SQLite has one writer at a time anyway, and a
            // single connection can never hit SQLITE_BUSY between batches.
            Backend::Sqlite => {
                options
                    .max_connections(1)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // WAL lets readers run beside the writer; FULL
                            // sync makes an acknowledged batch survive power
                            // loss, which exactly-once delivery relies on.
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = FULL").await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await
            }
            Backend::Postgres => options.max_connections(16).connect(&url).await,
        }
        .with_context(|| format!("connecting to the {backend:?} database"))?;
        let migrations = match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        Migrator::new(Embedded(migrations))
            .await
            .context("reading migrations")?
            .run(&pool)
            .await
            .context("running migrations")?;
        Ok(Db { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Queries are written with `$1` placeholders; SQLite spells them `?1`.
    fn sql<'a>(&self, q: &'a str) -> Cow<'a, str> {
        match self.backend {
            Backend::Postgres => Cow::Borrowed(q),
            Backend::Sqlite => Cow::Owned(q.replace('$', "?")),
        }
    }

    pub async fn ping(&self) -> anyhow::Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Stores a batch in one transaction and returns a result per order, in
    /// the batch's order. Idempotent: an order already stored is `Exists`.
    pub async fn ingest(&self, orders: &[Order], now_ms: u64) -> anyhow::Result<Vec<ItemResult>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.ingest_once(orders, now_ms).await {
                Err(e) if attempt < TX_ATTEMPTS_MAX && is_retryable(&e) => {
                    tracing::warn!(attempt, error = %e, "batch transaction conflicted; retrying");
                    tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
                }
                other => return other,
            }
        }
    }

    async fn ingest_once(&self, orders: &[Order], now_ms: u64) -> anyhow::Result<Vec<ItemResult>> {
        let mut tx = self.pool.begin().await?;
        // Locks are taken in one global order (orders by reservation id,
        // then products by id), so concurrent batches cannot deadlock.
        let mut by_id: Vec<usize> = (0..orders.len()).collect();
        by_id.sort_by(|&a, &b| orders[a].reservation_id.cmp(&orders[b].reservation_id));
        let mut products: Vec<(&str, u64)> = orders
            .iter()
            .map(|o| (o.product_id.as_str(), o.stock_total))
            .collect();
        products.sort();
        products.dedup_by(|a, b| a.0 == b.0);
        for (id, stock_total) in &products {
            // A product the origin has not seen is registered with the
            // gate's total; an existing product keeps the origin's own.
            sqlx::query(&self.sql(
                "INSERT INTO products (id, stock_total, sold) VALUES ($1, $2, 0)
                 ON CONFLICT (id) DO NOTHING",
            ))
            .bind(*id)
            .bind(*stock_total as i64)
            .execute(&mut *tx)
            .await?;
        }
        let mut status = vec![ItemStatus::Exists; orders.len()];
        let mut fresh = Vec::new();
        for &i in &by_id {
            let o = &orders[i];
            let inserted: Option<AnyRow> = sqlx::query(&self.sql(
                "INSERT INTO orders (reservation_id, product_id, buyer_id, quantity, payment_ref,
                    confirmed_at, received_at, status)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'accepted')
                 ON CONFLICT (reservation_id) DO NOTHING
                 RETURNING id",
            ))
            .bind(o.reservation_id.as_str())
            .bind(o.product_id.as_str())
            .bind(o.buyer_id.as_str())
            .bind(i64::from(o.quantity))
            .bind(o.payment_ref.as_str())
            .bind(o.confirmed_at_ms as i64)
            .bind(now_ms as i64)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(row) = inserted {
                fresh.push((i, row.try_get::<i64, _>(0)?));
            }
        }
        // The conditional decrement, product by product.
        fresh.sort_by(|a, b| {
            orders[a.0]
                .product_id
                .cmp(&orders[b.0].product_id)
                .then(a.0.cmp(&b.0))
        });
        for (i, row_id) in fresh {
            let o = &orders[i];
            let n = i64::from(o.quantity);
            let updated = sqlx::query(&self.sql(
                "UPDATE products SET sold = sold + $1 WHERE id = $2 AND sold + $1 <= stock_total",
            ))
            .bind(n)
            .bind(o.product_id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 1 {
                status[i] = ItemStatus::Inserted;
            } else {
                sqlx::query(
                    &self.sql("UPDATE orders SET status = 'rejected_oversell' WHERE id = $1"),
                )
                .bind(row_id)
                .execute(&mut *tx)
                .await?;
                tracing::error!(
                    reservation_id = %o.reservation_id,
                    product_id = %o.product_id,
                    quantity = o.quantity,
                    "order would oversell the product; stored as rejected_oversell (a bug signal)"
                );
                status[i] = ItemStatus::RejectedOversell;
            }
        }
        tx.commit().await?;
        Ok(orders
            .iter()
            .zip(status)
            .map(|(o, status)| ItemResult {
                reservation_id: o.reservation_id.clone(),
                status,
            })
            .collect())
    }

    pub async fn product(&self, id: &str) -> anyhow::Result<Option<Product>> {
        let row = sqlx::query(&self.sql(
            "SELECT p.id, p.stock_total, p.sold,
                (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id AND o.status = 'accepted'),
                (SELECT CAST(COALESCE(SUM(o.quantity), 0) AS BIGINT) FROM orders o
                    WHERE o.product_id = p.id AND o.status = 'accepted'),
                (SELECT COUNT(*) FROM orders o
                    WHERE o.product_id = p.id AND o.status = 'rejected_oversell')
             FROM products p WHERE p.id = $1",
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| -> anyhow::Result<Product> {
            Ok(Product {
                id: r.try_get(0)?,
                stock_total: r.try_get(1)?,
                sold: r.try_get(2)?,
                orders_accepted: r.try_get(3)?,
                units_accepted: r.try_get(4)?,
                orders_rejected: r.try_get(5)?,
            })
        })
        .transpose()
    }

    pub async fn product_ids(&self) -> anyhow::Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM products ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// Creates a product or sets its total, which may not drop below `sold`.
    pub async fn set_total(&self, id: &str, stock_total: u64) -> anyhow::Result<SetTotal> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(&self.sql(
            "INSERT INTO products (id, stock_total, sold) VALUES ($1, $2, 0)
             ON CONFLICT (id) DO NOTHING",
        ))
        .bind(id)
        .bind(stock_total as i64)
        .execute(&mut *tx)
        .await?;
        let updated = sqlx::query(
            &self.sql("UPDATE products SET stock_total = $1 WHERE id = $2 AND sold <= $1"),
        )
        .bind(stock_total as i64)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            let sold: i64 = sqlx::query(&self.sql("SELECT sold FROM products WHERE id = $1"))
                .bind(id)
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            tx.rollback().await?;
            return Ok(SetTotal::BelowSold { sold });
        }
        tx.commit().await?;
        let product = self.product(id).await?.context("product just written")?;
        Ok(SetTotal::Done(product))
    }

    /// Orders in arrival order after the cursor `after`, at most `limit`.
    pub async fn orders(
        &self,
        product_id: Option<&str>,
        after: i64,
        limit: i64,
    ) -> anyhow::Result<Vec<StoredOrder>> {
        let columns = "id, reservation_id, product_id, buyer_id, quantity, payment_ref,
                       confirmed_at, received_at, status";
        let rows = match product_id {
            Some(p) => {
                sqlx::query(&self.sql(&format!(
                    "SELECT {columns} FROM orders WHERE product_id = $1 AND id > $2
                     ORDER BY id LIMIT $3"
                )))
                .bind(p)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&self.sql(&format!(
                    "SELECT {columns} FROM orders WHERE id > $1 ORDER BY id LIMIT $2"
                )))
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter()
            .map(|r| {
                Ok(StoredOrder {
                    cursor: r.try_get(0)?,
                    reservation_id: r.try_get(1)?,
                    product_id: r.try_get(2)?,
                    buyer_id: r.try_get(3)?,
                    quantity: r.try_get(4)?,
                    payment_ref: r.try_get(5)?,
                    confirmed_at_ms: r.try_get(6)?,
                    received_at_ms: r.try_get(7)?,
                    status: r.try_get(8)?,
                })
            })
            .collect()
    }
}

/// Deadlocks (40P01) and serialization failures (40001) are safe to retry:
/// the transaction was rolled back whole.
fn is_retryable(e: &anyhow::Error) -> bool {
    e.downcast_ref::<sqlx::Error>()
        .and_then(|e| e.as_database_error())
        .and_then(|d| d.code())
        .is_some_and(|c| c == "40P01" || c == "40001")
}
