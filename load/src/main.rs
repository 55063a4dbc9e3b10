//! The command line of flashgate-load. Exits 1 on any violation of the
//! verdict, 2 when the run could not be made whole (an error, Ctrl-C,
//! SIGTERM, `--deadline-s`, the settle timeout); it prints its report in
//! every case, marked INCOMPLETE when the run stopped early.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flashgate_load::plan::{Arrival, Shares, System};
use flashgate_load::run::{self, Config, Progress, Stop};
use flashgate_wire::keys::KeySet;

/// Simulates a flash sale against a flashgate gate (local workerd, wrangler
/// dev, or deployed) or a peer of bench/peers, prints throughput, latency,
/// outcomes, fairness and a verdict.
#[derive(Parser, Debug)]
#[command(name = "flashgate-load", version)]
struct Args {
    /// The gate's (or peer's) base URL.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    #[arg(long, value_enum, default_value = "flashgate")]
    system: System,
    /// The product; by default a new one, `load-SEED-TIME`, which the run
    /// closes at its end (the gate cannot delete a product).
    #[arg(long)]
    product: Option<String>,
    #[arg(long, default_value_t = 1000)]
    buyers: u64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 256)]
    connections: usize,
    /// burst, ramp:MS or steady:PER_S.
    #[arg(long, default_value = "burst", value_parser = Arrival::parse)]
    arrival: Arrival,
    /// What buyers with a hold do, in percent: PAY,CANCEL,ABANDON.
    #[arg(long, default_value = "80,10,10", value_parser = Shares::parse)]
    shares: Shares,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Units each buyer asks for (also the per-buyer limit set up).
    #[arg(long, default_value_t = 1)]
    quantity: u32,
    /// Set the product up with this stock before the run (admin token
    /// needed). Without it the product must exist.
    #[arg(long)]
    stock: Option<u64>,
    #[arg(long, default_value_t = 60_000)]
    hold_ttl_ms: u64,
    /// Set up a waiting room admitting this many a second (0: none).
    #[arg(long, default_value_t = 0)]
    admit_per_s: u64,
    /// Set the waiting room up to ask a proof of work of this level (1 to
    /// 4; 0: none) at the join; the buyers solve each challenge natively,
    /// as a script would (needs --admit-per-s).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    pow_level: u8,
    /// Set the product up over this many stock shards (1 to 64), so that
    /// its sale runs past one object's rate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    shards: u16,
    #[arg(long, env = "FLASHGATE_ADMIN_TOKEN")]
    admin_token: String,
    /// Mint buyer tokens with this key set (`kid:secret`), as the shop's
    /// login would; without it each buyer asks `POST /api/session`.
    #[arg(long, env = "FLASHGATE_BUYER_TOKEN_KEYS")]
    buyer_keys: Option<String>,
    #[arg(long, default_value = "flashgate")]
    audience: String,
    /// Sign payment confirmations with this key set; without it nobody pays.
    #[arg(long, env = "FLASHGATE_PAYMENT_KEYS")]
    payment_keys: Option<String>,
    /// The origin, to check its orders and the drift.
    #[arg(long)]
    origin: Option<String>,
    #[arg(long, env = "FLASHGATE_ORIGIN_READ_TOKEN")]
    origin_read_token: Option<String>,
    /// How long a buyer waits in the waiting room before giving up.
    #[arg(long, default_value_t = 120_000)]
    patience_ms: u64,
    /// How long to wait for the outbox (or a peer's queue) to drain.
    #[arg(long, default_value_t = 60_000)]
    settle_timeout_ms: u64,
    /// Stop after this many seconds, and report what was measured (marked
    /// INCOMPLETE).
    #[arg(long)]
    deadline_s: Option<u64>,
    /// How progress is shown on stderr: a bar on a terminal, else a line
    /// every few seconds (auto), or as asked.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressArg,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Audit the waiting room from outside: the lottery's commitment
    /// against its key, each ticket's tiebreak, and the admission record
    /// against what the buyers saw (exits 1 on a violation).
    #[arg(long)]
    audit: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ProgressArg {
    Auto,
    Bar,
    Lines,
    None,
}

/// Ctrl-C and SIGTERM stop the run, which then reports; a second Ctrl-C
/// quits at once.
fn on_signals(stop: Arc<Stop>) {
    let first = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        first.stop("interrupted (SIGINT)");
        eprintln!("flashgate-load: stopping; the report follows (Ctrl-C again quits at once)");
        let _ = tokio::signal::ctrl_c().await;
        std::process::exit(130);
    });
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            term.recv().await;
            stop.stop("terminated (SIGTERM)");
        }
    });
}

fn keys(text: Option<String>, what: &str) -> Result<Option<KeySet>, String> {
    text.map(|t| KeySet::parse(&t).map_err(|e| format!("--{what}: {e:?}")))
        .transpose()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let config = (|| -> Result<Config, String> {
        Ok(Config {
            base: args.url.trim_end_matches('/').to_owned(),
            system: args.system,
            // A fresh product per run: a product's orders from an earlier
            // run would be orders this run never confirmed.
            product: args.product.clone().unwrap_or_else(|| {
                let s = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                format!("load-{}-{s}", args.seed)
            }),
            buyers: args.buyers,
            connections: args.connections.max(1),
            arrival: args.arrival,
            shares: args.shares,
            seed: args.seed,
            quantity: args.quantity,
            stock: args.stock,
            hold_ttl_ms: args.hold_ttl_ms,
            admit_per_s: args.admit_per_s,
            pow_level: args.pow_level,
            shards: args.shards,
            admin_token: args.admin_token.clone(),
            buyer_keys: keys(args.buyer_keys.clone(), "buyer-keys")?,
            audience: args.audience.clone(),
            payment_keys: keys(args.payment_keys.clone(), "payment-keys")?,
            origin: args
                .origin
                .as_deref()
                .map(|o| o.trim_end_matches('/').to_owned()),
            origin_read_token: args.origin_read_token.clone(),
            patience_ms: args.patience_ms,
            settle_timeout_ms: args.settle_timeout_ms,
            audit: args.audit,
            progress: match args.progress {
                ProgressArg::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
                    Progress::Bar
                }
                ProgressArg::Auto | ProgressArg::Lines => Progress::Lines,
                ProgressArg::Bar => Progress::Bar,
                ProgressArg::None => Progress::None,
            },
        })
    })();
    let config = match config {
        Ok(c) => c,
        Err(why) => {
            eprintln!("flashgate-load: {why}");
            std::process::exit(2);
        }
    };
    if config.system == System::Flashgate && config.payment_keys.is_none() && config.shares.pay > 0
    {
        eprintln!(
            "flashgate-load: NOTE: {}; pass --payment-keys (the gate's PAYMENT_KEYS) for the shares asked for",
            run::no_payment_keys(config.shares)
        );
    }
    eprintln!(
        "flashgate-load: {} buyers against {} (product {})",
        config.buyers, config.base, config.product
    );
    let stop = Arc::new(Stop::default());
    on_signals(stop.clone());
    if let Some(s) = args.deadline_s {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(s)).await;
            stop.stop(format!("the run reached --deadline-s {s}"));
        });
    }
    let report = run::run(config, stop).await;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serialises")
        );
    } else {
        print!("{}", report.table());
    }
    if let Some(why) = &report.incomplete {
        eprintln!("flashgate-load: the run stopped before its end: {why}");
    }
    std::process::exit(report.status.exit_code());
}
