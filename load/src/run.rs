//! The run: every buyer's flow against the target, then the reads that the
//! verdict is judged by. The decisions a buyer makes from an answer are
//! small and explicit here; the figures are computed in `measure` and the
//! verdict in `verdict`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use flashgate_wire::bounds;
use flashgate_wire::codes::ProblemCode;
use flashgate_wire::keys::KeySet;
use flashgate_wire::peer::{PeerOrders, PeerSetup, PeerStats};
use flashgate_wire::signing::{self, Purpose};
use flashgate_wire::stats::{GateStats, OriginTotals};
use flashgate_wire::token::{self, Claims};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Client, RequestBuilder};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::client::{self, send, Answer};
use crate::measure::{kendall_tau, Latency};
use crate::plan::{self, Arrival, Buyer, Fate, Shares, System};
use crate::report::{Endpoint, EscrowFigures, Report};
use crate::verdict::{self, Held, Observed, StoredOrder};

/// Attempts of one idempotent request on network errors, 503s and 429s.
pub const ATTEMPTS_MAX: u32 = 6;
/// Backoff after a network error: this, doubled at each attempt.
pub const BACKOFF_MS: u64 = 100;
/// The longest a 429's `Retry-After` is honoured before the next attempt.
pub const RETRY_AFTER_MS_MAX: u64 = 5_000;
/// The waiting room's poll interval bounds.
pub const POLL_MS_MIN: u64 = 200;
pub const POLL_MS_MAX: u64 = 2_000;
/// How often the drain and the settling are polled.
const SETTLE_POLL_MS: u64 = 100;
/// How long after the settle a product of several stock shards is read
/// again: a few of its shards' report intervals
/// (`flashgate_core::escrow::limits::REPORT_INTERVAL_MS`, 250 ms).
const ESCROW_REPORTS_WAIT_MS: u64 = 1_000;
/// The origin's page size for `GET /v1/orders`.
const ORDERS_PAGE: usize = 1000;

pub struct Config {
    pub base: String,
    pub system: System,
    pub product: String,
    pub buyers: u64,
    pub connections: usize,
    pub arrival: Arrival,
    pub shares: Shares,
    pub seed: u64,
    pub quantity: u32,
    /// Set the product up with this stock first.
    pub stock: Option<u64>,
    pub hold_ttl_ms: u64,
    pub admit_per_s: u64,
    /// Set the product up over this many stock shards (flashgate only).
    pub shards: u16,
    pub admin_token: String,
    /// Mint buyer tokens with these keys; else ask `POST /api/session`.
    pub buyer_keys: Option<KeySet>,
    pub audience: String,
    /// Sign payment confirmations with these; without them nobody pays.
    pub payment_keys: Option<KeySet>,
    pub origin: Option<String>,
    pub origin_read_token: Option<String>,
    pub patience_ms: u64,
    pub settle_timeout_ms: u64,
    pub progress: bool,
}

/// One request, as the report counts it.
struct Sample {
    endpoint: Endpoint,
    ms: f64,
    label: String,
}

/// What one buyer ended with.
#[derive(Default)]
struct BuyerEnd {
    samples: Vec<Sample>,
    /// `reserved`, or the reserve's refusal.
    outcome: String,
    fate: Option<String>,
    reservation: Option<Held>,
    /// Arrival and service order, for fairness.
    ranks: Option<(u64, u64)>,
    confirmed: Option<String>,
    confirm_unanswered: Option<String>,
    /// The reservation, if the system later said it did not know it.
    forgotten: Option<String>,
}

struct Ctx {
    cfg: Config,
    http: Client,
    slots: Semaphore,
    start: Instant,
    arrivals: AtomicU64,
    services: AtomicU64,
    /// Milliseconds after the start of the first sold-out answer, plus one
    /// (0 for none yet).
    sold_out_at: AtomicU64,
    last_confirm_at: AtomicU64,
    bar: ProgressBar,
    admission: bool,
    /// The product's hold time to live, as it said before the run.
    hold_ttl_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Ctx {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.base)
    }

    fn product_path(&self) -> String {
        format!("/api/products/{}", self.cfg.product)
    }

    /// One request in a connection slot, recorded.
    async fn once(&self, end: &mut BuyerEnd, endpoint: Endpoint, req: RequestBuilder) -> Answer {
        let answer = {
            let _slot = self
                .slots
                .acquire()
                .await
                .expect("the semaphore is never closed");
            send(req).await
        };
        end.samples.push(Sample {
            endpoint,
            ms: answer.ms,
            label: answer.label(),
        });
        answer
    }

    /// A request that is safe to repeat (an idempotency key, a replayable
    /// signature, or a read), retried on network errors, 503 and 429 as a
    /// careful client would: with backoff, honouring `Retry-After`.
    async fn again(
        &self,
        end: &mut BuyerEnd,
        endpoint: Endpoint,
        make: impl Fn() -> RequestBuilder,
    ) -> Answer {
        let mut attempt = 1;
        loop {
            let answer = self.once(end, endpoint, make()).await;
            let wait_ms = match answer.status {
                // Exponential: a restarting server gets 100 + 200 + ... + 1,600 ms.
                None => BACKOFF_MS << (attempt - 1),
                Some(429) | Some(503) => answer
                    .retry_after_s
                    .map_or(1_000, |s| s * 1_000)
                    .min(RETRY_AFTER_MS_MAX),
                _ => return answer,
            };
            if attempt >= ATTEMPTS_MAX {
                return answer;
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// The buyer's token and id.
async fn session(ctx: &Ctx, end: &mut BuyerEnd, b: &Buyer) -> Option<(String, String)> {
    if let Some(keys) = &ctx.cfg.buyer_keys {
        let now = now_ms();
        let claims = Claims {
            sub: b.id.clone(),
            aud: ctx.cfg.audience.clone(),
            iat: now / 1000,
            exp: now / 1000 + 3600,
            nbf: None,
        };
        return Some((b.id.clone(), token::mint(keys, &claims, now)));
    }
    let a = ctx
        .again(end, Endpoint::Session, || {
            ctx.http.post(ctx.url("/api/session"))
        })
        .await;
    Some((a.str("buyer_id")?.to_owned(), a.str("token")?.to_owned()))
}

/// Waits in the waiting room until admitted; the ticket, or why not.
async fn admitted(
    ctx: &Ctx,
    end: &mut BuyerEnd,
    token: &str,
    give_up_at: Instant,
) -> Result<String, String> {
    let queue = ctx.url(&format!("{}/queue", ctx.product_path()));
    let joined = ctx
        .again(end, Endpoint::Join, || {
            ctx.http.post(&queue).bearer_auth(token)
        })
        .await;
    if !joined.ok() {
        return Err(joined.label());
    }
    let ticket = joined
        .str("ticket")
        .ok_or("join_without_ticket")?
        .to_owned();
    let mut standing = joined;
    loop {
        if standing.body.get("admitted").and_then(|v| v.as_bool()) == Some(true) {
            return Ok(ticket);
        }
        if Instant::now() >= give_up_at {
            return Err("gave_up".into());
        }
        let eta_ms = standing
            .body
            .get("eta_s")
            .and_then(|v| v.as_u64())
            .map_or(POLL_MS_MAX, |s| s * 1000 / 2);
        tokio::time::sleep(Duration::from_millis(
            eta_ms.clamp(POLL_MS_MIN, POLL_MS_MAX),
        ))
        .await;
        standing = ctx
            .again(end, Endpoint::Standing, || {
                ctx.http
                    .get(&queue)
                    .bearer_auth(token)
                    .header("flashgate-ticket", &ticket)
            })
            .await;
        if !standing.ok() {
            return Err(standing.label());
        }
    }
}

async fn buyer(ctx: Arc<Ctx>, b: Buyer) -> BuyerEnd {
    let mut end = BuyerEnd::default();
    tokio::time::sleep_until((ctx.start + Duration::from_millis(b.arrive_ms)).into()).await;
    let give_up_at = Instant::now() + Duration::from_millis(ctx.cfg.patience_ms);
    let arrival = ctx.arrivals.fetch_add(1, Ordering::Relaxed);
    if ctx.cfg.system == System::Ceiling {
        let a = ctx
            .once(&mut end, Endpoint::Reserve, ctx.http.post(&ctx.cfg.base))
            .await;
        end.outcome = if a.ok() { "answered".into() } else { a.label() };
        ctx.bar.inc(1);
        return end;
    }
    let Some((buyer_id, token)) = session(&ctx, &mut end, &b).await else {
        end.outcome = "no_session".into();
        return end;
    };
    let reservations = ctx.url(&format!("{}/reservations", ctx.product_path()));
    let body = json!({ "quantity": ctx.cfg.quantity }).to_string();
    let key = format!("\"{}\"", b.key);
    let mut ticket: Option<String> = None;
    // Before the first attempt leaves: the decision came after it.
    let mut first_sent_ms: Option<u64> = None;
    let reserved = loop {
        if ctx.admission && ticket.is_none() {
            match admitted(&ctx, &mut end, &token, give_up_at).await {
                Ok(t) => ticket = Some(t),
                Err(why) => {
                    end.outcome = why;
                    return end;
                }
            }
        }
        first_sent_ms.get_or_insert(ctx.elapsed_ms());
        let answer = ctx
            .again(&mut end, Endpoint::Reserve, || {
                let mut r = ctx
                    .http
                    .post(&reservations)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .header("idempotency-key", &key)
                    .body(body.clone());
                if let Some(t) = &ticket {
                    r = r.header("flashgate-ticket", t);
                }
                r
            })
            .await;
        if answer.code.as_deref() == Some(ProblemCode::NotAdmitted.as_str())
            && Instant::now() < give_up_at
        {
            // The edge's snapshot admitted the ticket before the object's
            // clock did: stand in line again, with the same key.
            tokio::time::sleep(Duration::from_millis(POLL_MS_MIN)).await;
            continue;
        }
        break answer;
    };
    end.outcome = if reserved.ok() {
        "reserved".into()
    } else {
        reserved.label()
    };
    if reserved.code.as_deref() == Some(ProblemCode::SoldOut.as_str()) {
        let _ = ctx.sold_out_at.compare_exchange(
            0,
            ctx.elapsed_ms() + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    ctx.bar.inc(1);
    if !reserved.ok() {
        return end;
    }
    let Some(rid) = reserved.str("reservation_id").map(str::to_owned) else {
        end.outcome = "reserved_without_id".into();
        return end;
    };
    let quantity = reserved
        .body
        .get("quantity")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let answered_ms = ctx.elapsed_ms();
    let expires_ms = first_sent_ms.unwrap_or(answered_ms) + ctx.hold_ttl_ms;
    end.reservation = Some(Held {
        id: rid.clone(),
        quantity,
        from_ms: answered_ms,
        until_ms: Some(expires_ms),
    });
    end.ranks = Some((arrival, ctx.services.fetch_add(1, Ordering::Relaxed)));
    if ctx.cfg.system == System::Peer {
        // A peer makes the order at the reserve, for good.
        if let Some(h) = end.reservation.as_mut() {
            h.until_ms = None;
        }
        end.confirmed = Some(rid);
        return end;
    }
    let fate = match (b.fate, &ctx.cfg.payment_keys) {
        (Fate::Pay, None) => Fate::Abandon,
        (fate, _) => fate,
    };
    let rpath = format!("{}/reservations/{rid}", ctx.product_path());
    let done = match fate {
        Fate::Abandon => None,
        Fate::Cancel => {
            let url = ctx.url(&format!("{rpath}/cancel"));
            let sent_ms = ctx.elapsed_ms();
            let a = ctx
                .again(&mut end, Endpoint::Cancel, || {
                    ctx.http.post(&url).bearer_auth(&token)
                })
                .await;
            if a.ok() {
                if let Some(h) = end.reservation.as_mut() {
                    h.until_ms = h.until_ms.map(|u| u.min(sent_ms));
                }
            }
            Some(a)
        }
        Fate::Pay => {
            let keys = ctx.cfg.payment_keys.as_ref().expect("checked above");
            let path = format!("{rpath}/confirm");
            let body = json!({ "buyer_id": buyer_id, "payment_ref": format!("load-{}", b.key) })
                .to_string();
            let signed = signing::sign(
                keys,
                &signing::Request {
                    purpose: Purpose::Payment,
                    method: "POST",
                    path: &path,
                    body: body.as_bytes(),
                },
                now_ms(),
            );
            let url = ctx.url(&path);
            let a = ctx
                .again(&mut end, Endpoint::Confirm, || {
                    let mut r = ctx
                        .http
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.clone());
                    for (name, value) in signed.headers() {
                        r = r.header(name, value);
                    }
                    r
                })
                .await;
            ctx.last_confirm_at
                .fetch_max(ctx.elapsed_ms(), Ordering::Relaxed);
            match a.status {
                Some(200..=299) => {
                    end.confirmed = Some(rid.clone());
                    if let Some(h) = end.reservation.as_mut() {
                        h.until_ms = None;
                    }
                }
                // Unanswered, it may or may not have been confirmed: the
                // hold is certain only until it would have expired.
                None | Some(500..) => end.confirm_unanswered = Some(rid.clone()),
                _ => {}
            }
            Some(a)
        }
    };
    if done.as_ref().and_then(|a| a.code.as_deref())
        == Some(ProblemCode::UnknownReservation.as_str())
    {
        end.forgotten = Some(rid.clone());
    }
    end.fate = Some(match done {
        None => fate.as_str().to_owned(),
        Some(a) if a.ok() => fate.as_str().to_owned(),
        Some(a) => format!("{}:{}", fate.as_str(), a.label()),
    });
    end
}

async fn read_json<T: for<'de> Deserialize<'de>>(req: RequestBuilder, what: &str) -> Result<T> {
    let r = req
        .send()
        .await
        .with_context(|| format!("{what}: no answer"))?;
    let status = r.status();
    let text = r.text().await.with_context(|| format!("{what}: body"))?;
    if !status.is_success() {
        bail!("{what}: {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("{what}: unexpected body {text}"))
}

/// Either system's stats.
enum Stats {
    Gate(Box<GateStats>),
    Peer(PeerStats),
}

async fn stats(ctx: &Ctx) -> Result<Option<Stats>> {
    let req = ctx
        .http
        .get(ctx.url(&format!("/admin/products/{}/stats", ctx.cfg.product)))
        .bearer_auth(&ctx.cfg.admin_token);
    Ok(match ctx.cfg.system {
        System::Flashgate => Some(Stats::Gate(Box::new(read_json(req, "stats").await?))),
        System::Peer => Some(Stats::Peer(read_json(req, "stats").await?)),
        System::Ceiling => None,
    })
}

async fn setup(ctx: &Ctx, stock: u64) -> Result<()> {
    let url = ctx.url(&format!("/admin/products/{}", ctx.cfg.product));
    let body = match ctx.cfg.system {
        System::Flashgate => json!({
            "stock_total": stock,
            "per_buyer_max": ctx.cfg.quantity,
            "quantity_max": ctx.cfg.quantity,
            "hold_ttl_ms": ctx.cfg.hold_ttl_ms,
            "admit_per_s": ctx.cfg.admit_per_s,
            "shards": ctx.cfg.shards,
            "mode": "active",
        }),
        System::Peer => serde_json::to_value(PeerSetup {
            stock_total: stock,
            per_buyer_max: ctx.cfg.quantity,
        })?,
        System::Ceiling => return Ok(()),
    };
    let r = ctx
        .http
        .put(url)
        .bearer_auth(&ctx.cfg.admin_token)
        .json(&body)
        .send()
        .await
        .context("setup: no answer")?;
    let status = r.status();
    if !status.is_success() {
        bail!("setup: {status}: {}", r.text().await.unwrap_or_default());
    }
    Ok(())
}

/// Every order of the product at the origin.
async fn origin_orders(ctx: &Ctx, origin: &str, token: &str) -> Result<Vec<StoredOrder>> {
    #[derive(Deserialize)]
    struct Page {
        orders: Vec<Row>,
        next_after: Option<i64>,
    }
    #[derive(Deserialize)]
    struct Row {
        reservation_id: String,
        quantity: u64,
        status: String,
    }
    let mut out = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let mut url = format!(
            "{origin}/v1/orders?product_id={}&limit={ORDERS_PAGE}",
            ctx.cfg.product
        );
        if let Some(a) = after {
            url.push_str(&format!("&after={a}"));
        }
        let page: Page = read_json(ctx.http.get(url).bearer_auth(token), "origin orders").await?;
        out.extend(page.orders.into_iter().map(|r| {
            StoredOrder {
                // The origin keys an order by `{product}:{reservation}`.
                reservation_id: bounds::parse_order_id(&r.reservation_id)
                    .map_or(r.reservation_id.clone(), |(_, rid)| rid.to_owned()),
                quantity: r.quantity,
                counts: r.status == "accepted",
            }
        }));
        match page.next_after {
            Some(a) => after = Some(a),
            None => return Ok(out),
        }
    }
}

pub async fn run(cfg: Config) -> Result<Report> {
    let http = client::client(cfg.connections)?;
    let crowd = plan::crowd(
        cfg.seed,
        cfg.buyers,
        cfg.arrival,
        cfg.shares,
        &format!("s{}", cfg.seed),
    );
    let bar = if cfg.progress {
        ProgressBar::new(cfg.buyers)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} buyers answered ({per_sec})",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut ctx = Ctx {
        slots: Semaphore::new(cfg.connections),
        cfg,
        http,
        start: Instant::now(),
        arrivals: AtomicU64::new(0),
        services: AtomicU64::new(0),
        sold_out_at: AtomicU64::new(0),
        last_confirm_at: AtomicU64::new(0),
        bar,
        admission: false,
        hold_ttl_ms: 0,
    };
    if let Some(stock) = ctx.cfg.stock {
        setup(&ctx, stock).await?;
    }
    if ctx.cfg.system == System::Flashgate {
        let product: serde_json::Value =
            read_json(ctx.http.get(ctx.url(&ctx.product_path())), "product").await?;
        ctx.hold_ttl_ms = product
            .get("hold_ttl_ms")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        ctx.admission = product
            .get("admit_per_s")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            > 0;
    }
    let before = stats(&ctx).await?;
    let stock_total = match &before {
        Some(Stats::Gate(s)) => s.stock_total,
        Some(Stats::Peer(s)) => s.stock_total,
        None => 0,
    };
    ctx.start = Instant::now();
    let ctx = Arc::new(ctx);
    let tasks: Vec<_> = crowd
        .into_iter()
        .map(|b| tokio::spawn(buyer(ctx.clone(), b)))
        .collect();
    let mut ends = Vec::with_capacity(tasks.len());
    for t in tasks {
        ends.push(t.await.context("a buyer's task panicked")?);
    }
    let duration_s = ctx.start.elapsed().as_secs_f64();
    ctx.bar.finish_and_clear();
    let after = stats(&ctx).await?;

    // Settle: the outbox drains (flashgate), the queue's consumer catches
    // up (a peer), bounded by the timeout.
    let finished_ms = ctx.elapsed_ms();
    let settle_deadline = Instant::now() + Duration::from_millis(ctx.cfg.settle_timeout_ms);
    let mut last = after;
    let settled = loop {
        let done = match &last {
            // Units too: a product of several stock shards counts the
            // shards' outboxes there (as their reports gave them).
            Some(Stats::Gate(s)) => s.outbox.backlog == 0 && s.outbox.backlog_units == 0,
            Some(Stats::Peer(s)) => s.settled,
            None => true,
        };
        if done || Instant::now() >= settle_deadline {
            break done;
        }
        tokio::time::sleep(Duration::from_millis(SETTLE_POLL_MS)).await;
        last = stats(&ctx).await?;
    };
    let settle_ms = settled.then(|| ctx.elapsed_ms().saturating_sub(finished_ms));
    // A product of several stock shards knows its shards' figures from
    // their reports, each at most a few report intervals old: the figures
    // the verdict judges are read once every shard has reported since.
    if matches!(&last, Some(Stats::Gate(s)) if s.escrow.is_some()) {
        tokio::time::sleep(Duration::from_millis(ESCROW_REPORTS_WAIT_MS)).await;
        last = stats(&ctx).await?;
    }

    let mut seen = Observed {
        stock_total,
        ..Observed::default()
    };
    let mut per_endpoint: BTreeMap<Endpoint, (Vec<f64>, BTreeMap<String, u64>)> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut fates: BTreeMap<String, u64> = BTreeMap::new();
    let mut ranks = Vec::new();
    let mut requests = 0u64;
    let mut reserve_requests = 0u64;
    let mut sold_out_ms = Vec::new();
    for end in ends {
        for s in end.samples {
            requests += 1;
            if s.endpoint == Endpoint::Reserve {
                reserve_requests += 1;
                if s.label == ProblemCode::SoldOut.as_str() {
                    sold_out_ms.push(s.ms);
                }
            }
            let e = per_endpoint.entry(s.endpoint).or_default();
            e.0.push(s.ms);
            *e.1.entry(s.label).or_default() += 1;
        }
        *outcomes.entry(end.outcome).or_default() += 1;
        if let Some(f) = end.fate {
            *fates.entry(f).or_default() += 1;
        }
        seen.reserved.extend(end.reservation);
        ranks.extend(end.ranks);
        seen.confirmed.extend(end.confirmed);
        seen.confirm_unanswered.extend(end.confirm_unanswered);
        seen.forgotten.extend(end.forgotten);
    }

    let (reached_object, db_writes) = match (&before, &last) {
        (Some(Stats::Gate(b)), Some(Stats::Gate(a))) => {
            // Each stats read is a command too: the one after the run.
            let commands = a
                .work
                .commands
                .saturating_sub(b.work.commands)
                .saturating_sub(1);
            (Some(commands as f64 / requests.max(1) as f64), None)
        }
        (Some(Stats::Peer(_)), Some(Stats::Peer(a))) => (None, Some(a.db_writes)),
        _ => (None, None),
    };
    let mut origin_db_writes = None;
    match (
        &last,
        ctx.cfg.origin.as_deref(),
        ctx.cfg.origin_read_token.as_deref(),
    ) {
        (Some(Stats::Gate(g)), Some(origin), Some(token)) => {
            let orders = origin_orders(&ctx, origin, token).await?;
            let totals: OriginTotals = read_json(
                ctx.http
                    .get(format!("{origin}/v1/products/{}", ctx.cfg.product))
                    .bearer_auth(token),
                "origin product",
            )
            .await?;
            seen.drift_units = Some(g.drift_units(totals.sold));
            // One row per order: the origin writes nothing else per order.
            origin_db_writes = Some(orders.len() as u64);
            seen.orders = Some(orders);
        }
        (Some(Stats::Peer(p)), _, _) => {
            let orders: PeerOrders = read_json(
                ctx.http
                    .get(ctx.url(&format!("/admin/products/{}/orders", ctx.cfg.product)))
                    .bearer_auth(&ctx.cfg.admin_token),
                "peer orders",
            )
            .await?;
            seen.drift_units = Some(p.sold as i64 - p.order_units as i64);
            seen.orders = Some(
                orders
                    .orders
                    .into_iter()
                    .map(|o| StoredOrder {
                        reservation_id: o.reservation_id,
                        quantity: o.quantity,
                        counts: true,
                    })
                    .collect(),
            );
        }
        _ => {}
    }
    let db_writes = db_writes.or(origin_db_writes);
    let escrow = match &last {
        Some(Stats::Gate(s)) => s
            .escrow
            .as_ref()
            .map(|e| EscrowFigures::of(e, s.available, reserve_requests)),
        _ => None,
    };
    let verdict = if ctx.cfg.system == System::Ceiling {
        None
    } else {
        Some(verdict::judge(&seen))
    };
    Ok(Report {
        system: ctx.cfg.system,
        base: ctx.cfg.base.clone(),
        product: ctx.cfg.product.clone(),
        seed: ctx.cfg.seed,
        buyers: ctx.cfg.buyers,
        connections: ctx.cfg.connections as u64,
        stock_total,
        duration_s,
        requests,
        throughput_rps: requests as f64 / duration_s,
        endpoints: per_endpoint
            .into_iter()
            .map(|(e, (samples, labels))| {
                (
                    e,
                    crate::report::EndpointFigures {
                        latency: Latency::of(samples),
                        answers: labels,
                    },
                )
            })
            .collect(),
        outcomes,
        fates,
        sold_out_latency: (!sold_out_ms.is_empty()).then(|| Latency::of(sold_out_ms)),
        reached_object,
        sell_out_ms: match ctx.sold_out_at.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        },
        settle_ms,
        fairness_tau: kendall_tau(&ranks),
        fairness_pairs: ranks.len() as u64,
        db_writes,
        db_writes_per_reserve: db_writes.map(|w| w as f64 / reserve_requests.max(1) as f64),
        reserve_requests,
        verdict,
        escrow,
    })
}
