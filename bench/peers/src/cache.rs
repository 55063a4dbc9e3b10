//! The Redis recipes: (a) a Lua check-and-decrement whose orders travel
//! through RabbitMQ to PostgreSQL, and (b) a Redis lock with a watchdog
//! guarding read-decrement-write in PostgreSQL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use redis::aio::ConnectionManager;
use redis::Script;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::pg::{self, Order};
use crate::recipe::{Outcome, Writes};

pub const QUEUE: &str = "flashgate-peer-orders";
/// Unacknowledged deliveries a consumer holds at once.
pub const PREFETCH: u16 = 256;

fn stock_key(product: &str) -> String {
    format!("peer:{{{product}}}:stock")
}
fn buyers_key(product: &str) -> String {
    format!("peer:{{{product}}}:buyers")
}
fn lock_key(product: &str) -> String {
    format!("peer:{{{product}}}:lock")
}

pub async fn redis(url: &str) -> Result<ConnectionManager> {
    Ok(redis::Client::open(url)?.get_connection_manager().await?)
}

/// The stock in Redis, and no buyers yet.
pub async fn setup(con: &mut ConnectionManager, product: &str, stock: u64) -> Result<()> {
    redis::pipe()
        .atomic()
        .set(stock_key(product), stock)
        .del(buyers_key(product))
        .del(lock_key(product))
        .exec_async(con)
        .await?;
    Ok(())
}

/// Units Redis says are sold: the stock total minus what is left.
pub async fn remaining(con: &mut ConnectionManager, product: &str) -> Result<Option<i64>> {
    Ok(redis::cmd("GET")
        .arg(stock_key(product))
        .query_async(con)
        .await?)
}

/// Decides in one atomic script: a buyer's earlier order (replay or
/// limit), sold out, or take the units and remember the buyer's order.
const RESERVE_LUA: &str = r"
local have = redis.call('HGET', KEYS[2], ARGV[1])
if have then return {2, have} end
local stock = tonumber(redis.call('GET', KEYS[1]) or '-1')
if stock < 0 then return {-2, ''} end
local q = tonumber(ARGV[3])
if stock < q then return {-1, ''} end
redis.call('DECRBY', KEYS[1], q)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
return {1, ''}
";

/// Gives the units back when the order could not be queued.
const UNDO_LUA: &str = r"
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] .. ':' .. ARGV[3] then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('INCRBY', KEYS[1], tonumber(ARGV[3]))
end
return 0
";

#[derive(Serialize, Deserialize)]
struct Message {
    order_id: String,
    product_id: String,
    buyer_id: String,
    quantity: u64,
}

/// Runs one of the two order scripts, which take the same keys and
/// arguments: the stock, the buyers, and the buyer, order id and units.
async fn order_script<T: redis::FromRedisValue>(
    script: &Script,
    o: &Order<'_>,
    con: &mut ConnectionManager,
) -> redis::RedisResult<T> {
    script
        .key(stock_key(o.product))
        .key(buyers_key(o.product))
        .arg(o.buyer)
        .arg(o.order_id)
        .arg(o.quantity)
        .invoke_async(con)
        .await
}

pub struct LuaMq {
    pub redis: ConnectionManager,
    pub publish: Channel,
    reserve: Script,
    undo: Script,
}

pub async fn channel(amqp_url: &str, confirms: bool) -> Result<(Connection, Channel)> {
    let conn = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .context("RabbitMQ")?;
    let ch = conn.create_channel().await?;
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    if confirms {
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
    }
    Ok((conn, ch))
}

impl LuaMq {
    pub fn new(redis: ConnectionManager, publish: Channel) -> LuaMq {
        LuaMq {
            redis,
            publish,
            reserve: Script::new(RESERVE_LUA),
            undo: Script::new(UNDO_LUA),
        }
    }

    pub async fn purge(&self) -> Result<()> {
        self.publish
            .queue_purge(QUEUE.into(), QueuePurgeOptions::default())
            .await?;
        Ok(())
    }

    pub async fn reserve(&self, o: &Order<'_>, writes: &Writes) -> Result<Outcome> {
        let mut con = self.redis.clone();
        let (code, have): (i64, String) = order_script(&self.reserve, o, &mut con).await?;
        match code {
            -2 => bail!("unknown product"),
            -1 => return Ok(Outcome::SoldOut),
            2 => {
                let (id, q) = have.split_once(':').unwrap_or((&have, "0"));
                return Ok(if id == o.order_id {
                    Outcome::Replayed {
                        order_id: id.into(),
                        quantity: q.parse().unwrap_or(0),
                    }
                } else {
                    Outcome::BuyerLimit
                });
            }
            _ => {}
        }
        writes.cache(1);
        let body = serde_json::to_vec(&Message {
            order_id: o.order_id.into(),
            product_id: o.product.into(),
            buyer_id: o.buyer.into(),
            quantity: o.quantity,
        })?;
        // Persistent, and confirmed by the broker before the buyer hears
        // of it: an acknowledged order is on disk in the queue.
        let confirmed = async {
            self.publish
                .basic_publish(
                    "".into(),
                    QUEUE.into(),
                    BasicPublishOptions::default(),
                    &body,
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await?
                .await
        }
        .await;
        match confirmed {
            Ok(c) if c.is_ack() => Ok(Outcome::Made {
                order_id: o.order_id.into(),
                quantity: o.quantity,
            }),
            other => {
                writes.cache(1);
                let _: i64 = order_script(&self.undo, o, &mut con).await?;
                bail!("the order could not be queued: {other:?}")
            }
        }
    }
}

/// The consumer: each message's order is inserted idempotently, then
/// acknowledged; a message whose insert failed goes back to the queue.
pub async fn consume(amqp_url: &str, pool: PgPool, writes: Arc<Writes>) -> Result<()> {
    let (_conn, ch) = channel(amqp_url, false).await?;
    ch.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
    let mut deliveries = ch
        .basic_consume(
            QUEUE.into(),
            "flashgate-peer-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    while let Some(delivery) = deliveries.next().await {
        let delivery = delivery?;
        let inserted = async {
            let m: Message = serde_json::from_slice(&delivery.data)?;
            pg::insert_delivered(
                &pool,
                &Order {
                    product: &m.product_id,
                    buyer: &m.buyer_id,
                    order_id: &m.order_id,
                    quantity: m.quantity,
                },
                &writes,
            )
            .await
        }
        .await;
        match inserted {
            Ok(()) => {
                delivery.ack(BasicAckOptions::default()).await?;
            }
            Err(e) => {
                eprintln!("consumer: {e:#}; requeued");
                delivery
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    })
                    .await?;
            }
        }
    }
    bail!("the consumer's channel closed")
}

/// How the Redis lock behaves, and the fault it can be given.
#[derive(Clone, Copy, Debug)]
pub struct RedisLock {
    pub lease_ms: u64,
    pub wait_ms: u64,
    /// Renew the lease while the holder works, as Redisson's watchdog does.
    pub watchdog: bool,
    /// Every `stall_every`-th holder stalls `stall_ms` inside the critical
    /// section (0: never), as in a GC pause.
    pub stall_every: u64,
    pub stall_ms: u64,
}

const RENEW_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
";
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

pub struct Locked {
    pub redis: ConnectionManager,
    pub pool: PgPool,
    pub cfg: RedisLock,
    /// Contenders so far, for the tokens.
    holders: AtomicU64,
    /// Holders that took the lock so far, for the stall fault: counted
    /// once the lock is held, so that the N-th holder stalls whatever the
    /// contention (counting contenders made the stall land at random, and
    /// sometimes not at all).
    acquired: AtomicU64,
    renew: Script,
    release: Script,
}

impl Locked {
    pub fn new(redis: ConnectionManager, pool: PgPool, cfg: RedisLock) -> Locked {
        Locked {
            redis,
            pool,
            cfg,
            holders: AtomicU64::new(0),
            acquired: AtomicU64::new(0),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
        }
    }

    pub async fn reserve(&self, o: &Order<'_>, writes: &Arc<Writes>) -> Result<Outcome> {
        if let Some(done) = pg::before_lock(&self.pool, o).await? {
            return Ok(done);
        }
        let mut con = self.redis.clone();
        let key = lock_key(o.product);
        // The token names this holder; only it may renew or release.
        let token = format!(
            "{}-{}",
            o.order_id,
            self.holders.fetch_add(1, Ordering::Relaxed)
        );
        let deadline = Instant::now() + Duration::from_millis(self.cfg.wait_ms);
        let mut pause_ms = 1;
        loop {
            writes.cache(1);
            let got: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(self.cfg.lease_ms)
                .query_async(&mut con)
                .await?;
            if got.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                bail!("the lock was not free within {} ms", self.cfg.wait_ms);
            }
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            pause_ms = (pause_ms * 2).min(20);
        }
        let watchdog = self.cfg.watchdog.then(|| {
            let (mut con, key, token, renew, writes) = (
                con.clone(),
                key.clone(),
                token.clone(),
                self.renew.clone(),
                writes.clone(),
            );
            let lease_ms = self.cfg.lease_ms;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
                    writes.cache(1);
                    let renewed: Result<i64, _> = renew
                        .key(&key)
                        .arg(&token)
                        .arg(lease_ms)
                        .invoke_async(&mut con)
                        .await;
                    if !matches!(renewed, Ok(1)) {
                        return;
                    }
                }
            })
        });
        let n = self.acquired.fetch_add(1, Ordering::Relaxed) + 1;
        let stall_ms = if self.cfg.stall_every > 0 && n.is_multiple_of(self.cfg.stall_every) {
            self.cfg.stall_ms
        } else {
            0
        };
        let result = pg::read_decrement_write(&self.pool, o, writes, stall_ms).await;
        if let Some(w) = watchdog {
            w.abort();
        }
        writes.cache(1);
        let _: i64 = self
            .release
            .key(&key)
            .arg(&token)
            .invoke_async(&mut con)
            .await?;
        result
    }
}
