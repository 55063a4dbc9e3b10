//! (e) A ZooKeeper lock: the ephemeral sequential recipe of Curator's
//! `InterProcessMutex` (each contender creates
//! `{dir}/_c_{uuid}-lock-{sequence}` and waits for the node before its own
//! to go), as zookeeper-client implements it, Curator-compatible. Under it,
//! read-decrement-write in PostgreSQL. A holder whose session dies loses
//! its node, and with it the lock.

use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::PgPool;
use zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix};

use crate::pg::{self, Order};
use crate::recipe::{Outcome, Writes};

pub struct ZkLocked {
    pub client: Client,
    pub pool: PgPool,
    pub wait_ms: u64,
}

pub async fn connect(hosts: &str) -> Result<Client> {
    Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(hosts)
        .await
        .with_context(|| format!("ZooKeeper at {hosts}"))
}

impl ZkLocked {
    pub async fn reserve(&self, o: &Order<'_>, writes: &Writes) -> Result<Outcome> {
        if let Some(done) = pg::before_lock(&self.pool, o).await? {
            return Ok(done);
        }
        let dir = format!("/flashgate-peers/locks/{}", o.product);
        let prefix = LockPrefix::new_curator(&dir, "lock-")?;
        let options = LockOptions::new(Acls::anyone_all())
            .with_ancestor_options(CreateMode::Persistent.with_acls(Acls::anyone_all()))?;
        // Creating the sequential node, and deleting it on release.
        writes.cache(2);
        let lock = tokio::time::timeout(
            Duration::from_millis(self.wait_ms),
            self.client.lock(prefix, b"", options),
        )
        .await
        .with_context(|| format!("the lock was not free within {} ms", self.wait_ms))??;
        let result = pg::read_decrement_write(&self.pool, o, writes, 0).await;
        // Dropping the lock deletes its node in the background; the next
        // contender is woken by that deletion.
        drop(lock);
        result
    }
}
