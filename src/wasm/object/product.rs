//! `ProductGate`: the Durable Object of one product. The shell of
//! `object::ProductObject`: it hands each request and the time to the
//! object, passes it the SQL storage to write through, sets the alarm the
//! object asks for, and performs the fetches its leases describe.
//!
//! Correctness rests on these rules (ARCHITECTURE.md):
//! - Between a decision and the write of its rows nothing is awaited; both
//!   happen inside one synchronous call of the object. Commands are grouped
//!   (`group_commit`), never writes: a batch of commands is decided and
//!   written in one turn, in one `transactionSync`.
//! - No `RefCell` borrow is held across an `.await`.
//! - The alarm handler is idempotent: running it twice at the same instant
//!   does nothing the second time.

use std::cell::RefCell;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{join_all, select, Either};
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsCast};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::worker_sys::DurableObjectState;
use worker::{
    js_sys, wasm_bindgen::JsValue, AbortController, Delay, Env, Fetch, Headers, Method, Request,
    RequestInit, Response, ScheduledTime, State, WebSocketPair,
};

use crate::http::problem::Problem;
use crate::http::views;
use crate::object::delivery::{self, Attempt};
use crate::object::group_commit::{Answer, Batcher};
use crate::object::home_call::{AskHold, BatchCalls};
use crate::object::live::{self, Attachment, Due, Pusher};
use crate::object::product::{DeliveryOutcome, ProductObject};
use crate::protocol::{Command, ShardAnswer, ShardAt};
use crate::settings::Forwarding;
use crate::wasm::object::sqlite::DoSql;
use crate::wasm::{config, http, now_ms, random_bytes, rpc};
use flashgate_core::escrow::{HomePush, ShardReply, ShardReport};
use flashgate_core::HomeStep;
use flashgate_wire::signing::{self, Purpose};
use flashgate_wire::Batch;

#[wasm_bindgen]
pub struct ProductGate {
    state: State,
    env: Env,
    object: Rc<RefCell<ProductObject>>,
    batcher: RefCell<Batcher>,
    /// Holds the pending group-commit tick (`next_tick`).
    tick: js_sys::Object,
    /// When to push live updates; shared with the timer a coalesced push
    /// waits on.
    pusher: Rc<RefCell<Pusher>>,
    /// A batch waits for home (a stock shard's call home, or at home the
    /// drains before a batch, and the rules pushed after one): other
    /// batches wait for it. A push from home, or a shard's report at home,
    /// never waits for it.
    waiting: std::cell::Cell<bool>,
    /// Holds the promise that what a waiter waits for may have changed
    /// (`changed`): a batch ended, home answered an ask, a shard answered
    /// a push. Waiters wake on it instead of polling: in the endgame every
    /// request queued behind a shard's call home used to look again every
    /// 2 ms, and those wakes were most of a sharded sell-out's CPU.
    changed: js_sys::Object,
}

impl ProductGate {
    fn store(&self) -> DoSql {
        DoSql::new(&self.state)
    }

    /// Runs the oldest waiting commands as one batch, then moves the alarm
    /// if the batch asks for it.
    async fn run_batch(&self) {
        if self.waiting.get() {
            // Woken when the batch that waits ends (`done_waiting`), in the
            // same turn as the flag falls: no wake is lost.
            let _ = JsFuture::from(changed(&self.changed)).await;
            return;
        }
        let (ids, cmds) = self.batcher.borrow_mut().take_batch();
        if ids.is_empty() {
            return;
        }
        self.waiting.set(true);
        // A stock shard that cannot decide the batch's reserves on what it
        // has calls home first (`home_call`), and decides the batch after,
        // in a turn of its own: no decision spans the call. At home, a
        // batch whose reserves `U` cannot cover, or a snapshot when the
        // product looks sold out, waits for drains of the shards first.
        let mut calls = BatchCalls::default();
        loop {
            let needed = self.object.borrow().home_call_needed(&cmds, now_ms());
            let Some(need) = calls.next(needed, now_ms()) else {
                break;
            };
            let first = cmds.iter().find(|c| matches!(c, Command::Shard { .. }));
            let drains = self.call_home(need, first).await;
            calls.answered(drains);
        }
        self.drain_before(&cmds).await;
        let outcome = self
            .object
            .borrow_mut()
            .commands(&mut self.store(), &cmds, now_ms());
        if let Err(e) = &outcome {
            worker::console_error!("ProductGate: a batch of {} failed: {e}", cmds.len());
        }
        // New rules bind every shard before anyone is told they are set.
        self.push_rules().await;
        self.done_waiting();
        let outcome = outcome.map(|mut replies| {
            if let Some(timing) = calls.server_timing(now_ms()) {
                for (cmd, reply) in cmds.iter().zip(replies.iter_mut()) {
                    if matches!(cmd, Command::Shard { .. }) {
                        reply.headers.push(("server-timing", timing.clone()));
                    }
                }
            }
            replies
        });
        self.batcher.borrow_mut().answer(ids, outcome);
        self.after_change();
        // The decisions are committed; a failure to move the alarm must not
        // turn their answers into errors. The next batch or alarm re-arms.
        if let Err(e) = self.arm().await {
            worker::console_error!("ProductGate: could not set the alarm: {e}");
        }
    }

    /// At home, before a batch: the drains it needs (`drains_needed`), one
    /// round at a time, until it can be decided or `ASK_WAIT_MAX_MS` passed.
    async fn drain_before(&self, cmds: &[Command]) {
        let hold = AskHold::new(now_ms());
        loop {
            let give_up = hold.give_up(now_ms());
            let drains = self
                .object
                .borrow_mut()
                .drains_needed(cmds, now_ms(), give_up);
            match drains {
                Some(list) if list.is_empty() => return,
                Some(list) => self.push_round(list, true).await,
                None if give_up => return,
                None => self.changed_or_recheck().await,
            }
        }
    }

    /// At home, after a change of rules: pushed to every shard that has not
    /// taken them, and then, for one that did not answer, a wait until its
    /// lease on the old rules has ended (at most `RULES_LEASE_MS`). A
    /// product's creation makes its shards so, from home.
    async fn push_rules(&self) {
        let behind = self.object.borrow_mut().rules_behind();
        if behind.is_empty() {
            return;
        }
        self.push_round(behind, false).await;
        loop {
            let bind_at = self.object.borrow().rules_bind_at(now_ms());
            let Some(at) = bind_at else {
                return;
            };
            Delay::from(Duration::from_millis(at.saturating_sub(now_ms()).max(1))).await;
        }
    }

    /// Pushes to every shard of `shards` at once, each answer applied as it
    /// comes (or its absence, after `PUSH_TIMEOUT_MS`).
    async fn push_round(&self, shards: Vec<u16>, drain: bool) {
        join_all(shards.into_iter().map(|i| self.push_one(i, drain))).await;
    }

    async fn push_one(&self, index: u16, drain: bool) {
        let sent_at = now_ms();
        let push = self.object.borrow().push_for(index, drain);
        let Some((product_id, at, push)) = push else {
            return;
        };
        let answer = push_to_shard(&self.env, &product_id, at, push).await;
        if let Err(e) = &answer {
            worker::console_error!(
                "ProductGate: shard {index} of {product_id} did not answer a push: {e}"
            );
        }
        let applied = self.object.borrow_mut().handle_push_answer(
            &mut self.store(),
            now_ms(),
            index,
            sent_at,
            drain,
            answer.ok(),
        );
        if let Err(e) = applied {
            worker::console_error!("ProductGate: could not write a shard's answer: {e}");
        }
        // A drained shard's units are in `U` now.
        notify(&self.changed);
    }

    /// The batch that waited for home has ended: the next may run.
    fn done_waiting(&self) {
        self.waiting.set(false);
        notify(&self.changed);
    }

    /// At home, a wait for what another ask or batch is doing: until it
    /// changes something (`notify`), or `HOME_RECHECK_MS`, whichever is
    /// first. The recheck catches what only time changes (an endgame
    /// owner's lease, units granted a moment ago, the wait's own end).
    async fn changed_or_recheck(&self) {
        let woken = JsFuture::from(changed(&self.changed));
        let recheck = Delay::from(Duration::from_millis(HOME_RECHECK_MS));
        let _ = select(pin!(woken), pin!(recheck)).await;
    }

    /// At home, a shard's report: applied, and its ask answered, after the
    /// drains it needs; each step decided in a turn of its own (the report
    /// is handed in again after each round), never across an await.
    async fn answer_report(&self, report: ShardReport) -> worker::Result<web_sys::Response> {
        let mut hold = AskHold::new(now_ms());
        loop {
            let step = self.object.borrow_mut().answer_report(
                &mut self.store(),
                now_ms(),
                &report,
                hold.give_up(now_ms()),
            );
            match step {
                Ok(Ok(HomeStep::Reply(mut reply))) => {
                    reply.drains = hold.drains;
                    self.after_change();
                    // An ask answered frees the endgame for the next.
                    notify(&self.changed);
                    let body = serde_json::to_string(&reply)?;
                    return http::raw(
                        200,
                        body.as_bytes(),
                        &[("content-type", "application/json")],
                    );
                }
                Ok(Ok(HomeStep::Drain(list))) => {
                    hold.drains += 1;
                    self.push_round(list, true).await;
                }
                Ok(Ok(HomeStep::Wait)) => self.changed_or_recheck().await,
                Ok(Err(refusal)) => {
                    worker::console_error!("ProductGate: home refused a report: {refusal:?}");
                    return http::problem(Problem::internal());
                }
                Err(e) => {
                    worker::console_error!("ProductGate: could not write a report: {e}");
                    return http::problem(Problem::unavailable(js_sys::Math::random()));
                }
            }
        }
    }

    /// At a stock shard, home's push: answered at once, never behind the
    /// shard's own call home (which may be waiting for home, and would
    /// wait for this).
    fn answer_push(
        &self,
        product_id: &str,
        at: ShardAt,
        push: &HomePush,
    ) -> worker::Result<web_sys::Response> {
        let answered =
            self.object
                .borrow_mut()
                .answer_push(&mut self.store(), now_ms(), product_id, at, push);
        match answered {
            Ok(Some(answer)) => {
                self.after_change();
                let body = serde_json::to_string(&answer)?;
                http::raw(
                    200,
                    body.as_bytes(),
                    &[("content-type", "application/json")],
                )
            }
            Ok(None) => http::problem(Problem::unknown_reservation()),
            Err(e) => {
                worker::console_error!("ProductGate: could not answer a push: {e}");
                http::problem(Problem::unavailable(js_sys::Math::random()))
            }
        }
    }

    /// After a batch or an alarm: pushes what the viewers see, now or at
    /// the end of the coalescing interval, if it changed. Reading the
    /// levels is cheap; the sockets are only listed when a push goes out
    /// (at most 10 times a second).
    fn after_change(&self) {
        let now = now_ms();
        let current = self.object.borrow().live_now(now);
        let due = self.pusher.borrow_mut().changed(current, now);
        match due {
            Due::Nothing => {}
            Due::Now => broadcast(self.state.as_raw(), &self.object, &self.pusher, now),
            Due::At(at) => {
                let state: DurableObjectState = AsRef::<JsValue>::as_ref(self.state.as_raw())
                    .clone()
                    .unchecked_into();
                let (object, pusher) = (self.object.clone(), self.pusher.clone());
                // The timer keeps the object awake until it fires, which
                // is at most `PUSH_INTERVAL_MS` away.
                worker::wasm_bindgen_futures::spawn_local(async move {
                    Delay::from(Duration::from_millis(at.saturating_sub(now))).await;
                    pusher.borrow_mut().timer_fired();
                    broadcast(&state, &object, &pusher, now_ms());
                });
            }
        }
    }

    /// `GET /api/products/{id}/live`: accepts a viewer's socket
    /// (hibernatable: the object may sleep while sockets stay open), greets
    /// it with the current state, and keeps its buyer and version across
    /// hibernation. Past the cap it refuses, and the page polls the
    /// edge-cached read instead.
    fn watch(
        &self,
        product_id: &str,
        buyer: Option<String>,
        client: Option<String>,
    ) -> worker::Result<web_sys::Response> {
        let now = now_ms();
        let loaded = self.object.borrow_mut().live_state(&mut self.store(), now);
        let current = match loaded {
            Ok(Some(c)) => c,
            Ok(None) => return http::problem(Problem::unknown_product(product_id)),
            Err(e) => {
                worker::console_error!("ProductGate: could not load for a watch: {e}");
                return http::problem(Problem::unavailable(js_sys::Math::random()));
            }
        };
        let sockets_max = match config::settings(&self.env) {
            Ok(s) => s.live_sockets_max,
            Err(_) => return http::problem(Problem::misconfigured()),
        };
        let open = self.state.as_raw().get_websockets().map_or(0, |w| w.len());
        if !live::admits(open, sockets_max) {
            return http::problem(Problem::live_full(
                product_id,
                sockets_max,
                crate::limits::SNAPSHOT_FRESH_MS,
            ));
        }
        // The client's own share, counted by the tag its sockets carry
        // (which survives hibernation).
        if let Some(tag) = &client {
            let mine = self.state.get_websockets_with_tag(tag).len();
            if !live::admits_client(mine) {
                return http::problem(Problem::live_full_for_client(
                    product_id,
                    crate::limits::LIVE_SOCKETS_PER_CLIENT_MAX,
                    crate::limits::SNAPSHOT_FRESH_MS,
                ));
            }
        }
        let pair = WebSocketPair::new()?;
        match &client {
            Some(tag) => self
                .state
                .accept_websocket_with_tags(&pair.server, &[tag.as_str()]),
            None => self.state.accept_web_socket(&pair.server),
        }
        let (version, message) = self.pusher.borrow_mut().greeting(current, product_id, now);
        pair.server
            .serialize_attachment(Attachment { buyer, version })?;
        pair.server.send_with_str(&message)?;
        Response::from_websocket(pair.client).map(Into::into)
    }

    /// A stock shard's report to its home object, and the reply applied:
    /// for `need` units (0: a background report, if one is due). Returns
    /// the rounds of drains home ran for it.
    async fn call_home(&self, need: u64, first: Option<&Command>) -> u32 {
        let report = self
            .object
            .borrow_mut()
            .report_home(&mut self.store(), now_ms(), first, need);
        let (home, report) = match report {
            Ok(Some(r)) => r,
            Ok(None) => return 0,
            Err(e) => {
                worker::console_error!("ProductGate: could not write a report home: {e}");
                return 0;
            }
        };
        let reply = ask_home(&self.env, &home, report).await;
        if let Err(e) = &reply {
            worker::console_error!("ProductGate: home {home} did not answer a report: {e}");
        }
        let drains = reply.as_ref().map_or(0, |r| r.drains);
        let applied =
            self.object
                .borrow_mut()
                .handle_home_reply(&mut self.store(), now_ms(), reply);
        if let Err(e) = applied {
            worker::console_error!("ProductGate: could not write home's reply: {e}");
        }
        drains
    }

    /// Moves the alarm earlier if the object asks for it.
    async fn arm(&self) -> worker::Result<()> {
        let want = self.object.borrow().alarm_to_set(now_ms());
        if let Some(t) = want {
            let at = js_sys::Date::new(&JsValue::from_f64(t as f64));
            self.state
                .storage()
                .set_alarm(ScheduledTime::new(at))
                .await?;
            self.object.borrow_mut().alarm_set(t);
        }
        Ok(())
    }

    /// Forwards the outbox to the origin, a batch at a time, until it is
    /// empty, a delivery fails, or `BATCHES_PER_ALARM_MAX` batches went.
    /// The fetch lets other events run; no decision spans it: the batch was
    /// leased before, and the ack or nack is a new decision after, which the
    /// object voids if it reloaded meanwhile.
    async fn drain_outbox(&self) -> worker::Result<()> {
        let settings = config::settings(&self.env).ok();
        let forwarding = settings.as_ref().and_then(|s| s.forwarding.as_ref());
        for _ in 0..crate::limits::BATCHES_PER_ALARM_MAX {
            let lease = self.object.borrow_mut().lease(&mut self.store(), now_ms());
            let Some(lease) = lease.map_err(|e| worker::Error::RustError(e.0))? else {
                return Ok(());
            };
            let attempt = match forwarding {
                None => Attempt::NotConfigured,
                Some(f) => send(f, &lease.batch).await,
            };
            let result = delivery::classify(&lease.batch, attempt);
            let seed = (js_sys::Math::random() * u64::MAX as f64) as u64;
            let settled = self.object.borrow_mut().handle_delivery(
                &mut self.store(),
                lease,
                result,
                now_ms(),
                seed,
            );
            match settled.map_err(|e| worker::Error::RustError(e.0))? {
                DeliveryOutcome::Acked { refused, .. } => {
                    if refused > 0 {
                        worker::console_error!(
                            "ProductGate: the origin refused {refused} events; the gate and the origin disagree"
                        );
                    }
                }
                DeliveryOutcome::Failed { error, nacked } => {
                    if !error.retryable() {
                        worker::console_error!(
                            "ProductGate: outbox delivery needs attention: {}",
                            error.describe()
                        );
                    }
                    if !nacked {
                        worker::console_log!(
                            "ProductGate: a failed delivery's lease had lapsed; the batch is out again"
                        );
                    }
                    return Ok(());
                }
                DeliveryOutcome::AckRefused(outcome) => {
                    worker::console_error!("ProductGate: the core refused an ack: {outcome:?}");
                    return Ok(());
                }
                DeliveryOutcome::Stale => return Ok(()),
            }
        }
        Ok(())
    }
}

/// Sends one push to every socket of the object, if the state changed
/// since the last: one message, built once. Each socket's attachment
/// records the version it was sent, keeping its buyer.
fn broadcast(
    state: &DurableObjectState,
    object: &RefCell<ProductObject>,
    pusher: &RefCell<Pusher>,
    now: u64,
) {
    let (current, product_id) = {
        let o = object.borrow();
        (
            o.live_now(now),
            o.product_id().unwrap_or_default().to_string(),
        )
    };
    let Some((version, message)) = pusher.borrow_mut().push(current, &product_id, now) else {
        return;
    };
    // The fan-out runs in JavaScript: one call from wasm for every socket,
    // rather than several per socket. Either way the runtime's sends cost
    // most of it (`docs/live.md`).
    let reached = fan_out(state, &message, version as f64);
    pusher.borrow_mut().reached(reached as usize);
}

#[wasm_bindgen(inline_js = "
export function fan_out(state, message, version) {
  let sent = 0;
  for (const ws of state.getWebSockets()) {
    try {
      ws.send(message);
      const a = ws.deserializeAttachment() || {};
      a.version = version;
      ws.serializeAttachment(a);
      sent++;
    } catch (e) {
      // A socket that is closing refuses the send; its close event
      // follows, and nothing else needs doing.
    }
  }
  return sent;
}")]
extern "C" {
    /// Sends `message` to every socket of the object, recording `version`
    /// in each one's attachment (which keeps its buyer); returns how many
    /// took it.
    fn fan_out(state: &DurableObjectState, message: &str, version: f64) -> u32;
}

use crate::limits::HOME_RECHECK_MS;

/// Sends `cmd` to the object named `name` (Durable Object to Durable
/// Object, inside the Worker, by RPC as the edge sends its commands).
/// Reads the answer's JSON within `timeout_ms`.
async fn exchange<T: serde::de::DeserializeOwned>(
    env: &Env,
    name: &str,
    cmd: &Command,
    timeout_ms: u64,
) -> Result<T, String> {
    let exchange = async {
        let mut resp = rpc::send(env, name, cmd)
            .await
            .map(Response::from)
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{status}: {text}"));
        }
        serde_json::from_str::<T>(&text).map_err(|e| e.to_string())
    };
    let timeout = Delay::from(Duration::from_millis(timeout_ms));
    let outcome = match select(pin!(exchange), pin!(timeout)).await {
        Either::Left((answer, _)) => answer,
        Either::Right(_) => Err("no answer in time".into()),
    };
    outcome
}

/// Sends a stock shard's report to its product's home object, and reads
/// its reply.
async fn ask_home(env: &Env, home: &str, report: ShardReport) -> Result<ShardReply, String> {
    let cmd = Command::Report {
        product_id: home.to_string(),
        report,
    };
    exchange(env, home, &cmd, crate::limits::HOME_CALL_TIMEOUT_MS).await
}

/// Sends home's push to its stock shard `at`, and reads the answer.
async fn push_to_shard(
    env: &Env,
    product_id: &str,
    at: ShardAt,
    push: HomePush,
) -> Result<ShardAnswer, String> {
    let name = crate::protocol::shard_object(product_id, at.index());
    let cmd = Command::Push {
        product_id: product_id.to_string(),
        at,
        push,
    };
    exchange(env, &name, &cmd, crate::limits::PUSH_TIMEOUT_MS).await
}

/// The origin's route for batches; the signature covers it.
const BATCH_PATH: &str = "/v1/batches";

/// Sends one signed batch and reports what happened, without judging it.
async fn send(forwarding: &Forwarding, batch: &Batch) -> Attempt {
    let body = match serde_json::to_vec(batch) {
        Ok(b) => b,
        Err(e) => return Attempt::Encode(e.to_string()),
    };
    let signed = signing::sign(
        &forwarding.keys,
        &signing::Request {
            purpose: Purpose::Forward,
            method: "POST",
            path: BATCH_PATH,
            body: &body,
        },
        now_ms(),
    );
    let request = || -> worker::Result<Request> {
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        for (name, value) in signed.headers() {
            headers.set(name, &value)?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(headers)
            .with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
        let url = format!("{}{BATCH_PATH}", forwarding.origin_url);
        Request::new_with_init(&url, &init)
    };
    let req = match request() {
        Ok(r) => r,
        Err(e) => return Attempt::Encode(e.to_string()),
    };
    let controller = AbortController::default();
    let signal = controller.signal();
    let fetcher = Fetch::Request(req);
    // The answer's body is inside the deadline too: an origin that sends
    // its headers and then stalls must not hold the alarm (and the lease).
    let exchange = async {
        let mut resp = fetcher
            .send_with_signal(&signal)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    };
    let timeout = Delay::from(Duration::from_millis(crate::limits::ORIGIN_TIMEOUT_MS));
    // Bound to a name, not returned from the `match`: the select's result
    // holds the unfinished future, which borrows `fetcher` and `signal`, and
    // a tail expression's temporaries would outlive them.
    let outcome = match select(pin!(exchange), pin!(timeout)).await {
        Either::Left((Ok((status, body)), _)) => Attempt::Answered { status, body },
        Either::Left((Err(e), _)) => Attempt::Network(e),
        Either::Right(_) => {
            controller.abort();
            Attempt::Timeout
        }
    };
    outcome
}

#[wasm_bindgen(inline_js = "
export function command(req, name) {
  return req.headers.get(name) ?? undefined;
}
export function next_tick(slot) {
  if (slot.tick === undefined) {
    slot.tick = new Promise((resolve) => setTimeout(() => {
      slot.tick = undefined;
      resolve();
    }, 0));
  }
  return slot.tick;
}
export function changed(slot) {
  if (slot.changed === undefined) {
    slot.changed = new Promise((resolve) => { slot.resolve = resolve; });
  }
  return slot.changed;
}
export function notify(slot) {
  const resolve = slot.resolve;
  slot.changed = slot.resolve = undefined;
  if (resolve !== undefined) resolve();
}")]
extern "C" {
    /// The command's header, read in one call across the boundary.
    fn command(req: &web_sys::Request, name: &str) -> Option<String>;

    /// The object's next tick: a promise that resolves on a timer of 0 ms,
    /// one for every command that arrives before it fires. `slot` (a plain
    /// object the gate keeps) holds the pending one; the timer clears it
    /// before resolving, so a command that arrives after it fired waits for
    /// the next.
    fn next_tick(slot: &js_sys::Object) -> js_sys::Promise;

    /// A promise that resolves at the next `notify` of `slot`, one for
    /// every waiter until then.
    fn changed(slot: &js_sys::Object) -> js_sys::Promise;

    /// Wakes every waiter on `slot`'s promise; a later `changed` makes a
    /// new one.
    fn notify(slot: &js_sys::Object);
}

// The class the runtime instantiates, exported by hand rather than by
// `#[durable_object]`: that macro converts every request into a
// `worker::Request` (its method, url, headers and `cf`, each a call across
// the boundary) and every answer back from a `worker::Response`, which this
// object's one internal caller never needs. The methods keep the runtime's
// names and signatures (`fetch`, `alarm`, the hibernation API's
// `webSocket*`).
#[wasm_bindgen(
    wasm_bindgen = ::worker::wasm_bindgen,
    wasm_bindgen_futures = ::worker::wasm_bindgen_futures,
    js_sys = ::worker::js_sys
)]
impl ProductGate {
    #[wasm_bindgen(constructor)]
    pub fn new(state: DurableObjectState, env: Env) -> ProductGate {
        let state = State::from(state);
        // A gate whose settings are refused answers every request with
        // `misconfigured` (see `fetch`); its object never decides anything.
        let id_secret = config::settings(&env)
            .map(|s| s.id_secret.clone())
            .unwrap_or_default();
        let object = Rc::new(RefCell::new(ProductObject::new(&id_secret, random_bytes())));
        let (slot, storage, mut store) = (object.clone(), state.storage(), DoSql::new(&state));
        // Viewers' pings are answered by the runtime, without waking the
        // object.
        if let Ok(pair) =
            worker::worker_sys::WebSocketRequestResponsePair::new(live::PING, live::PONG)
        {
            state.set_websocket_auto_response(&pair);
        }
        // Hold every event back until the gate is rebuilt from storage. A
        // load that fails leaves the object unloaded; the next event tries
        // again.
        let _init = state.block_concurrency_while(async move {
            if let Err(e) = slot.borrow_mut().ensure_loaded(&mut store) {
                worker::console_error!("ProductGate: could not load: {e}");
            }
            let alarm = storage.get_alarm().await?;
            slot.borrow_mut()
                .alarm_found(alarm.map(|t| t.max(0) as u64));
            Ok(())
        });
        ProductGate {
            state,
            env,
            object,
            batcher: RefCell::default(),
            tick: js_sys::Object::new(),
            pusher: Rc::default(),
            waiting: std::cell::Cell::new(false),
            changed: js_sys::Object::new(),
        }
    }

    pub async fn fetch(&self, req: web_sys::Request) -> Result<web_sys::Response, JsValue> {
        views::count_event();
        Ok(self.handle(req).await?)
    }

    /// A command of the Worker's, or of another object of the product,
    /// by Durable Object RPC (`rpc::send`): its JSON in, the command's
    /// answer out as a `Response`, decided by the same `handle_command` a
    /// watch's request goes through. The runtime offers this method
    /// because the entry module's class extends its `DurableObject`.
    pub async fn command(&self, text: String) -> Result<web_sys::Response, JsValue> {
        views::count_event();
        Ok(self.handle_command(Ok(text)).await?)
    }

    pub async fn alarm(&self) -> Result<JsValue, JsValue> {
        views::count_event();
        let expired = self
            .object
            .borrow_mut()
            .alarm(&mut self.store(), now_ms())
            .map_err(|e| worker::Error::RustError(e.0))?;
        self.after_change();
        if self.object.borrow().is_shard() && !self.waiting.get() {
            self.waiting.set(true);
            self.call_home(0, None).await;
            self.done_waiting();
        }
        self.drain_outbox().await?;
        self.arm().await?;
        Ok(JsValue::from(format!("expired {expired}")))
    }

    // Viewers only listen: a ping is answered by the runtime (see `new`),
    // and any other message closes the socket, so no viewer can make the
    // object work for it.

    #[wasm_bindgen(js_name = webSocketMessage)]
    pub async fn websocket_message(
        &self,
        ws: web_sys::WebSocket,
        _message: JsValue,
    ) -> Result<JsValue, JsValue> {
        views::count_event();
        ws.close_with_code_and_reason(live::CLOSE_POLICY, "viewers only listen")?;
        Ok(JsValue::NULL)
    }

    #[wasm_bindgen(js_name = webSocketClose)]
    pub async fn websocket_close(
        &self,
        ws: web_sys::WebSocket,
        _code: usize,
        _reason: String,
        _was_clean: bool,
    ) -> Result<JsValue, JsValue> {
        // Completes the closing handshake; the socket may already be gone.
        let _ = ws.close_with_code_and_reason(1000, "bye");
        Ok(JsValue::NULL)
    }

    #[wasm_bindgen(js_name = webSocketError)]
    pub async fn websocket_error(
        &self,
        _ws: web_sys::WebSocket,
        _error: JsValue,
    ) -> Result<JsValue, JsValue> {
        Ok(JsValue::NULL)
    }
}

impl ProductGate {
    async fn handle(&self, req: web_sys::Request) -> worker::Result<web_sys::Response> {
        // A request brings a watch, its command in a header (`rpc::send`);
        // every other command comes by RPC, to `command`.
        let text = command(&req, crate::protocol::COMMAND_HEADER)
            .ok_or_else(|| worker::Error::RustError("a request without its command".into()));
        self.handle_command(text).await
    }

    /// A command's JSON (or the error of reading it), decided and answered.
    async fn handle_command(
        &self,
        text: worker::Result<String>,
    ) -> worker::Result<web_sys::Response> {
        if config::settings(&self.env).is_err() {
            return http::problem(Problem::misconfigured());
        }
        let parsed =
            text.and_then(|t| serde_json::from_str::<Command>(&t).map_err(worker::Error::from));
        let cmd = match parsed {
            Ok(cmd) => cmd,
            // Only the Worker calls this object, with commands it built.
            Err(e) => {
                worker::console_error!("ProductGate: bad internal command: {e}");
                return http::respond(&Problem::internal().into());
            }
        };
        match &cmd {
            Command::Watch {
                product_id,
                buyer,
                client,
            } => return self.watch(product_id, buyer.clone(), client.clone()),
            // Between objects, answered outside any batch: a shard's report
            // may wait for drains, and a push must never wait for a batch.
            Command::Report { report, .. } => return self.answer_report(report.clone()).await,
            Command::Push {
                product_id,
                at,
                push,
            } => return self.answer_push(product_id, *at, push),
            _ => {}
        }
        // Group commit: wait one tick, so the commands that arrive in it
        // share a batch, then take this command's answer; the first request
        // to wake runs the batch for all of them.
        // wasm-bindgen runs this future to completion (JS cannot cancel
        // it), so every command id taken here is also claimed below.
        let id = self.batcher.borrow_mut().enqueue(cmd);
        // One timer for all the commands of a tick, not one each: a timer
        // event per request was a visible share of a read's time. The
        // promise only resolves (its value is `undefined`).
        let _ = JsFuture::from(next_tick(&self.tick)).await;
        let answer = loop {
            if let Some(answer) = self.batcher.borrow_mut().take_answer(id) {
                break answer;
            }
            self.run_batch().await;
        };
        match answer {
            Answer::Reply(reply) => http::respond(&reply),
            // Storage failed: nothing of the batch was stored or
            // acknowledged, the object reloads at its next event, and a
            // retry (after a jittered pause, so a crowd does not return at
            // once) is safe.
            Answer::Failed(_) => {
                http::respond(&Problem::unavailable(js_sys::Math::random()).into())
            }
        }
    }
}
