//! The run: every buyer's flow against the target, then the reads that the
//! verdict is judged by. The decisions a buyer makes from an answer are
//! small and explicit here; the figures are computed in `measure` and the
//! verdict in `verdict`.
//!
//! A run can stop before its end: a read that keeps failing, Ctrl-C or
//! SIGTERM, or `--deadline-s`. It then still reports what it measured, with
//! the verdict marked incomplete: `run` returns a `Report` whatever
//! happened, and says in `incomplete` why it is one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use flashgate_wire::altcha;
use flashgate_wire::bounds;
use flashgate_wire::codes::ProblemCode;
use flashgate_wire::keys::KeySet;
use flashgate_wire::peer::{PeerOrders, PeerSetup, PeerStats};
use flashgate_wire::signing::{self, Purpose};
use flashgate_wire::stats::{GateStats, IsolateWork, OriginTotals};
use flashgate_wire::token::{self, Claims};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Client, RequestBuilder};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use crate::audit;
use crate::client::{self, send, Answer, STOPPED};
use crate::history_check;
use crate::measure::{kendall_tau, Latency};
use crate::plan::{self, Arrival, Buyer, Fate, Shares, System};
use crate::report::{
    Cleanup, Endpoint, EscrowFigures, EscrowWaits, PowFigures, Report, SharesUsed, Status,
};
use crate::server_timing::EscrowWait;
use crate::sold_out::{Refused, Served, Timeline};
use crate::verdict::{self, EndRead, Held, Observed, StoredOrder};

/// Attempts of one idempotent request on network errors, 503s and 429s.
pub const ATTEMPTS_MAX: u32 = 6;
/// Backoff after a network error: this, doubled at each attempt.
pub const BACKOFF_MS: u64 = 100;
/// The longest a buyer honours a 429's `Retry-After` before the next attempt.
pub const RETRY_AFTER_MS_MAX: u64 = 5_000;
/// The run's own reads and writes (setup, stats, the origin's orders) are
/// few and the verdict needs every one: they wait as long as a 429's
/// `Retry-After` says (the deployed admin policy's window is 60 s), within
/// `READ_PATIENCE_MS` in all.
pub const READ_RETRY_AFTER_MS_MAX: u64 = 60_000;
pub const READ_ATTEMPTS_MAX: u32 = 8;
/// Of those, attempts after a network error: a gate that is not there
/// (a wrong URL) is said so within a second.
pub const READ_NETWORK_ATTEMPTS_MAX: u32 = 4;
pub const READ_PATIENCE_MS: u64 = 180_000;
/// After a stop, the last stats read and the product's closing get this
/// long each: the user asked to stop, not to wait.
pub const FINAL_PATIENCE_MS: u64 = 5_000;
/// The waiting room's poll interval bounds.
pub const POLL_MS_MIN: u64 = 200;
pub const POLL_MS_MAX: u64 = 2_000;
/// How often the drain and the settling are polled: 4 reads a second stays
/// under the deployed admin policy (300 in 60 s).
const SETTLE_POLL_MS: u64 = 250;
/// How long after the settle a product of several stock shards is read
/// again: a few of its shards' report intervals
/// (`flashgate_core::escrow::limits::REPORT_INTERVAL_MS`, 250 ms).
const ESCROW_REPORTS_WAIT_MS: u64 = 1_000;
/// How often a progress line is printed when the output is not a terminal.
pub const PROGRESS_LINE_MS: u64 = 5_000;
/// The origin's page size for `GET /v1/orders`.
const ORDERS_PAGE: usize = 1000;

/// How the run shows its progress (on stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A bar redrawn in place: for a terminal.
    Bar,
    /// A line every `PROGRESS_LINE_MS`: for a log or a pipe.
    Lines,
    None,
}

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
    /// Ask a proof of work of this level at the join (0: none).
    pub pow_level: u8,
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
    pub progress: Progress,
    /// Audit the waiting room (`audit`).
    pub audit: bool,
}

/// Why the run is stopping early, once someone said so: the signal
/// handlers, the deadline, or the run itself on an error. The first reason
/// given is kept.
pub struct Stop {
    why: watch::Sender<Option<String>>,
}

impl Default for Stop {
    fn default() -> Stop {
        Stop {
            why: watch::Sender::new(None),
        }
    }
}

impl Stop {
    pub fn stop(&self, why: impl Into<String>) {
        let why = why.into();
        self.why.send_if_modified(|w| {
            let first = w.is_none();
            if first {
                *w = Some(why);
            }
            first
        });
    }

    pub fn reason(&self) -> Option<String> {
        self.why.borrow().clone()
    }

    pub fn is_stopped(&self) -> bool {
        self.why.borrow().is_some()
    }

    /// Resolves once a stop was asked for.
    pub async fn stopped(&self) {
        let mut rx = self.why.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }
}

/// One request, as the report counts it.
struct Sample {
    endpoint: Endpoint,
    ms: f64,
    label: String,
    /// `None` for a network error or a stop.
    status: Option<u16>,
    escrow_wait: Option<EscrowWait>,
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
    /// What the buyer saw of its ticket, for the audit.
    seen: audit::Seen,
    /// The buyer's token and ticket, to read the record with.
    credentials: Option<(String, String)>,
    /// The buyer's reserve and what came back of its hold, to judge the
    /// run's `sold_out` answers by.
    timeline: Timeline,
}

struct Ctx {
    cfg: Config,
    http: Client,
    stop: Arc<Stop>,
    slots: Semaphore,
    /// When the first buyer may arrive; set just before they are let go.
    start: OnceLock<Clock>,
    arrivals: AtomicU64,
    services: AtomicU64,
    /// Requests the buyers sent and got an answer (or an error) to.
    sent: AtomicU64,
    /// Buyers whose reserve was answered.
    answered: AtomicU64,
    /// Milliseconds after the start of the first sold-out answer, plus one
    /// (0 for none yet).
    sold_out_at: AtomicU64,
    last_confirm_at: AtomicU64,
    /// The run's own reads and writes that were retried after a 429 or 503.
    read_retries: AtomicU64,
    bar: ProgressBar,
    /// Whether the product has a waiting room, as it said before the run.
    admission: AtomicBool,
    /// The product's hold time to live, as it said before the run.
    hold_ttl_ms: AtomicU64,
    /// Proof-of-work challenges the buyers solved, and the CPU ms it took.
    pow_solved: AtomicU64,
    pow_solve_us: AtomicU64,
}

/// The run's clock: a monotonic instant, and the Unix time in µs it was
/// taken at, so that an instant of the gate (a hold's `expires_at_ms`) can
/// be placed on it.
#[derive(Clone, Copy)]
struct Clock {
    at: Instant,
    epoch_us: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            at: Instant::now(),
            epoch_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        }
    }
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

    fn start(&self) -> Instant {
        self.start.get_or_init(Clock::now).at
    }

    /// Now, in µs after the start.
    fn clock_us(&self) -> u64 {
        self.start().elapsed().as_micros() as u64
    }

    /// An instant of the gate, in ms since the Unix epoch, in µs after the
    /// start (0 for one before it).
    fn gate_ms_on_clock_us(&self, ms: u64) -> u64 {
        let epoch_us = self.start.get_or_init(Clock::now).epoch_us;
        ms.saturating_mul(1000).saturating_sub(epoch_us)
    }

    /// Sleeps for `d`; false if the run was stopped first.
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            biased;
            () = self.stop.stopped() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    /// One request in a connection slot, recorded. A stop cuts it short:
    /// it is then neither measured nor counted as sent.
    async fn once(&self, end: &mut BuyerEnd, endpoint: Endpoint, req: RequestBuilder) -> Answer {
        let answer = tokio::select! {
            biased;
            () = self.stop.stopped() => return Answer::stopped(),
            answer = async {
                let _slot = self
                    .slots
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                // Stamped once the request has its slot: a buyer waiting
                // for one has not sent anything yet.
                let sent_us = self.clock_us();
                let answer = send(req).await;
                Answer {
                    sent_us,
                    first_sent_us: sent_us,
                    received_us: self.clock_us(),
                    ..answer
                }
            } => answer,
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        end.samples.push(Sample {
            endpoint,
            ms: answer.ms,
            label: answer.label(),
            status: answer.status,
            escrow_wait: answer.escrow_wait,
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
        let mut first_sent_us = None;
        loop {
            let mut answer = self.once(end, endpoint, make()).await;
            answer.first_sent_us = *first_sent_us.get_or_insert(answer.sent_us);
            let Some(wait_ms) = client::retry_wait_ms(
                answer.status,
                answer.retry_after_s,
                attempt,
                BACKOFF_MS,
                RETRY_AFTER_MS_MAX,
            ) else {
                return answer;
            };
            if attempt >= ATTEMPTS_MAX || answer.label() == STOPPED {
                return answer;
            }
            attempt += 1;
            if !self.pause(Duration::from_millis(wait_ms)).await {
                return Answer::stopped();
            }
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.start().elapsed().as_millis() as u64
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

/// The request header a join's proof of work travels in (the gate's
/// `edge::pow::POW_HEADER`).
const POW_HEADER: &str = "flashgate-pow";
/// The most tries a buyer spends on one challenge: past level 5's mean
/// many times over, a challenge this tool was never meant to meet.
const POW_TRIES_MAX: u64 = 1 << 26;

/// The payload answering the challenge a `pow_required` answer carries,
/// solved on a blocking thread; `None` if it cannot be read or solved.
async fn solve_pow(ctx: &Ctx, refused: &Answer) -> Option<String> {
    let challenge: altcha::Challenge =
        serde_json::from_value(refused.body.get("challenge")?.clone()).ok()?;
    let started = Instant::now();
    let payload = tokio::task::spawn_blocking(move || {
        altcha::solve(&challenge, POW_TRIES_MAX).map(|s| altcha::payload(&challenge, &s))
    })
    .await
    .ok()??;
    ctx.pow_solved.fetch_add(1, Ordering::Relaxed);
    ctx.pow_solve_us
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    Some(payload)
}

/// Waits in the waiting room until admitted; the ticket, or why not.
async fn admitted(
    ctx: &Ctx,
    end: &mut BuyerEnd,
    token: &str,
    give_up_at: Instant,
) -> Result<String, String> {
    let queue = ctx.url(&format!("{}/queue", ctx.product_path()));
    let mut sent_join_ms = now_ms();
    let mut joined = ctx
        .again(end, Endpoint::Join, || {
            ctx.http.post(&queue).bearer_auth(token)
        })
        .await;
    // A room that asks a proof of work answers with a challenge: solved
    // natively (off the runtime's threads), then the join again with it.
    for _ in 0..2 {
        if joined.code.as_deref() != Some(ProblemCode::PowRequired.as_str()) {
            break;
        }
        let payload = solve_pow(ctx, &joined).await.ok_or("pow_unsolved")?;
        sent_join_ms = now_ms();
        joined = ctx
            .again(end, Endpoint::Join, || {
                ctx.http
                    .post(&queue)
                    .bearer_auth(token)
                    .header(POW_HEADER, payload.as_str())
            })
            .await;
    }
    if !joined.ok() {
        return Err(joined.label());
    }
    let ticket = joined
        .str("ticket")
        .ok_or("join_without_ticket")?
        .to_owned();
    end.seen.claims = audit::Claims::read(&ticket);
    end.credentials = Some((token.to_owned(), ticket.clone()));
    let mut standing = joined;
    let mut sent_ms = sent_join_ms;
    loop {
        if standing.body.get("admitted").and_then(|v| v.as_bool()) == Some(true) {
            return Ok(ticket);
        }
        end.seen.waiting_at_ms.push(sent_ms);
        if Instant::now() >= give_up_at {
            return Err("gave_up".into());
        }
        let eta_ms = standing
            .body
            .get("eta_s")
            .and_then(|v| v.as_u64())
            .map_or(POLL_MS_MAX, |s| s * 1000 / 2);
        if !ctx
            .pause(Duration::from_millis(
                eta_ms.clamp(POLL_MS_MIN, POLL_MS_MAX),
            ))
            .await
        {
            return Err(STOPPED.into());
        }
        sent_ms = now_ms();
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
    let arrive = ctx.start() + Duration::from_millis(b.arrive_ms);
    if !ctx
        .pause(arrive.saturating_duration_since(Instant::now()))
        .await
    {
        end.outcome = STOPPED.into();
        return end;
    }
    let give_up_at = Instant::now() + Duration::from_millis(ctx.cfg.patience_ms);
    let arrival = ctx.arrivals.fetch_add(1, Ordering::Relaxed);
    if ctx.cfg.system == System::Ceiling {
        let a = ctx
            .once(&mut end, Endpoint::Reserve, ctx.http.post(&ctx.cfg.base))
            .await;
        end.outcome = if a.ok() { "answered".into() } else { a.label() };
        ctx.answered.fetch_add(1, Ordering::Relaxed);
        ctx.bar.inc(1);
        return end;
    }
    let Some((buyer_id, token)) = session(&ctx, &mut end, &b).await else {
        end.outcome = if ctx.stop.is_stopped() {
            STOPPED.into()
        } else {
            "no_session".into()
        };
        return end;
    };
    let (reserved, first_sent_ms) = match reserve(&ctx, &mut end, &token, &b, give_up_at).await {
        Ok(r) => r,
        Err(why) => {
            end.outcome = why;
            return end;
        }
    };
    let Some((rid, expiry_us)) =
        note_reserve(&ctx, &mut end, &buyer_id, &reserved, first_sent_ms, arrival)
    else {
        return end;
    };
    follow_fate(&ctx, &mut end, &b, &buyer_id, &token, rid, expiry_us).await;
    end
}

/// Reserves, standing in the waiting room first where there is one, and
/// again while the object has not yet admitted a ticket the edge did. The
/// answer, and when the first attempt left; or why the buyer gave up in
/// line.
async fn reserve(
    ctx: &Ctx,
    end: &mut BuyerEnd,
    token: &str,
    b: &Buyer,
    give_up_at: Instant,
) -> Result<(Answer, Option<u64>), String> {
    let reservations = ctx.url(&format!("{}/reservations", ctx.product_path()));
    let body = json!({ "quantity": ctx.cfg.quantity }).to_string();
    let key = format!("\"{}\"", b.key);
    let mut ticket: Option<String> = None;
    // Before the first attempt leaves: the decision came after it.
    let mut first_sent_ms: Option<u64> = None;
    let reserved = loop {
        if ctx.admission.load(Ordering::Relaxed) && ticket.is_none() {
            ticket = Some(admitted(ctx, end, token, give_up_at).await?);
        }
        first_sent_ms.get_or_insert(ctx.elapsed_ms());
        let sent_ms = now_ms();
        let answer = ctx
            .again(end, Endpoint::Reserve, || {
                let mut r = ctx
                    .http
                    .post(&reservations)
                    .bearer_auth(token)
                    .header("content-type", "application/json")
                    .header("idempotency-key", &key)
                    .body(body.clone());
                if let Some(t) = &ticket {
                    r = r.header("flashgate-ticket", t);
                }
                r
            })
            .await;
        if answer.code.as_deref() == Some(ProblemCode::NotAdmitted.as_str()) {
            end.seen.waiting_at_ms.push(sent_ms);
        }
        if ticket.is_some() && answer.ok() {
            // The object granted it: the ticket was in by now.
            end.seen.admitted_by_ms = Some(now_ms());
        }
        if answer.code.as_deref() == Some(ProblemCode::NotAdmitted.as_str())
            && Instant::now() < give_up_at
        {
            // The edge's snapshot admitted the ticket before the object's
            // clock did: stand in line again, with the same key.
            if !ctx.pause(Duration::from_millis(POLL_MS_MIN)).await {
                break Answer::stopped();
            }
            continue;
        }
        break answer;
    };
    Ok((reserved, first_sent_ms))
}

/// Notes the reserve's answer: the outcome, a `sold_out` on the timeline
/// the audit checks, and the hold it granted. The reservation id and when
/// the hold's units come back if nobody pays, if it was granted.
fn note_reserve(
    ctx: &Ctx,
    end: &mut BuyerEnd,
    buyer_id: &str,
    reserved: &Answer,
    first_sent_ms: Option<u64>,
    arrival: u64,
) -> Option<(String, u64)> {
    end.outcome = if reserved.ok() {
        "reserved".into()
    } else {
        reserved.label()
    };
    if reserved.status == Some(ProblemCode::SoldOut.status())
        && reserved.code.as_deref() == Some(ProblemCode::SoldOut.as_str())
    {
        end.timeline.refused.push(Refused {
            buyer: buyer_id.to_owned(),
            sent_us: reserved.sent_us,
            received_us: reserved.received_us,
        });
        let _ = ctx.sold_out_at.compare_exchange(
            0,
            ctx.elapsed_ms() + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    if end.outcome != STOPPED {
        ctx.answered.fetch_add(1, Ordering::Relaxed);
        ctx.bar.inc(1);
    }
    if !reserved.ok() {
        return None;
    }
    let Some(rid) = reserved.str("reservation_id").map(str::to_owned) else {
        end.outcome = "reserved_without_id".into();
        return None;
    };
    let quantity = reserved
        .body
        .get("quantity")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    end.timeline.served.push(Served {
        buyer: buyer_id.to_owned(),
        sent_us: reserved.first_sent_us,
        answered_us: ctx.clock_us(),
    });
    let answered_ms = ctx.elapsed_ms();
    let expires_ms = first_sent_ms.unwrap_or(answered_ms) + ctx.hold_ttl_ms.load(Ordering::Relaxed);
    // When the hold's units come back if nobody pays for it: the gate's
    // `expires_at_ms`, or the time to live after the first attempt.
    let expiry_us = reserved
        .body
        .get("expires_at_ms")
        .and_then(|v| v.as_u64())
        .map_or(
            reserved.first_sent_us + ctx.hold_ttl_ms.load(Ordering::Relaxed) * 1000,
            |ms| ctx.gate_ms_on_clock_us(ms),
        );
    end.reservation = Some(Held {
        id: rid.clone(),
        quantity,
        from_ms: answered_ms,
        until_ms: Some(expires_ms),
    });
    end.ranks = Some((arrival, ctx.services.fetch_add(1, Ordering::Relaxed)));
    Some((rid, expiry_us))
}

/// What the buyer does with its hold (`Fate`): leaves it to expire,
/// cancels it, or pays for it, and what came of it.
async fn follow_fate(
    ctx: &Ctx,
    end: &mut BuyerEnd,
    b: &Buyer,
    buyer_id: &str,
    token: &str,
    rid: String,
    expiry_us: u64,
) {
    if ctx.cfg.system == System::Peer {
        // A peer makes the order at the reserve, for good.
        if let Some(h) = end.reservation.as_mut() {
            h.until_ms = None;
        }
        end.confirmed = Some(rid);
        return;
    }
    // Without payment keys nobody can pay: the report says so, and which
    // shares the buyers followed.
    let fate = match (b.fate, &ctx.cfg.payment_keys) {
        (Fate::Pay, None) => Fate::Abandon,
        (fate, _) => fate,
    };
    let rpath = format!("{}/reservations/{rid}", ctx.product_path());
    let done = match fate {
        Fate::Abandon => {
            end.timeline.returned_us.push(expiry_us);
            None
        }
        Fate::Cancel => {
            let url = ctx.url(&format!("{rpath}/cancel"));
            let sent_ms = ctx.elapsed_ms();
            let a = ctx
                .again(end, Endpoint::Cancel, || {
                    ctx.http.post(&url).bearer_auth(token)
                })
                .await;
            if a.ok() {
                if let Some(h) = end.reservation.as_mut() {
                    h.until_ms = h.until_ms.map(|u| u.min(sent_ms));
                }
            } else {
                // Refused, unanswered or never sent: the unit comes back
                // at the hold's expiry if the cancel did not take effect.
                end.timeline.returned_us.push(expiry_us);
            }
            if a.first_sent_us > 0 {
                end.timeline.returned_us.push(a.first_sent_us);
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
                .again(end, Endpoint::Confirm, || {
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
                // Unanswered (or cut short by a stop), it may or may not
                // have been confirmed: the hold is certain only until it
                // would have expired.
                None | Some(500..) => end.confirm_unanswered = Some(rid.clone()),
                _ => {}
            }
            if !a.ok() {
                // Paid too late (or not known to be paid): the hold's
                // units come back at its expiry.
                end.timeline.returned_us.push(expiry_us);
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
}

/// How long one of the run's own requests may keep trying.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// During the run: `READ_PATIENCE_MS` in all, and a stop ends the wait.
    Run,
    /// After a stop: `FINAL_PATIENCE_MS`, whatever the stop.
    Final,
}

/// What an answer that is not a 2xx was, in words.
fn answer_text(a: &Answer) -> String {
    match a.status {
        None => "no answer (a network error or a timeout)".into(),
        Some(status) => {
            let detail = a
                .body
                .get("detail")
                .and_then(|d| d.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| a.body.to_string());
            format!("{status} {}: {detail}", a.label())
        }
    }
}

/// One of the run's own requests (the setup, the stats, the origin's
/// reads), all safe to repeat: retried on a network error, a 429 or a 503,
/// waiting what `Retry-After` says. The 2xx answer, or why there is none.
async fn call(
    ctx: &Ctx,
    what: &str,
    make: impl Fn() -> RequestBuilder,
    patience: Patience,
) -> Result<Answer> {
    let budget_ms = match patience {
        Patience::Run => READ_PATIENCE_MS,
        Patience::Final => FINAL_PATIENCE_MS,
    };
    let until = Instant::now() + Duration::from_millis(budget_ms);
    let mut attempt = 1;
    loop {
        if patience == Patience::Run && ctx.stop.is_stopped() {
            bail!("{what}: not read, the run was stopping");
        }
        let left = until.saturating_duration_since(Instant::now());
        let a = tokio::time::timeout(left, send(make()))
            .await
            .with_context(|| format!("{what}: no answer within {} s", budget_ms / 1000))?;
        if a.ok() {
            return Ok(a);
        }
        let why = answer_text(&a);
        let wait_ms = client::retry_wait_ms(
            a.status,
            a.retry_after_s,
            attempt,
            BACKOFF_MS,
            READ_RETRY_AFTER_MS_MAX,
        );
        let Some(wait_ms) = wait_ms else {
            bail!("{what}: {why}");
        };
        let wait = Duration::from_millis(wait_ms);
        let attempts_max = if a.status.is_none() {
            READ_NETWORK_ATTEMPTS_MAX
        } else {
            READ_ATTEMPTS_MAX
        };
        if attempt >= attempts_max || Instant::now() + wait > until {
            bail!("{what}: {why} (after {attempt} attempts)");
        }
        eprintln!(
            "flashgate-load: {what}: {why}; trying again in {:.1} s{}",
            wait.as_secs_f64(),
            if a.retry_after_s.is_some() {
                ", as its Retry-After says"
            } else {
                ""
            }
        );
        ctx.read_retries.fetch_add(1, Ordering::Relaxed);
        match patience {
            Patience::Run => {
                if !ctx.pause(wait).await {
                    bail!("{what}: not read, the run was stopping");
                }
            }
            Patience::Final => tokio::time::sleep(wait).await,
        }
        attempt += 1;
    }
}

async fn read<T: for<'de> Deserialize<'de>>(
    ctx: &Ctx,
    what: &str,
    make: impl Fn() -> RequestBuilder,
    patience: Patience,
) -> Result<T> {
    let a = call(ctx, what, make, patience).await?;
    serde_json::from_value(a.body.clone())
        .with_context(|| format!("{what}: unexpected body {}", a.body))
}

/// Either system's stats.
enum Stats {
    Gate(Box<GateStats>),
    Peer(PeerStats),
}

async fn stats(ctx: &Ctx, patience: Patience) -> Result<Option<Stats>> {
    let make = || {
        ctx.http
            .get(ctx.url(&format!("/admin/products/{}/stats", ctx.cfg.product)))
            .bearer_auth(&ctx.cfg.admin_token)
    };
    Ok(match ctx.cfg.system {
        System::Flashgate => Some(Stats::Gate(Box::new(
            read(ctx, "stats", make, patience).await?,
        ))),
        System::Peer => Some(Stats::Peer(read(ctx, "stats", make, patience).await?)),
        System::Ceiling => None,
    })
}

/// Sets the product up; whether this made it (201) rather than changed it.
async fn setup(ctx: &Ctx, stock: u64) -> Result<bool> {
    let url = ctx.url(&format!("/admin/products/{}", ctx.cfg.product));
    let body = match ctx.cfg.system {
        System::Flashgate => json!({
            "stock_total": stock,
            "per_buyer_max": ctx.cfg.quantity,
            "quantity_max": ctx.cfg.quantity,
            "hold_ttl_ms": ctx.cfg.hold_ttl_ms,
            "admit_per_s": ctx.cfg.admit_per_s,
            "shards": ctx.cfg.shards,
            "pow": if ctx.cfg.pow_level > 0 {
                json!({"mode": "fixed", "level": ctx.cfg.pow_level})
            } else {
                json!({"mode": "off"})
            },
            "mode": "active",
        }),
        System::Peer => serde_json::to_value(PeerSetup {
            stock_total: stock,
            per_buyer_max: ctx.cfg.quantity,
        })?,
        System::Ceiling => return Ok(false),
    };
    // The same whole configuration again changes nothing: safe to repeat.
    let a = call(
        ctx,
        "setup",
        || {
            ctx.http
                .put(&url)
                .bearer_auth(&ctx.cfg.admin_token)
                .json(&body)
        },
        Patience::Run,
    )
    .await?;
    Ok(a.status == Some(201))
}

/// Closes a product the run made: the gate cannot delete one, so it stays
/// listed, closed, and sells nothing more. Its confirmed orders still
/// reach the origin.
async fn close(ctx: &Ctx, patience: Patience) -> Result<()> {
    let url = ctx.url(&format!("/admin/products/{}", ctx.cfg.product));
    call(
        ctx,
        "closing the product",
        || {
            ctx.http
                .put(&url)
                .bearer_auth(&ctx.cfg.admin_token)
                .json(&json!({ "mode": "closed" }))
        },
        patience,
    )
    .await
    .map(|_| ())
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
        let page: Page = read(
            ctx,
            "origin orders",
            || ctx.http.get(&url).bearer_auth(token),
            Patience::Run,
        )
        .await?;
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

/// What the run measured, as far as it got.
#[derive(Default)]
struct Measured {
    /// The run made the product (rather than finding it).
    created: bool,
    /// Whether closing the product it made worked, and why not.
    closed: Option<Result<(), String>>,
    before: Option<Stats>,
    last: Option<Stats>,
    stock_total: u64,
    ends: Vec<BuyerEnd>,
    duration_s: f64,
    settle_ms: Option<u64>,
    orders: Option<Vec<StoredOrder>>,
    drift_units: Option<i64>,
    db_writes: Option<u64>,
    /// The lottery's commitment, as the product read said before the run.
    commitment: Option<String>,
    /// The units available once the buyers were done, and when read.
    available_at_end: Option<EndRead>,
    audit: Option<audit::AuditReport>,
    /// The gate's history's totals before the crowd and after the
    /// settling (`history_check`).
    history_before: Option<history_check::Totals>,
    history_after: Option<history_check::Totals>,
}

/// A line of progress, for a log: what the buyers did so far.
fn progress_line(ctx: &Ctx) -> String {
    let s = ctx.start().elapsed().as_secs_f64();
    let sent = ctx.sent.load(Ordering::Relaxed);
    format!(
        "flashgate-load: {s:.0} s · {} of {} buyers answered · {sent} requests ({:.0} req/s)",
        ctx.answered.load(Ordering::Relaxed),
        ctx.cfg.buyers,
        sent as f64 / s.max(0.001)
    )
}

/// The run, phase by phase (set up, the crowd, what is left at the end, the
/// settling, the orders the origin stored), filling `m` in as it goes. An
/// error stops it where it was; what was measured stays in `m`.
async fn phases(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<()> {
    prepare(ctx, m).await?;
    crowd(ctx, m).await?;
    if ctx.stop.is_stopped() {
        // One last look at the gate's numbers, briefly: the user asked to
        // stop, and the report is what is left to give.
        m.last = stats(ctx, Patience::Final).await.ok().flatten();
        return Ok(());
    }
    if !read_end(ctx, m).await? || !settle(ctx, m).await? {
        return Ok(());
    }
    read_orders(ctx, m).await?;
    if ctx.cfg.system == System::Flashgate {
        m.history_after = Some(history_totals(ctx).await?);
    }
    Ok(())
}

/// The totals of the product's history at the gate.
async fn history_totals(ctx: &Ctx) -> Result<history_check::Totals> {
    let h: history_check::HistoryBody = read(
        ctx,
        "history",
        || {
            ctx.http
                .get(ctx.url(&format!("/admin/products/{}/history", ctx.cfg.product)))
                .bearer_auth(&ctx.cfg.admin_token)
        },
        Patience::Run,
    )
    .await?;
    Ok(h.totals())
}

/// Creates the product if asked, and reads what the buyers must know of it
/// (the hold's time to live, whether there is a waiting room) and the
/// figures before the sale.
async fn prepare(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<()> {
    if let Some(stock) = ctx.cfg.stock {
        m.created = setup(ctx, stock).await?;
    }
    if ctx.cfg.system == System::Flashgate {
        let product: serde_json::Value = read(
            ctx,
            "product",
            || ctx.http.get(ctx.url(&ctx.product_path())),
            Patience::Run,
        )
        .await?;
        let field = |name: &str| product.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
        ctx.hold_ttl_ms
            .store(field("hold_ttl_ms"), Ordering::Relaxed);
        ctx.admission
            .store(field("admit_per_s") > 0, Ordering::Relaxed);
        m.commitment = product
            .get("lottery_commitment")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        m.history_before = Some(history_totals(ctx).await?);
    }
    m.before = stats(ctx, Patience::Run).await?;
    m.stock_total = match &m.before {
        Some(Stats::Gate(s)) => s.stock_total,
        Some(Stats::Peer(s)) => s.stock_total,
        None => 0,
    };
    Ok(())
}

/// Runs the crowd to its end (or to a stop).
async fn crowd(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<()> {
    let crowd = plan::crowd(
        ctx.cfg.seed,
        ctx.cfg.buyers,
        ctx.cfg.arrival,
        ctx.cfg.shares,
        &format!("s{}", ctx.cfg.seed),
    );
    let _ = ctx.start.set(Clock::now());
    let lines = (ctx.cfg.progress == Progress::Lines).then(|| {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let every = Duration::from_millis(PROGRESS_LINE_MS);
            let mut tick = tokio::time::interval_at((Instant::now() + every).into(), every);
            loop {
                tick.tick().await;
                eprintln!("{}", progress_line(&ctx));
            }
        })
    });
    let tasks: Vec<_> = crowd
        .into_iter()
        .map(|b| tokio::spawn(buyer(ctx.clone(), b)))
        .collect();
    // After a stop every buyer ends at its next step, so this stays short.
    let mut panicked = false;
    for t in tasks {
        match t.await {
            Ok(end) => m.ends.push(end),
            Err(_) => {
                panicked = true;
                ctx.stop.stop("a buyer's task panicked");
            }
        }
    }
    m.duration_s = ctx.start().elapsed().as_secs_f64();
    ctx.bar.finish_and_clear();
    if let Some(lines) = lines {
        lines.abort();
        eprintln!("{}", progress_line(ctx));
    }
    if panicked {
        bail!("a buyer's task panicked");
    }
    Ok(())
}

/// The room's audit and the units still available once every buyer is
/// done. False if the run was stopped meanwhile.
async fn read_end(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<bool> {
    // The room is judged once every buyer is done, before the settling
    // (which a run without an origin to read may end early).
    if ctx.cfg.audit {
        m.audit = Some(audit_sale(ctx, m).await?);
    }
    m.last = stats(ctx, Patience::Run).await?;
    // The units still available once the buyers are done, before the
    // settling and before the holds left expire. A product of several
    // stock shards sums its shards' last reports, so it is read again once
    // every shard has reported since.
    if matches!(&m.last, Some(Stats::Gate(s)) if s.escrow.is_some()) {
        if !ctx
            .pause(Duration::from_millis(ESCROW_REPORTS_WAIT_MS))
            .await
        {
            return Ok(false);
        }
        m.last = stats(ctx, Patience::Run).await?;
    }
    let read_us = ctx.clock_us();
    m.available_at_end = match &m.last {
        Some(Stats::Gate(s)) => Some(s.available),
        // A peer makes its order at the reserve: no holds.
        Some(Stats::Peer(p)) => Some(p.stock_total.saturating_sub(p.sold)),
        None => None,
    }
    .map(|available| EndRead { available, read_us });
    Ok(true)
}

/// Waits for the system to settle, bounded by `--settle-timeout-ms`. True
/// if the orders can be checked now.
async fn settle(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<bool> {
    // Settle: the outbox drains (flashgate), the queue's consumer catches
    // up (a peer), bounded by the timeout.
    let finished = Instant::now();
    let settle_deadline = finished + Duration::from_millis(ctx.cfg.settle_timeout_ms);
    let mut said = finished;
    let settled = loop {
        let done = match &m.last {
            // Units too: a product of several stock shards counts the
            // shards' outboxes there (as their reports gave them).
            Some(Stats::Gate(s)) => s.outbox.backlog == 0 && s.outbox.backlog_units == 0,
            Some(Stats::Peer(s)) => s.settled,
            None => true,
        };
        if done || Instant::now() >= settle_deadline {
            break done;
        }
        if !ctx.pause(Duration::from_millis(SETTLE_POLL_MS)).await {
            return Ok(false);
        }
        m.last = stats(ctx, Patience::Run).await?;
        if ctx.cfg.progress == Progress::Lines
            && said.elapsed() >= Duration::from_millis(PROGRESS_LINE_MS)
        {
            said = Instant::now();
            if let Some(Stats::Gate(s)) = &m.last {
                eprintln!(
                    "flashgate-load: settling: {} events still in the outbox",
                    s.outbox.backlog
                );
            }
        }
    };
    // Without an origin to read, the orders are not checked, and not
    // settling is a figure (`settle_ms` none), not a stop.
    let checks_orders = match &m.last {
        Some(Stats::Gate(_)) => ctx.cfg.origin.is_some() && ctx.cfg.origin_read_token.is_some(),
        Some(Stats::Peer(_)) => true,
        None => false,
    };
    if !settled && !checks_orders {
        return Ok(false);
    }
    if !settled {
        let left = match &m.last {
            Some(Stats::Gate(s)) => format!("the outbox still held {} events", s.outbox.backlog),
            _ => "the system had not settled".into(),
        };
        // The orders cannot be judged before they are all delivered.
        ctx.stop.stop(format!(
            "{left} after --settle-timeout-ms {}; the orders were not checked",
            ctx.cfg.settle_timeout_ms
        ));
        return Ok(false);
    }
    m.settle_ms = Some(finished.elapsed().as_millis() as u64);
    // A product of several stock shards knows its shards' figures from
    // their reports, each at most a few report intervals old: the figures
    // the verdict judges are read once every shard has reported since.
    if matches!(&m.last, Some(Stats::Gate(s)) if s.escrow.is_some()) {
        if !ctx
            .pause(Duration::from_millis(ESCROW_REPORTS_WAIT_MS))
            .await
        {
            return Ok(false);
        }
        m.last = stats(ctx, Patience::Run).await?;
    }
    Ok(true)
}

/// The orders the origin (or the peer) stored, and the drift against the
/// gate's own count.
async fn read_orders(ctx: &Arc<Ctx>, m: &mut Measured) -> Result<()> {
    match (
        &m.last,
        ctx.cfg.origin.as_deref(),
        ctx.cfg.origin_read_token.as_deref(),
    ) {
        (Some(Stats::Gate(g)), Some(origin), Some(token)) => {
            let orders = origin_orders(ctx, origin, token).await?;
            let totals: OriginTotals = read(
                ctx,
                "origin product",
                || {
                    ctx.http
                        .get(format!("{origin}/v1/products/{}", ctx.cfg.product))
                        .bearer_auth(token)
                },
                Patience::Run,
            )
            .await?;
            m.drift_units = Some(g.drift_units(totals.sold));
            // One row per order: the origin writes nothing else per order.
            m.db_writes = Some(orders.len() as u64);
            m.orders = Some(orders);
        }
        (Some(Stats::Peer(p)), _, _) => {
            let orders: PeerOrders = read(
                ctx,
                "peer orders",
                || {
                    ctx.http
                        .get(ctx.url(&format!("/admin/products/{}/orders", ctx.cfg.product)))
                        .bearer_auth(&ctx.cfg.admin_token)
                },
                Patience::Run,
            )
            .await?;
            m.db_writes = Some(p.db_writes);
            m.drift_units = Some(p.sold as i64 - p.order_units as i64);
            m.orders = Some(
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
    Ok(())
}

/// The token and ticket to read the record with: those of a buyer who was
/// granted a reserve, if any, else any buyer's. The gate shows a ticket of
/// its infinite queue the record only up to that ticket's place; a ticket
/// that was admitted is not one of those, so the record it reads bounds
/// every honest ticket.
fn record_reader(ends: &[BuyerEnd]) -> Option<(String, String)> {
    let admitted = ends
        .iter()
        .filter(|e| e.seen.admitted_by_ms.is_some())
        .find_map(|e| e.credentials.clone());
    admitted.or_else(|| ends.iter().find_map(|e| e.credentials.clone()))
}

/// Reads what the gate published (the key, the record) and audits the
/// room against what the buyers saw. A run with no ticket cannot be
/// audited, and says so.
async fn audit_sale(ctx: &Ctx, m: &Measured) -> Result<audit::AuditReport> {
    let Some((token, ticket)) = record_reader(&m.ends) else {
        bail!("--audit: no buyer got a ticket (is there a waiting room?)");
    };
    let product: serde_json::Value = read(
        ctx,
        "product",
        || ctx.http.get(ctx.url(&ctx.product_path())),
        Patience::Run,
    )
    .await?;
    let record: audit::AdmissionRecord = read(
        ctx,
        "queue record",
        || {
            ctx.http
                .get(ctx.url(&format!("{}/queue/record", ctx.product_path())))
                .bearer_auth(&token)
                .header("flashgate-ticket", &ticket)
        },
        Patience::Run,
    )
    .await?;
    Ok(audit::audit(&audit::Sale {
        product: ctx.cfg.product.clone(),
        commitment: m.commitment.clone(),
        key: product
            .get("lottery_key")
            .and_then(|v| v.as_str())
            .map(str::to_owned),
        record,
        tickets: m.ends.iter().map(|e| e.seen.clone()).collect(),
    }))
}

/// The reserves, confirms and cancels the object decided: the commands
/// buyers cause. Reads by anyone else (the console's polls of the stats
/// and the product) are not among them.
fn decisions(s: &GateStats) -> u64 {
    let c = &s.counters;
    [&c.reserve, &c.confirm, &c.cancel]
        .iter()
        .flat_map(|m| m.values())
        .sum()
}

/// Runs the sale and reports what it measured, however far it got. A stop
/// (`stop`, an error, the settle timeout) makes the report incomplete,
/// never absent.
pub async fn run(cfg: Config, stop: Arc<Stop>) -> Report {
    let http = match client::client(cfg.connections) {
        Ok(h) => h,
        Err(e) => {
            stop.stop(format!("the HTTP client: {e}"));
            return report(&cfg, Measured::default(), 0, stop.reason());
        }
    };
    let bar = if cfg.progress == Progress::Bar {
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
    let ctx = Arc::new(Ctx {
        slots: Semaphore::new(cfg.connections),
        cfg,
        http,
        stop,
        start: OnceLock::new(),
        arrivals: AtomicU64::new(0),
        services: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        sold_out_at: AtomicU64::new(0),
        last_confirm_at: AtomicU64::new(0),
        read_retries: AtomicU64::new(0),
        pow_solved: AtomicU64::new(0),
        pow_solve_us: AtomicU64::new(0),
        bar,
        admission: AtomicBool::new(false),
        hold_ttl_ms: AtomicU64::new(0),
    });
    let mut m = Measured::default();
    if let Err(e) = phases(&ctx, &mut m).await {
        ctx.stop.stop(format!("{e:#}"));
    }
    if m.created {
        let patience = if ctx.stop.is_stopped() {
            Patience::Final
        } else {
            Patience::Run
        };
        m.closed = Some(close(&ctx, patience).await.map_err(|e| format!("{e:#}")));
    }
    let incomplete = ctx.stop.reason();
    let retries = ctx.read_retries.load(Ordering::Relaxed);
    let sell_out_ms = match ctx.sold_out_at.load(Ordering::Relaxed) {
        0 => None,
        t => Some(t - 1),
    };
    let mut r = report(&ctx.cfg, m, retries, incomplete);
    r.sell_out_ms = sell_out_ms;
    let solved = ctx.pow_solved.load(Ordering::Relaxed);
    r.pow = (solved > 0).then(|| PowFigures {
        solved,
        solve_ms_mean: ctx.pow_solve_us.load(Ordering::Relaxed) as f64 / solved as f64 / 1000.0,
    });
    r
}

/// What the buyers' own ends add up to: every answer they saw, by
/// endpoint, and what the verdict judges.
#[derive(Default)]
struct Tally {
    seen: Observed,
    per_endpoint: BTreeMap<Endpoint, (Vec<f64>, BTreeMap<String, u64>)>,
    outcomes: BTreeMap<String, u64>,
    fates: BTreeMap<String, u64>,
    ranks: Vec<(u64, u64)>,
    requests: u64,
    reserve_requests: u64,
    sold_out_ms: Vec<f64>,
    unavailable_answers: u64,
    reserves_unanswered: u64,
    waits: Vec<EscrowWait>,
}

impl Tally {
    fn of(ends: Vec<BuyerEnd>, seen: Observed) -> Tally {
        let mut t = Tally {
            seen,
            ..Tally::default()
        };
        for end in ends {
            for s in end.samples {
                t.requests += 1;
                if s.endpoint == Endpoint::Reserve {
                    t.reserve_requests += 1;
                    if s.label == ProblemCode::SoldOut.as_str() {
                        t.sold_out_ms.push(s.ms);
                    }
                    // Counted by status: a 503 is never a sold-out, whatever
                    // its body says.
                    if s.status == Some(ProblemCode::Unavailable.status()) {
                        t.unavailable_answers += 1;
                    }
                    if s.status.is_none() {
                        t.reserves_unanswered += 1;
                    }
                    t.waits.extend(s.escrow_wait);
                }
                let e = t.per_endpoint.entry(s.endpoint).or_default();
                e.0.push(s.ms);
                *e.1.entry(s.label).or_default() += 1;
            }
            *t.outcomes.entry(end.outcome).or_default() += 1;
            if let Some(f) = end.fate {
                *t.fates.entry(f).or_default() += 1;
            }
            t.seen.reserved.extend(end.reservation);
            t.ranks.extend(end.ranks);
            t.seen.confirmed.extend(end.confirmed);
            t.seen.confirm_unanswered.extend(end.confirm_unanswered);
            t.seen.forgotten.extend(end.forgotten);
            t.seen.timeline.refused.extend(end.timeline.refused);
            t.seen.timeline.served.extend(end.timeline.served);
            t.seen.timeline.returned_us.extend(end.timeline.returned_us);
        }
        t
    }

    /// Cancels by whether the gate acknowledged them.
    fn cancels(&self, acknowledged: bool) -> u64 {
        self.fates
            .iter()
            .filter(|(f, _)| (f.as_str() == "cancel") == acknowledged && f.starts_with("cancel"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// What the object's own stats say moved between the first and the last
/// read: the share of requests that reached it, and its isolate's work.
fn object_figures(
    before: &Option<Stats>,
    last: &Option<Stats>,
    requests: u64,
) -> (Option<f64>, Option<IsolateWork>) {
    let (Some(Stats::Gate(b)), Some(Stats::Gate(a))) = (before, last) else {
        return (None, None);
    };
    let own = decisions(a).saturating_sub(decisions(b));
    let (bw, aw) = (&b.work.isolate, &a.work.isolate);
    (
        Some(own as f64 / requests.max(1) as f64),
        Some(IsolateWork {
            events: aw.events.saturating_sub(bw.events),
            rows_read: aw.rows_read.saturating_sub(bw.rows_read),
            rows_written: aw.rows_written.saturating_sub(bw.rows_written),
        }),
    )
}

/// The sale's stored history against what the buyers saw.
fn history_figures(
    before: Option<history_check::Totals>,
    after: Option<history_check::Totals>,
    t: &Tally,
) -> Option<history_check::HistoryCheck> {
    let (before, after) = (before?, after?);
    let granted: std::collections::BTreeSet<&str> =
        t.seen.reserved.iter().map(|h| h.id.as_str()).collect();
    Some(history_check::check(
        before,
        after,
        history_check::Seen {
            reserved: granted.len() as u64,
            confirmed: t.seen.confirmed.len() as u64,
            cancelled: t.cancels(true),
            sold_out: t.sold_out_ms.len() as u64,
            reserves_unanswered: t.reserves_unanswered,
            confirms_unanswered: t.seen.confirm_unanswered.len() as u64,
            cancels_not_acknowledged: t.cancels(false),
        },
    ))
}

/// The report of what `m` holds.
fn report(cfg: &Config, m: Measured, read_retries: u64, incomplete: Option<String>) -> Report {
    let seen = Observed {
        stock_total: m.stock_total,
        orders: m.orders,
        drift_units: m.drift_units,
        available_at_end: m.available_at_end,
        ..Observed::default()
    };
    let t = Tally::of(m.ends, seen);
    let (reached_object, work) = object_figures(&m.before, &m.last, t.requests);
    let shares = match cfg.system {
        System::Flashgate => {
            let used = cfg.shares.followed(cfg.payment_keys.is_some());
            Some(SharesUsed {
                pay: used.pay,
                cancel: used.cancel,
                abandon: used.abandon(),
                note: (used != cfg.shares).then(|| no_payment_keys(cfg.shares)),
            })
        }
        System::Peer | System::Ceiling => None,
    };
    let escrow = match &m.last {
        Some(Stats::Gate(s)) => s
            .escrow
            .as_ref()
            .map(|e| EscrowFigures::of(e, t.reserve_requests)),
        _ => None,
    };
    let history = history_figures(m.history_before, m.history_after, &t);
    let verdict = (cfg.system != System::Ceiling).then(|| {
        let mut v = verdict::judge(&t.seen);
        if let Some(h) = &history {
            v.violations.extend(h.violations.iter().cloned());
        }
        v
    });
    Report::judged(Report {
        system: cfg.system,
        base: cfg.base.clone(),
        product: cfg.product.clone(),
        seed: cfg.seed,
        buyers: cfg.buyers,
        connections: cfg.connections as u64,
        stock_total: m.stock_total,
        duration_s: m.duration_s,
        requests: t.requests,
        throughput_rps: t.requests as f64 / m.duration_s.max(f64::MIN_POSITIVE),
        endpoints: t
            .per_endpoint
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
        outcomes: t.outcomes,
        fates: t.fates,
        shares,
        sold_out_latency: (!t.sold_out_ms.is_empty()).then(|| Latency::of(t.sold_out_ms)),
        unavailable_answers: t.unavailable_answers,
        escrow_waits: EscrowWaits::of(&t.waits),
        reached_object,
        work,
        sell_out_ms: None,
        settle_ms: m.settle_ms,
        fairness_tau: kendall_tau(&t.ranks),
        fairness_pairs: t.ranks.len() as u64,
        db_writes: m.db_writes,
        db_writes_per_reserve: m
            .db_writes
            .map(|w| w as f64 / t.reserve_requests.max(1) as f64),
        reserve_requests: t.reserve_requests,
        read_retries,
        product_made: m.closed.map(|c| match c {
            Ok(()) => Cleanup::Closed,
            Err(why) => Cleanup::NotClosed { why },
        }),
        incomplete,
        verdict,
        escrow,
        pow: None,
        audit: m.audit,
        history,
        status: Status::Pass,
    })
}

/// What the report says when buyers could not pay.
pub fn no_payment_keys(asked: Shares) -> String {
    format!(
        "no --payment-keys: nobody could pay, so the {}% who would have paid walked away \
         (asked for {},{},{})",
        asked.pay,
        asked.pay,
        asked.cancel,
        asked.abandon()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(name: &str, admitted: bool) -> BuyerEnd {
        let mut e = BuyerEnd {
            credentials: Some((format!("token-{name}"), format!("ticket-{name}"))),
            ..BuyerEnd::default()
        };
        e.seen.admitted_by_ms = admitted.then_some(1);
        e
    }

    #[test]
    fn the_record_is_read_with_an_admitted_buyers_ticket_first() {
        let ends = [
            BuyerEnd::default(),
            end("waited", false),
            end("served", true),
        ];
        assert_eq!(record_reader(&ends).unwrap().1, "ticket-served");
        assert_eq!(record_reader(&ends[..2]).unwrap().1, "ticket-waited");
        assert_eq!(record_reader(&ends[..1]), None);
    }
}
