//! The origin's database: SQLite under a data directory by default, or
//! PostgreSQL when `DATABASE_URL` says so. One code path serves both through
//! sqlx's `Any` driver; each backend has its own migrations.
//!
//! Two pools: one writes (ingest), one reads (the read routes), so that a
//! flood of reads waits for read connections and never for the writer's.
//! On SQLite the read pool opens the file read-only; WAL lets it read beside
//! the writer.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use flashgate_wire::{Batch, Event, EventResult, EventStatus};
use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyConnection, AnyPool, Executor, Row};

use crate::limits::{READ_CONNECTIONS_MAX, TX_ATTEMPTS_MAX, WRITE_CONNECTIONS_MAX};

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
    write: AnyPool,
    read: AnyPool,
    backend: Backend,
}

/// A migration compiled into the binary: version, description, SQL. The
/// binary needs no files at run time, and no proc macro at build time.
type EmbeddedMigration = (i64, &'static str, &'static str);

const SQLITE_MIGRATIONS: &[EmbeddedMigration] = &[
    (
        1,
        "init",
        include_str!("../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "events",
        include_str!("../migrations/sqlite/0002_events.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[EmbeddedMigration] = &[
    (
        1,
        "init",
        include_str!("../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "events",
        include_str!("../migrations/postgres/0002_events.sql"),
    ),
];

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

/// A product's totals at the origin: one row, kept by ingest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Product {
    pub id: String,
    pub stock_total: i64,
    /// Units of accepted orders that are not voided.
    pub sold: i64,
    pub orders_accepted: i64,
    pub orders_rejected: i64,
    pub orders_voided: i64,
    /// The gate's outbox sequence of the last stock total applied.
    pub stock_seq: i64,
}

/// What the orders themselves sum to, for reconciliation: counted, not
/// kept, so it can disagree with the products row only on a bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderSums {
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
    pub voided_at_ms: Option<i64>,
    pub status: String,
}

const PRODUCT_COLUMNS: &str =
    "id, stock_total, sold, orders_accepted, orders_rejected, orders_voided, stock_seq";

fn product_of(r: &AnyRow) -> anyhow::Result<Product> {
    Ok(Product {
        id: r.try_get(0)?,
        stock_total: r.try_get(1)?,
        sold: r.try_get(2)?,
        orders_accepted: r.try_get(3)?,
        orders_rejected: r.try_get(4)?,
        orders_voided: r.try_get(5)?,
        stock_seq: r.try_get(6)?,
    })
}

impl Db {
    /// Connects, and runs the backend's migrations.
    pub async fn connect(database_url: Option<&str>, data_dir: &Path) -> anyhow::Result<Db> {
        sqlx::any::install_default_drivers();
        let (url, read_url, backend) = match database_url.filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                (u.to_string(), u.to_string(), Backend::Postgres)
            }
            Some(u) if u.starts_with("sqlite:") => (u.to_string(), u.to_string(), Backend::Sqlite),
            Some(u) => anyhow::bail!("DATABASE_URL must be postgres://… or sqlite:…, not {u}"),
            None => {
                std::fs::create_dir_all(data_dir)
                    .with_context(|| format!("creating {}", data_dir.display()))?;
                let file = data_dir.join("origin.db");
                (
                    format!("sqlite://{}?mode=rwc", file.display()),
                    format!("sqlite://{}?mode=ro", file.display()),
                    Backend::Sqlite,
                )
            }
        };
        let options = || AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        let write = match backend {
            // One connection: SQLite has one writer at a time anyway, and a
            // single connection can never hit SQLITE_BUSY between batches.
            Backend::Sqlite => {
                options()
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
            Backend::Postgres => {
                options()
                    .max_connections(WRITE_CONNECTIONS_MAX)
                    .connect(&url)
                    .await
            }
        }
        .with_context(|| format!("connecting to the {backend:?} database"))?;
        let migrations = match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        Migrator::new(Embedded(migrations))
            .await
            .context("reading migrations")?
            .run(&write)
            .await
            .context("running migrations")?;
        let read = options()
            .max_connections(READ_CONNECTIONS_MAX)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                    }
                    Ok(())
                })
            })
            // Lazily: the read routes open its connections from the read
            // thread, so SQLite's connection threads inherit its low
            // priority (see `reads`).
            .connect_lazy(&read_url)
            .context("opening the read pool")?;
        Ok(Db {
            write,
            read,
            backend,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn close(&self) {
        self.read.close().await;
        self.write.close().await;
    }

    /// Queries are written with `$1` placeholders; SQLite spells them `?1`.
    fn sql<'a>(&self, q: &'a str) -> Cow<'a, str> {
        match self.backend {
            Backend::Postgres => Cow::Borrowed(q),
            Backend::Sqlite => Cow::Owned(q.replace('$', "?")),
        }
    }

    pub async fn ping(&self) -> anyhow::Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    /// Whether the connection to PostgreSQL is encrypted (`sslmode`);
    /// `None` for SQLite, which is a file.
    pub async fn tls(&self) -> anyhow::Result<Option<bool>> {
        if self.backend == Backend::Sqlite {
            return Ok(None);
        }
        let row = sqlx::query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&self.write)
            .await?;
        Ok(Some(row.try_get(0)?))
    }

    /// Applies a batch in one transaction and returns a result per event, in
    /// the batch's order. Idempotent: an event applied before is a
    /// `Duplicate`.
    pub async fn ingest(&self, batch: &Batch, now_ms: u64) -> anyhow::Result<Vec<EventResult>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.ingest_once(batch, now_ms).await {
                Err(e) if attempt < TX_ATTEMPTS_MAX && is_retryable(&e) => {
                    tracing::warn!(attempt, error = %e, "batch transaction conflicted; retrying");
                    tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
                }
                other => return other,
            }
        }
    }

    async fn ingest_once(&self, batch: &Batch, now_ms: u64) -> anyhow::Result<Vec<EventResult>> {
        let product = batch.product_id.as_str();
        let mut tx = self.write.begin().await?;
        // The product row first: every event of the batch updates it, and
        // taking it first orders the locks of concurrent deliveries alike.
        // A product the origin has not seen starts at 0 units; its first
        // event is its stock total.
        sqlx::query(&self.sql(
            "INSERT INTO products (id, stock_total, sold) VALUES ($1, 0, 0)
             ON CONFLICT (id) DO NOTHING",
        ))
        .bind(product)
        .execute(&mut *tx)
        .await?;
        let mut statuses = Vec::with_capacity(batch.events.len());
        let mut run: Vec<Order<'_>> = Vec::new();
        for event in &batch.events {
            if let Some(order) = Order::of(event) {
                run.push(order);
                continue;
            }
            // A stock total or a void sees every order before it applied.
            statuses.extend(self.apply_orders(&mut tx, product, &run, now_ms).await?);
            run.clear();
            statuses.push(match event {
                Event::Stock {
                    seq, stock_total, ..
                } => {
                    self.apply_stock(&mut tx, product, *seq, *stock_total)
                        .await?
                }
                Event::Void {
                    reservation_id,
                    voided_at_ms,
                    ..
                } => {
                    self.apply_void(&mut tx, product, reservation_id, *voided_at_ms)
                        .await?
                }
                Event::Order { .. } => unreachable!("an order joins the run"),
            });
        }
        statuses.extend(self.apply_orders(&mut tx, product, &run, now_ms).await?);
        tx.commit().await?;
        assert_eq!(statuses.len(), batch.events.len(), "a status per event");
        Ok(batch
            .events
            .iter()
            .zip(statuses)
            .map(|(event, status)| EventResult {
                seq: event.seq(),
                status,
            })
            .collect())
    }

    /// Orders one at a time (`apply_order`), in order.
    async fn apply_each(
        &self,
        conn: &mut AnyConnection,
        product: &str,
        orders: &[Order<'_>],
        now_ms: u64,
    ) -> anyhow::Result<Vec<EventStatus>> {
        let mut out = Vec::with_capacity(orders.len());
        for order in orders {
            out.push(self.apply_order(conn, product, order, now_ms).await?);
        }
        Ok(out)
    }

    /// A run of consecutive orders, in two statements: one insert of them
    /// all, which skips those stored before, and one conditional count of
    /// the units it stored. Applied one at a time, each order cost two
    /// statements of its own: in a reserve-heavy sale of 20,000 buyers
    /// (`node bench/sale.mjs`, the origin built before and after, in
    /// turn), the origin's CPU went from 103–106 to 12.5–13.0 ms per 1,000
    /// buyers and PostgreSQL's from 262–272 to 34–35. When the count would oversell
    /// (a bug signal: the gate never sells past its stock), the run is
    /// undone to its savepoint and applied one order at a time, which says
    /// which order oversold.
    async fn apply_orders(
        &self,
        conn: &mut AnyConnection,
        product: &str,
        orders: &[Order<'_>],
        now_ms: u64,
    ) -> anyhow::Result<Vec<EventStatus>> {
        if orders.len() <= 1 {
            return self.apply_each(conn, product, orders, now_ms).await;
        }
        sqlx::query("SAVEPOINT orders_run")
            .execute(&mut *conn)
            .await?;
        let sql = insert_orders(orders.len(), "reservation_id, quantity");
        let sql = self.sql(&sql);
        let mut insert = sqlx::query(&sql);
        for o in orders {
            insert = insert
                .bind(o.reservation_id)
                .bind(product)
                .bind(o.buyer_id)
                .bind(i64::from(o.quantity))
                .bind(o.payment_ref)
                .bind(o.confirmed_at_ms as i64)
                .bind(now_ms as i64);
        }
        let rows = insert.fetch_all(&mut *conn).await?;
        let mut stored = std::collections::HashSet::with_capacity(rows.len());
        let mut units: i64 = 0;
        for row in &rows {
            stored.insert(row.try_get::<String, _>(0)?);
            units += row.try_get::<i64, _>(1)?;
        }
        let counted = if stored.is_empty() {
            true
        } else {
            sqlx::query(&self.sql(
                "UPDATE products SET sold = sold + $1,
                    orders_accepted = orders_accepted + $2
                 WHERE id = $3 AND sold + $1 <= stock_total",
            ))
            .bind(units)
            .bind(stored.len() as i64)
            .bind(product)
            .execute(&mut *conn)
            .await?
            .rows_affected()
                == 1
        };
        if !counted {
            sqlx::query("ROLLBACK TO SAVEPOINT orders_run")
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query("RELEASE SAVEPOINT orders_run")
            .execute(&mut *conn)
            .await?;
        if !counted {
            return self.apply_each(conn, product, orders, now_ms).await;
        }
        // An order the insert stored is applied, the first time the run
        // names it; one stored before, or named twice, is a duplicate.
        Ok(orders
            .iter()
            .map(|o| {
                if stored.remove(o.reservation_id) {
                    EventStatus::Applied
                } else {
                    EventStatus::Duplicate
                }
            })
            .collect())
    }

    /// A stock total, applied once and in order, never below the units
    /// sold.
    async fn apply_stock(
        &self,
        conn: &mut AnyConnection,
        product: &str,
        seq: u64,
        stock_total: u64,
    ) -> anyhow::Result<EventStatus> {
        let applied = sqlx::query(&self.sql(
            "UPDATE products SET stock_total = $1, stock_seq = $2
             WHERE id = $3 AND stock_seq < $2 AND sold <= $1",
        ))
        .bind(stock_total as i64)
        .bind(seq as i64)
        .bind(product)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        Ok(if applied == 1 {
            EventStatus::Applied
        } else {
            let row = sqlx::query(&self.sql("SELECT stock_seq, sold FROM products WHERE id = $1"))
                .bind(product)
                .fetch_one(&mut *conn)
                .await?;
            let (stock_seq, sold): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            if stock_seq >= seq as i64 {
                EventStatus::Duplicate
            } else {
                tracing::error!(
                    product,
                    stock_total,
                    sold,
                    "a stock total below the units sold (a bug signal); refused"
                );
                EventStatus::Refused
            }
        })
    }

    /// An order, stored once per reservation and counted only within the
    /// product's stock.
    async fn apply_order(
        &self,
        conn: &mut AnyConnection,
        product: &str,
        order: &Order<'_>,
        now_ms: u64,
    ) -> anyhow::Result<EventStatus> {
        let Order {
            reservation_id,
            buyer_id,
            quantity,
            payment_ref,
            confirmed_at_ms,
        } = *order;
        let inserted: Option<AnyRow> = sqlx::query(&self.sql(&insert_orders(1, "id")))
            .bind(reservation_id)
            .bind(product)
            .bind(buyer_id)
            .bind(i64::from(quantity))
            .bind(payment_ref)
            .bind(confirmed_at_ms as i64)
            .bind(now_ms as i64)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(match inserted {
            None => EventStatus::Duplicate,
            Some(row) => {
                let row_id: i64 = row.try_get(0)?;
                // The conditional decrement: the second line of
                // defence against overselling.
                let counted = sqlx::query(&self.sql(
                    "UPDATE products SET sold = sold + $1,
                        orders_accepted = orders_accepted + 1
                     WHERE id = $2 AND sold + $1 <= stock_total",
                ))
                .bind(i64::from(quantity))
                .bind(product)
                .execute(&mut *conn)
                .await?
                .rows_affected();
                if counted == 1 {
                    EventStatus::Applied
                } else {
                    sqlx::query(
                        &self.sql("UPDATE orders SET status = 'rejected_oversell' WHERE id = $1"),
                    )
                    .bind(row_id)
                    .execute(&mut *conn)
                    .await?;
                    sqlx::query(&self.sql(
                        "UPDATE products SET orders_rejected = orders_rejected + 1
                         WHERE id = $1",
                    ))
                    .bind(product)
                    .execute(&mut *conn)
                    .await?;
                    tracing::error!(
                        %reservation_id, product, quantity,
                        "order would oversell the product; stored as rejected_oversell (a bug signal)"
                    );
                    EventStatus::RejectedOversell
                }
            }
        })
    }

    /// A void of an accepted order, once: its units go back to the product.
    async fn apply_void(
        &self,
        conn: &mut AnyConnection,
        product: &str,
        reservation_id: &str,
        voided_at_ms: u64,
    ) -> anyhow::Result<EventStatus> {
        let voided: Option<AnyRow> = sqlx::query(&self.sql(
            "UPDATE orders SET status = 'voided', voided_at = $1
             WHERE reservation_id = $2 AND status = 'accepted'
             RETURNING quantity",
        ))
        .bind(voided_at_ms as i64)
        .bind(reservation_id)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(match voided {
            Some(row) => {
                let q: i64 = row.try_get(0)?;
                sqlx::query(&self.sql(
                    "UPDATE products SET sold = sold - $1,
                        orders_accepted = orders_accepted - 1,
                        orders_voided = orders_voided + 1
                     WHERE id = $2",
                ))
                .bind(q)
                .bind(product)
                .execute(&mut *conn)
                .await?;
                EventStatus::Applied
            }
            None => {
                let status: Option<String> =
                    sqlx::query(&self.sql("SELECT status FROM orders WHERE reservation_id = $1"))
                        .bind(reservation_id)
                        .fetch_optional(&mut *conn)
                        .await?
                        .map(|r| r.try_get(0))
                        .transpose()?;
                if status.as_deref() == Some("voided") {
                    EventStatus::Duplicate
                } else {
                    tracing::error!(
                        %reservation_id, product, ?status,
                        "a void of an order the origin did not accept (a bug signal); refused"
                    );
                    EventStatus::Refused
                }
            }
        })
    }

    /// A product's row, read from the read pool.
    pub async fn product(&self, id: &str) -> anyhow::Result<Option<Product>> {
        let row = sqlx::query(&self.sql(&format!(
            "SELECT {PRODUCT_COLUMNS} FROM products WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(product_of).transpose()
    }

    /// What a product's orders sum to. A scan of its orders: for
    /// reconciliation, never a request path.
    pub async fn order_sums(&self, id: &str) -> anyhow::Result<OrderSums> {
        let row = sqlx::query(&self.sql(
            "SELECT
                CAST(COALESCE(SUM(CASE WHEN status = 'accepted' THEN quantity ELSE 0 END), 0) AS BIGINT),
                CAST(COALESCE(SUM(CASE WHEN status = 'rejected_oversell' THEN 1 ELSE 0 END), 0) AS BIGINT)
             FROM orders WHERE product_id = $1",
        ))
        .bind(id)
        .fetch_one(&self.read)
        .await?;
        Ok(OrderSums {
            units_accepted: row.try_get(0)?,
            orders_rejected: row.try_get(1)?,
        })
    }

    pub async fn product_ids(&self) -> anyhow::Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM products ORDER BY id")
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// Orders in arrival order after the cursor `after`, at most `limit`.
    pub async fn orders(
        &self,
        product_id: Option<&str>,
        after: i64,
        limit: i64,
    ) -> anyhow::Result<Vec<StoredOrder>> {
        let columns = "id, reservation_id, product_id, buyer_id, quantity, payment_ref,
                       confirmed_at, received_at, voided_at, status";
        let rows = match product_id {
            Some(p) => {
                sqlx::query(&self.sql(&format!(
                    "SELECT {columns} FROM orders WHERE product_id = $1 AND id > $2
                     ORDER BY id LIMIT $3"
                )))
                .bind(p)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(&self.sql(&format!(
                    "SELECT {columns} FROM orders WHERE id > $1 ORDER BY id LIMIT $2"
                )))
                .bind(after)
                .bind(limit)
                .fetch_all(&self.read)
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
                    voided_at_ms: r.try_get(8)?,
                    status: r.try_get(9)?,
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

/// The insert of `n` orders, bound in its columns' order, seven values
/// each, that skips an order stored before and returns `returning` of each
/// it stored.
fn insert_orders(n: usize, returning: &str) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let values: Vec<String> = (1..=7).map(|k| format!("${}", i * 7 + k)).collect();
            format!("({}, 'accepted')", values.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO orders (reservation_id, product_id, buyer_id, quantity,
            payment_ref, confirmed_at, received_at, status)
         VALUES {}
         ON CONFLICT (reservation_id) DO NOTHING
         RETURNING {returning}",
        rows.join(", ")
    )
}

/// An order event's fields, as `Db::apply_order` stores them.
struct Order<'a> {
    reservation_id: &'a str,
    buyer_id: &'a str,
    quantity: u32,
    payment_ref: &'a str,
    confirmed_at_ms: u64,
}

impl<'a> Order<'a> {
    fn of(event: &'a Event) -> Option<Order<'a>> {
        match event {
            Event::Order {
                reservation_id,
                buyer_id,
                quantity,
                payment_ref,
                confirmed_at_ms,
                ..
            } => Some(Order {
                reservation_id,
                buyer_id,
                quantity: *quantity,
                payment_ref,
                confirmed_at_ms: *confirmed_at_ms,
            }),
            _ => None,
        }
    }
}
