//! `ProductGate`: the Durable Object of one product. A thin shell: it
//! rebuilds the core from storage, applies each command to it, writes the
//! rows the core changed, keeps the alarm on the core's next deadline, and
//! drains the outbox from the alarm.
//!
//! Correctness rests on three rules (ARCHITECTURE.md):
//! - Between a core decision and the write of its rows nothing is awaited;
//!   SQL writes are synchronous, so they commit together with the decision.
//! - No `RefCell` borrow is held across an `.await`.
//! - The alarm handler is idempotent: running it twice at the same instant
//!   does nothing the second time.

use std::cell::RefCell;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use flashgate_core::Gate;
use futures_util::future::{select, Either};
use worker::{
    durable_object, js_sys, wasm_bindgen::JsValue, AbortController, Delay, DurableObject, Env,
    Fetch, Headers, Method, Request, RequestInit, Response, ScheduledTime, State, WebSocket,
    WebSocketIncomingMessage,
};

use crate::api::Command;
use crate::problem::Problem;
use crate::service::{self, Reply};
use crate::{http, storage, wire};

/// The most outbox entries one alarm sends.
const OUTBOX_BATCH_SIZE_MAX: usize = flashgate_core::limits::OUTBOX_BATCH_SIZE_MAX;

#[derive(Default)]
struct Inner {
    gate: Option<Gate>,
    product_id: Option<String>,
    /// The alarm this object last set and that has not fired yet.
    alarm_at_ms: Option<u64>,
    /// Set when a write failed: memory may be ahead of storage, so the next
    /// event reloads from storage before deciding anything.
    poisoned: bool,
    /// Why the last outbox delivery failed, for the stats.
    outbox_last_error: Option<String>,
    outbox_last_success_ms: Option<u64>,
}

#[durable_object]
pub struct ProductGate {
    state: State,
    env: Env,
    inner: Rc<RefCell<Inner>>,
}

fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

impl ProductGate {
    /// Reloads the gate from storage. Synchronous: SQL reads do not await.
    fn reload(&self) -> worker::Result<()> {
        let loaded = storage::load(&self.state.storage().sql())?;
        let mut inner = self.inner.borrow_mut();
        inner.poisoned = false;
        match loaded {
            Some(l) => {
                inner.gate = Some(l.gate);
                inner.product_id = Some(l.product_id);
            }
            None => {
                inner.gate = None;
                inner.product_id = None;
            }
        }
        Ok(())
    }

    /// Writes the changes the last decision made. Called right after the
    /// decision, with nothing awaited in between.
    fn persist(&self, creating: Option<&str>) -> worker::Result<()> {
        let sql = self.state.storage().sql();
        let changes = {
            let mut inner = self.inner.borrow_mut();
            match inner.gate.as_mut() {
                Some(g) => g.take_changes(),
                None => return Ok(()),
            }
        };
        let written = creating
            .map_or(Ok(()), |id| storage::create(&sql, id))
            .and_then(|()| storage::write(&sql, &changes));
        if let Err(e) = written {
            // Memory is now ahead of storage. Forget it; the next event
            // rebuilds from what was stored.
            self.inner.borrow_mut().poisoned = true;
            return Err(e);
        }
        Ok(())
    }

    /// Moves the alarm earlier if the core's next deadline is earlier than
    /// the alarm already set. A later deadline needs nothing: the alarm
    /// fires, finds nothing due, and sets the next one.
    async fn arm(&self) -> worker::Result<()> {
        let want = {
            let inner = self.inner.borrow();
            let next = inner.gate.as_ref().and_then(Gate::poll_timeout);
            match (next, inner.alarm_at_ms) {
                (Some(t), Some(at)) if t >= at => None,
                (Some(t), _) => Some(t),
                (None, _) => None,
            }
        };
        if let Some(t) = want {
            // A deadline already passed (such as an outbox that is ready
            // now) means "as soon as possible"; the runtime wants a future
            // instant.
            let t = t.max(now_ms() + 1);
            let at = js_sys::Date::new(&JsValue::from_f64(t as f64));
            self.state
                .storage()
                .set_alarm(ScheduledTime::new(at))
                .await?;
            self.inner.borrow_mut().alarm_at_ms = Some(t);
        }
        Ok(())
    }

    fn command(&self, cmd: &Command) -> worker::Result<Reply> {
        if self.inner.borrow().poisoned {
            self.reload()?;
        }
        let now = now_ms();
        let (reply, creating) = {
            let mut inner = self.inner.borrow_mut();
            let creating = inner.gate.is_none();
            let reply = service::execute(&mut inner.gate, cmd, now);
            let created =
                (creating && inner.gate.is_some()).then(|| service::product_of(cmd).to_string());
            if let Some(id) = &created {
                inner.product_id = Some(id.clone());
            }
            let mut reply = reply;
            if let (Command::Stats { .. }, Some(obj)) = (cmd, reply.body.as_object_mut()) {
                let outbox = obj.get_mut("outbox").and_then(|o| o.as_object_mut());
                if let Some(o) = outbox {
                    o.insert("last_error".into(), inner.outbox_last_error.clone().into());
                    o.insert(
                        "last_success_ms".into(),
                        inner.outbox_last_success_ms.into(),
                    );
                }
            }
            (reply, created)
        };
        self.persist(creating.as_deref())?;
        Ok(reply)
    }

    /// Forwards the outbox to the origin, a batch at a time, until it is
    /// empty, a delivery fails, or `OUTBOX_BATCHES_PER_ALARM` batches went.
    /// The fetch to the origin lets other events run; no decision spans it:
    /// the batch was leased before, and the ack or nack is a new decision
    /// after, written at once.
    async fn drain_outbox(&self) -> worker::Result<()> {
        let origin = self
            .env
            .var("ORIGIN_URL")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let secret = self
            .env
            .secret("ORIGIN_HMAC_SECRET")
            .map(|v| v.to_string())
            .unwrap_or_default();
        for _ in 0..OUTBOX_BATCHES_PER_ALARM {
            let now = now_ms();
            let (batch, up_to) = {
                let mut inner = self.inner.borrow_mut();
                let product_id = inner.product_id.clone().unwrap_or_default();
                let Some(gate) = inner.gate.as_mut() else {
                    return Ok(());
                };
                let entries = gate.poll_outbox(now, OUTBOX_BATCH_SIZE_MAX);
                let Some(last) = entries.last() else {
                    return Ok(());
                };
                let up_to = last.seq;
                let stock_total = gate.stock_total();
                let orders = entries
                    .iter()
                    .map(|e| wire::Order {
                        reservation_id: format!("{product_id}:{}", e.reservation_id),
                        product_id: product_id.clone(),
                        buyer_id: e.buyer.to_string(),
                        quantity: e.quantity,
                        payment_ref: e.payment_ref.to_string(),
                        confirmed_at_ms: e.confirmed_at_ms,
                        stock_total,
                    })
                    .collect();
                (wire::Batch { orders }, up_to)
            };
            let delivered = if origin.is_empty() || secret.is_empty() {
                Err(DeliveryError::NotConfigured)
            } else {
                deliver(&origin, secret.as_bytes(), &batch).await
            };
            let now = now_ms();
            let done = {
                let mut inner = self.inner.borrow_mut();
                let Some(gate) = inner.gate.as_mut() else {
                    return Ok(());
                };
                match &delivered {
                    Ok(()) => {
                        gate.ack_outbox(up_to);
                    }
                    Err(_) => {
                        let seed = (js_sys::Math::random() * u64::MAX as f64) as u64;
                        gate.nack_outbox(now, seed);
                    }
                }
                match delivered {
                    Ok(()) => {
                        inner.outbox_last_success_ms = Some(now);
                        inner.outbox_last_error = None;
                        false
                    }
                    Err(e) => {
                        if !e.retryable() {
                            worker::console_error!(
                                "ProductGate: outbox delivery needs attention: {}",
                                e.describe()
                            );
                        }
                        inner.outbox_last_error = Some(e.describe());
                        true
                    }
                }
            };
            self.persist(None)?;
            if done {
                break;
            }
        }
        Ok(())
    }
}

/// How long one delivery to the origin may take before it counts as failed.
const ORIGIN_TIMEOUT_MS: u64 = 10_000;
/// Batches one alarm sends before yielding; the next alarm continues.
const OUTBOX_BATCHES_PER_ALARM: usize = 20;

/// Why a delivery failed, and whether retrying can help. Every failure is
/// retried with backoff all the same, because dropping a batch would lose
/// orders; the ones that cannot heal by themselves are logged as alerts.
enum DeliveryError {
    NotConfigured,
    Network(String),
    Timeout,
    Origin5xx(u16),
    Signature,
    Origin4xx(u16),
}

impl DeliveryError {
    fn retryable(&self) -> bool {
        matches!(
            self,
            DeliveryError::Network(_) | DeliveryError::Timeout | DeliveryError::Origin5xx(_)
        )
    }

    fn describe(&self) -> String {
        match self {
            DeliveryError::NotConfigured => {
                "no ORIGIN_URL or ORIGIN_HMAC_SECRET is configured".into()
            }
            DeliveryError::Network(e) => format!("network: {e}"),
            DeliveryError::Timeout => {
                format!("the origin did not answer within {ORIGIN_TIMEOUT_MS} ms")
            }
            DeliveryError::Origin5xx(s) => format!("the origin failed with {s}"),
            DeliveryError::Signature => {
                "the origin refused the signature (401): check ORIGIN_HMAC_SECRET and clocks".into()
            }
            DeliveryError::Origin4xx(s) => format!("the origin refused the batch with {s}"),
        }
    }
}

/// Sends one signed batch. Ok means the origin stored every order in it.
async fn deliver(origin: &str, secret: &[u8], batch: &wire::Batch) -> Result<(), DeliveryError> {
    let body = serde_json::to_vec(batch).map_err(|e| DeliveryError::Network(e.to_string()))?;
    let ts = now_ms();
    let headers = Headers::new();
    let set = |k: &str, v: &str| {
        headers
            .set(k, v)
            .map_err(|e| DeliveryError::Network(e.to_string()))
    };
    set("content-type", "application/json")?;
    set(wire::TIMESTAMP_HEADER, &ts.to_string())?;
    set(wire::SIGNATURE_HEADER, &wire::sign(secret, ts, &body))?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
    let url = format!("{}/v1/reservations/batch", origin.trim_end_matches('/'));
    let req =
        Request::new_with_init(&url, &init).map_err(|e| DeliveryError::Network(e.to_string()))?;
    let controller = AbortController::default();
    let signal = controller.signal();
    let fetcher = Fetch::Request(req);
    let fetch = fetcher.send_with_signal(&signal);
    let timeout = Delay::from(Duration::from_millis(ORIGIN_TIMEOUT_MS));
    let resp = match select(pin!(fetch), pin!(timeout)).await {
        Either::Left((resp, _)) => resp.map_err(|e| DeliveryError::Network(e.to_string()))?,
        Either::Right(_) => {
            controller.abort();
            return Err(DeliveryError::Timeout);
        }
    };
    match resp.status_code() {
        200..=299 => Ok(()),
        401 => Err(DeliveryError::Signature),
        s @ 400..=499 => Err(DeliveryError::Origin4xx(s)),
        s => Err(DeliveryError::Origin5xx(s)),
    }
}

impl DurableObject for ProductGate {
    fn new(state: State, env: Env) -> Self {
        let inner = Rc::new(RefCell::new(Inner::default()));
        let (slot, storage) = (inner.clone(), state.storage());
        // Hold every event back until the gate is rebuilt from storage.
        let _init = state.block_concurrency_while(async move {
            let loaded = storage::load(&storage.sql())?;
            let alarm = storage.get_alarm().await?;
            let mut inner = slot.borrow_mut();
            if let Some(l) = loaded {
                inner.gate = Some(l.gate);
                inner.product_id = Some(l.product_id);
            }
            inner.alarm_at_ms = alarm.map(|t| t.max(0) as u64);
            Ok(())
        });
        ProductGate { state, env, inner }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        // Text and serde_json, not `req.json()`: parsing in Rust is cheaper
        // than building a JS object and converting it field by field.
        let parsed = req
            .text()
            .await
            .and_then(|t| serde_json::from_str::<Command>(&t).map_err(worker::Error::from));
        let cmd = match parsed {
            Ok(cmd) => cmd,
            // Only the Worker calls this object, with commands it built.
            Err(e) => {
                worker::console_error!("ProductGate: bad internal command: {e}");
                return http::problem(Problem::internal());
            }
        };
        let reply = match self.command(&cmd) {
            Ok(reply) => reply,
            Err(e) => {
                worker::console_error!("ProductGate: {e}");
                return http::problem(Problem::internal());
            }
        };
        // The decision is committed; a failure to move the alarm must not
        // turn its answer into an error. The next request or alarm re-arms.
        if let Err(e) = self.arm().await {
            worker::console_error!("ProductGate: could not set the alarm: {e}");
        }
        http::respond(reply)
    }

    async fn alarm(&self) -> worker::Result<Response> {
        self.inner.borrow_mut().alarm_at_ms = None;
        if self.inner.borrow().poisoned {
            self.reload()?;
        }
        let now = now_ms();
        let expired = {
            let mut inner = self.inner.borrow_mut();
            inner.gate.as_mut().map_or(0, |g| g.handle_timeout(now))
        };
        self.persist(None)?;
        self.drain_outbox().await?;
        self.arm().await?;
        Response::ok(format!("expired {expired}"))
    }

    // This object speaks HTTP only. The handlers below exist because the
    // defaults panic, and a panic resets the whole wasm instance.

    async fn websocket_message(
        &self,
        ws: WebSocket,
        _message: WebSocketIncomingMessage,
    ) -> worker::Result<()> {
        ws.close(Some(1003), Some("ProductGate does not speak WebSocket"))
    }

    async fn websocket_close(
        &self,
        _ws: WebSocket,
        _code: usize,
        _reason: String,
        _was_clean: bool,
    ) -> worker::Result<()> {
        Ok(())
    }

    async fn websocket_error(&self, _ws: WebSocket, _error: worker::Error) -> worker::Result<()> {
        Ok(())
    }

    async fn connect(&self, _socket: worker::Socket) -> worker::Result<()> {
        Err(worker::Error::RustError(
            "ProductGate does not accept TCP connections".into(),
        ))
    }
}
