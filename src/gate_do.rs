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
use std::rc::Rc;

use flashgate_core::Gate;
use worker::{
    durable_object, js_sys, wasm_bindgen::JsValue, DurableObject, Env, Request, Response,
    ScheduledTime, State, WebSocket, WebSocketIncomingMessage,
};

use crate::api::Command;
use crate::problem::Problem;
use crate::service::{self, Reply};
use crate::{http, storage};

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
            let created = creating && inner.gate.is_some();
            let product_id = service::product_of(cmd).to_string();
            if created {
                inner.product_id = Some(product_id.clone());
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
            (reply, created.then_some(product_id))
        };
        self.persist(creating.as_deref())?;
        Ok(reply)
    }

    /// Sends what the outbox holds. Without an origin configured, the batch
    /// is nacked, so it waits with backoff and shows in the stats.
    fn drain_outbox(&self, now: u64) {
        let origin = self
            .env
            .var("ORIGIN_URL")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let mut inner = self.inner.borrow_mut();
        let Some(gate) = inner.gate.as_mut() else {
            return;
        };
        let batch = gate.poll_outbox(now, OUTBOX_BATCH_SIZE_MAX);
        if batch.is_empty() {
            return;
        }
        if origin.is_empty() {
            let seed = (js_sys::Math::random() * u64::MAX as f64) as u64;
            gate.nack_outbox(now, seed);
            inner.outbox_last_error = Some("no ORIGIN_URL is configured".into());
        }
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
        let cmd: Command = match req.json().await {
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
        self.drain_outbox(now);
        self.persist(None)?;
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
