//! The origin service's command line: `serve` and `reconcile`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use flashgate_origin::db::Db;
use flashgate_origin::server::ServeLimits;
use flashgate_origin::state::{key_set, AppState, DemoSettings, Settings};
use flashgate_origin::{app, limits, reconcile, server};
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
/// least 32 bytes, random (`openssl rand -hex 32`), and none of the
/// examples published with flashgate. A set that breaks a rule stops the
/// start.
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
        /// A request body must arrive whole within this of its head, or it
        /// is answered 408 `body_timeout`. At most the request deadline.
        #[arg(long, env = "FLASHGATE_BODY_DEADLINE_MS",
              default_value_t = limits::BODY_READ_TIMEOUT.as_millis() as u64)]
        body_deadline_ms: u64,
        /// Connections open at once; past it a new one is closed at once.
        #[arg(long, env = "FLASHGATE_CONNECTIONS_MAX", default_value_t = limits::CONNECTIONS_MAX)]
        connections_max: usize,
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
        /// Print one JSON line per product, then one with the totals,
        /// instead of the summary for a person.
        #[arg(long)]
        json: bool,
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

fn settings(
    keys: Keys,
    demo: Demo,
    batch_timeout_ms: u64,
    body_deadline_ms: u64,
) -> anyhow::Result<Settings> {
    let request_ms = limits::REQUEST_TIMEOUT.as_millis() as u64;
    if !(1..=request_ms).contains(&body_deadline_ms) {
        anyhow::bail!("--body-deadline-ms must be 1 to {request_ms} (the request deadline)");
    }
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
        body_deadline: Duration::from_millis(body_deadline_ms),
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
            body_deadline_ms,
            connections_max,
        } => {
            // Keys are checked before anything opens: a short, published
            // or plainly not random secret stops the start.
            let settings = settings(keys, demo, batch_timeout_ms, body_deadline_ms)?;
            if connections_max == 0 {
                anyhow::bail!("--connections-max must be at least 1");
            }
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
            server::serve(
                listener,
                app::router(state),
                ServeLimits { connections_max },
                shutdown_signal(),
            )
            .await?;
            database.close().await;
            Ok(())
        }
        Command::Reconcile {
            db,
            gate_url,
            gate_ca,
            admin_token,
            products,
            json,
        } => {
            let database = Db::connect(db.database_url.as_deref(), &db.data_dir).await?;
            let client = reconcile::client(&gate_url, gate_ca.as_deref())?;
            let report =
                reconcile::reconcile(&database, &client, &gate_url, &admin_token, &products)
                    .await?;
            let drift = report.iter().any(|p| !p.ok);
            if json {
                for p in &report {
                    println!("{}", serde_json::to_string(p)?);
                }
                println!(
                    "{}",
                    serde_json::json!({ "products": report.len(), "drift": drift })
                );
            } else {
                print!("{}", reconcile::summary(&report));
            }
            database.close().await;
            if drift {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}
