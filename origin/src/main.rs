//! The origin service's command line: `serve` (the default) and `reconcile`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use flashgate_origin::app::{self, AppState, Settings};
use flashgate_origin::db::Db;
use flashgate_origin::reconcile;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "flashgate-origin",
    version,
    about = "The flashgate origin DB service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct DbArgs {
    /// postgres://… for PostgreSQL; unset for SQLite under --data-dir.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Where the embedded SQLite database lives.
    #[arg(long, env = "FLASHGATE_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the ingest and read API.
    Serve {
        #[arg(
            long,
            env = "FLASHGATE_ORIGIN_LISTEN",
            default_value = "127.0.0.1:8788"
        )]
        listen: SocketAddr,
        #[command(flatten)]
        db: DbArgs,
        /// The secret the gate signs batches with.
        #[arg(long, env = "ORIGIN_HMAC_SECRET", hide_env_values = true)]
        hmac_secret: String,
        /// A batch that takes longer is rolled back and answered with 503.
        #[arg(long, env = "FLASHGATE_BATCH_TIMEOUT_MS", default_value_t = 10_000)]
        batch_timeout_ms: u64,
    },
    /// Compare each product's gate stats with the origin's orders; exit 2 on drift.
    Reconcile {
        #[command(flatten)]
        db: DbArgs,
        /// The gate's base URL.
        #[arg(long, env = "FLASHGATE_GATE_URL")]
        gate_url: String,
        /// The gate's admin token.
        #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
        admin_token: String,
        /// Products to check; all the origin knows if none.
        #[arg(long = "product")]
        products: Vec<String>,
    },
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!("shutting down");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
    match Cli::parse().command {
        Command::Serve {
            listen,
            db,
            hmac_secret,
            batch_timeout_ms,
        } => {
            anyhow::ensure!(
                !hmac_secret.is_empty(),
                "ORIGIN_HMAC_SECRET must not be empty"
            );
            let database = Db::connect(db.database_url.as_deref(), &db.data_dir).await?;
            tracing::info!(backend = ?database.backend(), %listen, "flashgate origin starting");
            let state = AppState::new(
                database.clone(),
                Settings {
                    hmac_secret: hmac_secret.into_bytes(),
                    batch_timeout: Duration::from_millis(batch_timeout_ms),
                },
            );
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            axum::serve(listener, app::router(state))
                .with_graceful_shutdown(shutdown_signal())
                .await?;
            database.close().await;
            Ok(())
        }
        Command::Reconcile {
            db,
            gate_url,
            admin_token,
            products,
        } => {
            let database = Db::connect(db.database_url.as_deref(), &db.data_dir).await?;
            let report =
                reconcile::reconcile(&database, &gate_url, &admin_token, &products).await?;
            let drift = report.iter().any(|p| !p.ok);
            for p in &report {
                println!("{}", serde_json::to_string(p)?);
            }
            println!(
                "{}",
                serde_json::json!({ "products": report.len(), "drift": drift })
            );
            database.close().await;
            if drift {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}
