//! The origin service's command line: `serve` and `reconcile`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use flashgate_origin::app::{self, AppState, Settings};
use flashgate_origin::db::Db;
use flashgate_origin::demo::DemoSettings;
use flashgate_origin::{reconcile, server};
use flashgate_wire::keys::KeySet;
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
    /// postgres://… for PostgreSQL (sslmode and sslrootcert are honoured);
    /// unset for SQLite under --data-dir.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Where the embedded SQLite database lives.
    #[arg(long, env = "FLASHGATE_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
}

/// Key sets are `kid:secret,kid@activate_ms:secret,...`; each secret at
/// least 32 bytes. A set that breaks that rule stops the start.
#[derive(Args)]
struct Keys {
    /// The gate's batches are signed with one of these.
    #[arg(long, env = "FORWARD_KEYS", hide_env_values = true)]
    forward_keys: String,
    /// Bearer tokens (as a key set) that may read orders, products, metrics.
    #[arg(long, env = "ORIGIN_READ_TOKENS", hide_env_values = true)]
    read_tokens: String,
    /// Bearer tokens (as a key set) that may mint buyer tokens.
    #[arg(long, env = "ORIGIN_SHOP_TOKENS", hide_env_values = true)]
    shop_tokens: String,
    /// Buyer tokens are minted (and checked, for demo payments) with these.
    #[arg(long, env = "BUYER_TOKEN_KEYS", hide_env_values = true)]
    buyer_token_keys: String,
    /// The audience of buyer tokens; the gate checks it.
    #[arg(long, env = "BUYER_TOKEN_AUDIENCE", default_value = "flashgate")]
    buyer_token_audience: String,
}

#[derive(Args)]
struct Demo {
    /// Serve POST /v1/demo/payments, which confirms at the gate as the
    /// shop's payment backend would. For local runs only.
    #[arg(long, env = "FLASHGATE_DEMO_PAYMENTS")]
    demo_payments: bool,
    /// The payment keys demo payments sign confirmations with.
    #[arg(long, env = "PAYMENT_KEYS", hide_env_values = true)]
    payment_keys: Option<String>,
    /// The gate demo payments confirm at.
    #[arg(long, env = "FLASHGATE_GATE_URL")]
    gate_url: Option<String>,
    /// The buyer page's origin, allowed to call the demo endpoint (CORS).
    #[arg(long, env = "FLASHGATE_DEMO_ALLOW_ORIGIN")]
    demo_allow_origin: Option<String>,
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
        #[command(flatten)]
        keys: Keys,
        #[command(flatten)]
        demo: Demo,
        /// A batch that takes longer is rolled back and answered with 503.
        #[arg(long, env = "FLASHGATE_BATCH_TIMEOUT_MS", default_value_t = 10_000)]
        batch_timeout_ms: u64,
    },
    /// Compare each product's gate stats with the origin's orders; exit 2 on
    /// drift, 1 if the gate cannot be read.
    Reconcile {
        #[command(flatten)]
        db: DbArgs,
        /// The gate's base URL: https, or http on loopback only.
        #[arg(long, env = "FLASHGATE_GATE_URL")]
        gate_url: String,
        /// A PEM file of a CA to trust for the gate, beside the public roots.
        #[arg(long)]
        gate_ca: Option<PathBuf>,
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

fn key_set(name: &str, text: &str) -> anyhow::Result<KeySet> {
    KeySet::parse(text).with_context(|| format!("{name} is refused"))
}

fn settings(keys: Keys, demo: Demo, batch_timeout_ms: u64) -> anyhow::Result<Settings> {
    let demo = if demo.demo_payments {
        let payment_keys = demo
            .payment_keys
            .context("--demo-payments needs PAYMENT_KEYS")?;
        Some(DemoSettings {
            payment_keys: key_set("PAYMENT_KEYS", &payment_keys)?,
            gate_url: demo
                .gate_url
                .context("--demo-payments needs FLASHGATE_GATE_URL")?,
            allow_origin: demo.demo_allow_origin,
            client: reqwest::Client::builder()
                .build()
                .context("building the HTTP client")?,
        })
    } else {
        None
    };
    Ok(Settings {
        forward_keys: key_set("FORWARD_KEYS", &keys.forward_keys)?,
        read_tokens: key_set("ORIGIN_READ_TOKENS", &keys.read_tokens)?,
        shop_tokens: key_set("ORIGIN_SHOP_TOKENS", &keys.shop_tokens)?,
        buyer_keys: key_set("BUYER_TOKEN_KEYS", &keys.buyer_token_keys)?,
        buyer_audience: keys.buyer_token_audience,
        demo,
        batch_timeout: Duration::from_millis(batch_timeout_ms),
    })
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
            keys,
            demo,
            batch_timeout_ms,
        } => {
            // Keys are checked before anything opens: a short secret stops
            // the start.
            let settings = settings(keys, demo, batch_timeout_ms)?;
            let database = Db::connect(db.database_url.as_deref(), &db.data_dir).await?;
            tracing::info!(
                backend = ?database.backend(),
                %listen,
                demo_payments = settings.demo.is_some(),
                "flashgate origin starting"
            );
            let state = AppState::new(database.clone(), settings)?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            server::serve(listener, app::router(state), shutdown_signal()).await?;
            database.close().await;
            Ok(())
        }
        Command::Reconcile {
            db,
            gate_url,
            gate_ca,
            admin_token,
            products,
        } => {
            let database = Db::connect(db.database_url.as_deref(), &db.data_dir).await?;
            let client = reconcile::client(&gate_url, gate_ca.as_deref())?;
            let report =
                reconcile::reconcile(&database, &client, &gate_url, &admin_token, &products)
                    .await?;
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
