//! flashgate-peers: the article's recipes for a flash sale, each behind
//! the same reserve API as flashgate (buyer tokens, Idempotency-Key, the
//! same problem codes), so that flashgate-load drives them all alike.
//!
//! `serve --recipe R` serves one recipe; `consume` runs the Lua recipe's
//! queue consumer alone (so a fault run can kill it).

mod cache;
mod maria;
mod pg;
mod recipe;
mod zk;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use clap::{Parser, Subcommand};
use flashgate_wire::bounds;
use flashgate_wire::codes::ProblemCode;
use flashgate_wire::keys::KeySet;
use flashgate_wire::peer::{PeerOrder, PeerOrders, PeerSetup, PeerStats};
use flashgate_wire::problem::ProblemDocument;
use flashgate_wire::token;
use serde_json::json;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::{MySqlPool, PgPool};

use crate::pg::Order;
use crate::recipe::{Outcome, Recipe, Writes};

/// Connections per database pool: PostgreSQL's default `max_connections`
/// is 100, and the origin and the tests share the server.
pub const POOL_CONNECTIONS_MAX: u32 = 32;
/// The largest reserve body read.
pub const BODY_BYTES_MAX: usize = 1024;

#[derive(Parser)]
#[command(name = "flashgate-peers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    Serve(Serve),
    /// The Lua recipe's consumer alone.
    Consume {
        #[arg(
            long,
            env = "PEERS_PG_URL",
            default_value = "postgres://postgres@127.0.0.1:5432/test"
        )]
        pg_url: String,
        #[arg(
            long,
            env = "PEERS_AMQP_URL",
            default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
        )]
        amqp_url: String,
    },
}

#[derive(Parser, Clone)]
struct Serve {
    #[arg(long, value_enum)]
    recipe: Recipe,
    #[arg(long, default_value = "127.0.0.1:8790")]
    listen: SocketAddr,
    #[arg(long, env = "FLASHGATE_ADMIN_TOKEN")]
    admin_token: String,
    #[arg(long, env = "FLASHGATE_BUYER_TOKEN_KEYS")]
    buyer_keys: String,
    #[arg(long, default_value = "flashgate")]
    audience: String,
    #[arg(
        long,
        env = "PEERS_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pg_url: String,
    #[arg(
        long,
        env = "PEERS_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    #[arg(
        long,
        env = "PEERS_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    redis_url: String,
    #[arg(
        long,
        env = "PEERS_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    /// zookeeper: the ensemble (the bench starts one on loopback).
    #[arg(long, env = "PEERS_ZK_HOSTS", default_value = "127.0.0.1:2181")]
    zk_hosts: String,
    /// lua-mq: run no consumer in this process (`consume` runs it).
    #[arg(long)]
    no_consumer: bool,
    /// Lock recipes: the lease, in ms.
    #[arg(long, default_value_t = 3_000)]
    lease_ms: u64,
    /// Lock recipes: how long a request waits for the lock.
    #[arg(long, default_value_t = 10_000)]
    lock_wait_ms: u64,
    /// redis-lock: no watchdog renews the lease (a fault run).
    #[arg(long)]
    no_watchdog: bool,
    /// redis-lock: every N-th holder stalls (a fault run; 0: none).
    #[arg(long, default_value_t = 0)]
    stall_every: u64,
    #[arg(long, default_value_t = 0)]
    stall_ms: u64,
    /// lock-table: the N-th reserve's lock holder dies holding the lock
    /// (a fault run; 0: none).
    #[arg(long, default_value_t = 0)]
    die_holding_at: u64,
}

enum Backend {
    LuaMq { mq: cache::LuaMq, pool: PgPool },
    RedisLock(cache::Locked),
    Zk(zk::ZkLocked),
    Pg(PgPool),
    Maria(MySqlPool),
}

struct App {
    recipe: Recipe,
    backend: Backend,
    writes: Arc<Writes>,
    reserves: AtomicU64,
    admin_token: String,
    buyer_keys: KeySet,
    audience: String,
    cfg: Serve,
}

fn problem(code: ProblemCode, detail: impl Into<String>) -> Response {
    let doc = ProblemDocument::new(code.as_str(), code.status(), code.title(), detail);
    let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [("content-type", flashgate_wire::problem::CONTENT_TYPE)],
        Json(doc),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// The refusal of a request without the admin token, if it has none.
fn admin(app: &App, headers: &HeaderMap) -> Option<Response> {
    match bearer(headers) {
        Some(t) if t == app.admin_token => None,
        _ => Some(problem(
            ProblemCode::Unauthorized,
            "the admin token is missing or wrong",
        )),
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn pg_pool(url: &str) -> Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(POOL_CONNECTIONS_MAX)
        .connect(url)
        .await
        .context("PostgreSQL")?;
    pg::schema(&pool).await?;
    Ok(pool)
}

async fn maria_pool(url: &str) -> Result<MySqlPool> {
    let pool = MySqlPoolOptions::new()
        .max_connections(POOL_CONNECTIONS_MAX)
        .connect(url)
        .await
        .context("MariaDB")?;
    maria::schema(&pool).await?;
    Ok(pool)
}

async fn setup(
    State(app): State<Arc<App>>,
    Path(product): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = admin(&app, &headers) {
        return r;
    }
    let Ok(s) = serde_json::from_slice::<PeerSetup>(&body) else {
        return problem(
            ProblemCode::InvalidBody,
            "expected {stock_total, per_buyer_max}",
        );
    };
    if !bounds::valid_product_id(&product) || s.stock_total > bounds::STOCK_UNITS_MAX {
        return problem(ProblemCode::InvalidInput, "bad product id or stock");
    }
    let done = async {
        match &app.backend {
            Backend::LuaMq { mq, pool } => {
                mq.purge().await?;
                pg::setup(pool, &product, 0).await?;
                cache::setup(&mut mq.redis.clone(), &product, s.stock_total).await?;
                // The stock row holds the total; Redis is the authority.
                sqlx::query("UPDATE peer_stock SET stock_total = $2 WHERE product_id = $1")
                    .bind(&product)
                    .bind(s.stock_total as i64)
                    .execute(pool)
                    .await?;
            }
            Backend::RedisLock(l) => {
                cache::setup(&mut l.redis.clone(), &product, 0).await?;
                pg::setup(&l.pool, &product, s.stock_total).await?;
            }
            Backend::Zk(z) => pg::setup(&z.pool, &product, s.stock_total).await?,
            Backend::Pg(pool) => pg::setup(pool, &product, s.stock_total).await?,
            Backend::Maria(pool) => maria::setup(pool, &product, s.stock_total).await?,
        }
        anyhow::Ok(())
    }
    .await;
    app.writes.reset();
    app.reserves.store(0, Ordering::Relaxed);
    match done {
        Ok(()) => Json(json!({ "product_id": product, "stock_total": s.stock_total, "recipe": app.recipe.name() })).into_response(),
        Err(e) => problem(ProblemCode::Unavailable, format!("{e:#}")),
    }
}

async fn reserve(
    State(app): State<Arc<App>>,
    Path(product): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(t) = bearer(&headers) else {
        return problem(
            ProblemCode::TokenMissing,
            "send the buyer token as a Bearer token",
        );
    };
    let buyer = match token::verify(&app.buyer_keys, t, &app.audience, now_s()) {
        Ok(b) => b.id,
        Err(e) => return problem(ProblemCode::TokenInvalid, e.describe()),
    };
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()) else {
        return problem(
            ProblemCode::IdempotencyKeyMissing,
            "send an Idempotency-Key",
        );
    };
    let key = key.trim_matches('"');
    if key.is_empty() || key.len() > 128 {
        return problem(ProblemCode::IdempotencyKeyInvalid, "1 to 128 characters");
    }
    if body.len() > BODY_BYTES_MAX {
        return problem(
            ProblemCode::BodyTooLarge,
            format!("at most {BODY_BYTES_MAX} bytes"),
        );
    }
    let quantity = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(v) => match v.get("quantity").and_then(|q| q.as_u64()) {
            Some(q) if q >= 1 && q <= u64::from(bounds::ORDER_QUANTITY_MAX) => q,
            _ => return problem(ProblemCode::InvalidQuantity, "quantity is 1 to 1000"),
        },
        Err(_) => return problem(ProblemCode::MalformedJson, "the body is not JSON"),
    };
    if !bounds::valid_product_id(&product) {
        return problem(ProblemCode::InvalidProductId, "bad product id");
    }
    let order_id = recipe::order_id(&product, &buyer, key);
    let o = Order {
        product: &product,
        buyer: &buyer,
        order_id: &order_id,
        quantity,
    };
    let n = app.reserves.fetch_add(1, Ordering::Relaxed) + 1;
    let w = &app.writes;
    let outcome = match &app.backend {
        Backend::LuaMq { mq, .. } => mq.reserve(&o, w).await,
        Backend::RedisLock(l) => l.reserve(&o, w).await,
        Backend::Zk(z) => z.reserve(&o, w).await,
        Backend::Pg(pool) => match app.recipe {
            Recipe::ForUpdate => pg::for_update(pool, &o, w).await,
            Recipe::Naive => pg::read_decrement_write(pool, &o, w, 0).await,
            _ => pg::optimistic(pool, &o, w).await,
        },
        Backend::Maria(pool) => match app.recipe {
            Recipe::LockTable => {
                let cfg = maria::LockTable {
                    lease_ms: app.cfg.lease_ms,
                    wait_ms: app.cfg.lock_wait_ms,
                };
                maria::lock_table(pool, &o, cfg, w, n == app.cfg.die_holding_at).await
            }
            _ => maria::optimistic(pool, &o, w).await,
        },
    };
    match outcome {
        Ok(Outcome::Made { order_id, quantity }) => (
            StatusCode::CREATED,
            Json(json!({ "reservation_id": order_id, "state": "confirmed", "quantity": quantity })),
        )
            .into_response(),
        Ok(Outcome::Replayed { order_id, quantity }) => (
            StatusCode::OK,
            [("idempotent-replayed", "true")],
            Json(json!({ "reservation_id": order_id, "state": "confirmed", "quantity": quantity })),
        )
            .into_response(),
        Ok(Outcome::SoldOut) => problem(ProblemCode::SoldOut, "no units left"),
        Ok(Outcome::BuyerLimit) => {
            problem(ProblemCode::BuyerLimit, "the buyer already has an order")
        }
        Err(e) => {
            // Every failure is logged: a bench run must show why a peer
            // answered 503, not only that it did.
            eprintln!("reserve {product} {buyer}: {e:#}");
            problem(ProblemCode::Unavailable, format!("{e:#}"))
        }
    }
}

async fn stats(
    State(app): State<Arc<App>>,
    Path(product): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admin(&app, &headers) {
        return r;
    }
    let read = async {
        let (total, sold, units) = match &app.backend {
            Backend::LuaMq { mq, pool } => {
                let (total, _, units) = pg::totals(pool, &product).await?;
                let left = cache::remaining(&mut mq.redis.clone(), &product)
                    .await?
                    .unwrap_or(total);
                (total, total - left, units)
            }
            Backend::RedisLock(l) => pg::totals(&l.pool, &product).await?,
            Backend::Zk(z) => pg::totals(&z.pool, &product).await?,
            Backend::Pg(pool) => pg::totals(pool, &product).await?,
            Backend::Maria(pool) => maria::totals(pool, &product).await?,
        };
        anyhow::Ok(PeerStats {
            recipe: app.recipe.name().into(),
            stock_total: total as u64,
            sold: sold as u64,
            order_units: units as u64,
            db_writes: app.writes.db.load(Ordering::Relaxed),
            cache_writes: app.writes.cache.load(Ordering::Relaxed),
            // Only the queued recipe has orders on their way; for the others
            // a difference is drift, which the verdict reports.
            settled: app.recipe != Recipe::LuaMq || sold == units,
        })
    }
    .await;
    match read {
        Ok(s) => Json(s).into_response(),
        Err(e) => problem(ProblemCode::Unavailable, format!("{e:#}")),
    }
}

async fn orders(
    State(app): State<Arc<App>>,
    Path(product): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admin(&app, &headers) {
        return r;
    }
    let rows = match &app.backend {
        Backend::LuaMq { pool, .. } | Backend::Pg(pool) => pg::orders(pool, &product).await,
        Backend::RedisLock(l) => pg::orders(&l.pool, &product).await,
        Backend::Zk(z) => pg::orders(&z.pool, &product).await,
        Backend::Maria(pool) => maria::orders(pool, &product).await,
    };
    match rows {
        Ok(rows) => Json(PeerOrders {
            orders: rows
                .into_iter()
                .map(|(reservation_id, buyer_id, quantity)| PeerOrder {
                    reservation_id,
                    buyer_id,
                    quantity: quantity as u64,
                })
                .collect(),
        })
        .into_response(),
        Err(e) => problem(ProblemCode::Unavailable, format!("{e:#}")),
    }
}

async fn serve(cfg: Serve) -> Result<()> {
    let writes = Arc::new(Writes::default());
    let backend = match cfg.recipe {
        Recipe::LuaMq => {
            let pool = pg_pool(&cfg.pg_url).await?;
            let (conn, ch) = cache::channel(&cfg.amqp_url, true).await?;
            // The connection lives as long as the process.
            std::mem::forget(conn);
            if !cfg.no_consumer {
                let (url, pool, writes) = (cfg.amqp_url.clone(), pool.clone(), writes.clone());
                tokio::spawn(async move {
                    if let Err(e) = cache::consume(&url, pool, writes).await {
                        eprintln!("consumer stopped: {e:#}");
                    }
                });
            }
            Backend::LuaMq {
                mq: cache::LuaMq::new(cache::redis(&cfg.redis_url).await?, ch),
                pool,
            }
        }
        Recipe::RedisLock => Backend::RedisLock(cache::Locked::new(
            cache::redis(&cfg.redis_url).await?,
            pg_pool(&cfg.pg_url).await?,
            cache::RedisLock {
                lease_ms: cfg.lease_ms,
                wait_ms: cfg.lock_wait_ms,
                watchdog: !cfg.no_watchdog,
                stall_every: cfg.stall_every,
                stall_ms: cfg.stall_ms,
            },
        )),
        Recipe::Zookeeper => Backend::Zk(zk::ZkLocked {
            client: zk::connect(&cfg.zk_hosts).await?,
            pool: pg_pool(&cfg.pg_url).await?,
            wait_ms: cfg.lock_wait_ms,
        }),
        Recipe::OptimisticPg | Recipe::ForUpdate | Recipe::Naive => {
            Backend::Pg(pg_pool(&cfg.pg_url).await?)
        }
        Recipe::OptimisticMariadb | Recipe::LockTable => {
            Backend::Maria(maria_pool(&cfg.mysql_url).await?)
        }
    };
    let buyer_keys =
        KeySet::parse(&cfg.buyer_keys).map_err(|e| anyhow::anyhow!("--buyer-keys: {e:?}"))?;
    let app = Arc::new(App {
        recipe: cfg.recipe,
        backend,
        writes,
        reserves: AtomicU64::new(0),
        admin_token: cfg.admin_token.clone(),
        buyer_keys,
        audience: cfg.audience.clone(),
        cfg: cfg.clone(),
    });
    let router = Router::new()
        .route("/admin/products/{id}", put(setup))
        .route("/admin/products/{id}/stats", get(stats))
        .route("/admin/products/{id}/orders", get(orders))
        .route("/api/products/{id}/reservations", post(reserve))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    println!(
        "flashgate-peers {} listening on http://{}",
        cfg.recipe.name(),
        listener.local_addr()?
    );
    axum::serve(listener, router).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Serve(cfg) => serve(cfg).await,
        Command::Consume { pg_url, amqp_url } => {
            let pool = pg_pool(&pg_url).await?;
            println!("flashgate-peers consumer on {}", cache::QUEUE);
            cache::consume(&amqp_url, pool, Arc::new(Writes::default())).await
        }
    }
}
