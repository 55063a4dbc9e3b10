//! What the origin's integration tests share: a database of each backend
//! and secrets made at random.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU32, Ordering};

use flashgate_origin::db::Db;
use sqlx::{Connection, Executor, PgConnection};

/// A secret as an operator makes one (`openssl rand -hex 32`): 32 bytes
/// from the OS's randomness (through the keys of std's `RandomState`), as
/// hex. Made afresh by each test process, so no usable secret is written in
/// the repository.
pub fn random_secret() -> String {
    (0u8..4)
        .map(|i| format!("{:016x}", RandomState::new().hash_one(i)))
        .collect()
}

pub fn pg_admin_url() -> String {
    std::env::var("FLASHGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into())
}

/// A database of one backend, dropped (for Postgres) when the test ends.
pub struct TestDb {
    pub db: Db,
    pg_name: Option<String>,
    _dir: Option<TempDir>,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Server errors are logged, not returned; show them in test output.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("warn")
        .try_init();
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        init_logs();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("flashgate-origin-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = Db::connect(None, &dir).await.expect("sqlite connects");
        TestDb {
            db,
            pg_name: None,
            _dir: Some(TempDir(dir)),
        }
    }

    pub async fn postgres() -> TestDb {
        init_logs();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("flashgate_test_{}_{n}", std::process::id());
        let admin = pg_admin_url();
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is required for these tests: {e}"));
        conn.execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
            .await
            .unwrap();
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        let url = match admin.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("bad FLASHGATE_TEST_PG {admin}"),
        };
        let db = Db::connect(Some(&url), std::path::Path::new("unused"))
            .await
            .expect("postgres connects");
        TestDb {
            db,
            pg_name: Some(name),
            _dir: None,
        }
    }

    pub async fn drop_db(self) {
        self.db.close().await;
        if let Some(name) = self.pg_name {
            let mut conn = PgConnection::connect(&pg_admin_url()).await.unwrap();
            conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await
                .unwrap();
        }
    }
}

/// Runs one test body on SQLite, then on PostgreSQL.
macro_rules! on_both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let t = TestDb::sqlite().await;
                ($body)(t.db.clone()).await;
                t.drop_db().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let t = TestDb::postgres().await;
                ($body)(t.db.clone()).await;
                t.drop_db().await;
            }
        }
    };
}
