//! The escrow's simulator: one product's home and its K − 1 stock shards,
//! their shells as the Worker runs them, joined by a network that delays,
//! drops, duplicates and reorders their messages, with restarts of any
//! object at any step and buyers spread unevenly (one shard sees ten times
//! the others' demand).
//!
//! The shells are modelled as `src/wasm/object/product.rs` runs them: a
//! shard's batch of reserves that cannot be decided on what it has waits
//! for one call home (and times out); home parks a shard's ask while it
//! drains other shards, hands the ask in again after each answer, and
//! gives up at its deadline; home's own reserves wait for drains the same
//! way; a shard answers home's push at once, even while its own call is
//! out; an admin's change of mode is done only once every shard took it or
//! its lease ended.
//!
//! After every step it checks that `Σ (held + sold) ≤ stock_total` over
//! every gate, each gate's own I1 and audit, that home's pool holds, that
//! each shard's escrow is within what home granted it, and that no buyer
//! holds more than the per-buyer limit. Every `sold_out` (and every
//! `insufficient_stock`) is checked at the step it is given against one
//! counter of the whole product: the units neither held nor sold anywhere
//! (in a shard, in `U`, or in transit) may exceed what the answer claims
//! only by units that came back within `SOLD_OUT_LAG_MS`. Every reserve
//! decided after a pause is done must be refused. A quarter of the seeds
//! run on a network that loses nothing and restarts nothing, where no
//! reserve may be answered `unavailable`.
//!
//! At the end (every hold expired, every message delivered) it checks
//! that nothing is stranded (every unit is in `U` or a shard, and home's
//! view of each shard is the shard's own), that buyers asking one at a
//! time at every shard each get a unit while any is left, with no retry,
//! and that a product left alone sends no report at all.
//!
//! `ESCROW_SIM_SEED`, `ESCROW_SIM_SEEDS` and `ESCROW_SIM_STEPS` choose the
//! run; a failure prints the line that replays it.

use std::collections::{BTreeMap, VecDeque};

use flashgate_core::escrow::limits::SOLD_OUT_LAG_MS;
use flashgate_core::escrow::{HomePush, ShardReply, ShardReport};
use flashgate_core::{
    Change, ConfigPatch, Escrow, Gate, HomeStep, Mode, NoArchive, ReserveOutcome, Row, RowKey,
};
use flashgate_testkit::{run_plan, Plan, Rng, Simulation};

const HOLD_TTL_MS: u64 = 2_000;
const PER_BUYER_MAX: u32 = 3;
/// How long a shard's shell waits for home's reply.
const CALL_TIMEOUT_MS: u64 = 700;
/// How long home's shell waits for a drain's answer.
const PUSH_TIMEOUT_MS: u64 = 300;
/// How long home's shell holds an ask (or its own reserves) for drains
/// before it answers with what it knows.
const ASK_WAIT_MAX_MS: u64 = 450;

/// A message on the network between home and a shard.
#[derive(Clone, Debug)]
enum Message {
    Report(ShardReport),
    // Boxed: a reply and a push carry the whole waiting room.
    Reply {
        to: u16,
        reply: Box<ShardReply>,
    },
    Push {
        to: u16,
        push: Box<HomePush>,
        sent_at: u64,
    },
    PushAnswer {
        report: ShardReport,
        sent_at: u64,
        drain: bool,
    },
}

impl Message {
    /// The shard the message is from or to.
    fn shard(&self) -> u16 {
        match self {
            Message::Report(r) | Message::PushAnswer { report: r, .. } => r.index,
            Message::Reply { to, .. } | Message::Push { to, .. } => *to,
        }
    }
}

/// A buyer's reserve, waiting in a shell.
#[derive(Clone, Debug)]
struct Req {
    buyer: usize,
    key: String,
    quantity: u32,
}

/// A shard's call home, and the reserves that wait for it.
struct CallOut {
    seq: u64,
    deadline: u64,
    batch: Vec<Req>,
    /// Calls this batch has made (`CALL_ROUNDS_MAX` at most): a drain
    /// can take the units a reply said the shard had, before its batch
    /// is decided, and then it asks once more.
    round: u32,
}

/// The most calls home one batch makes (the Worker's policy).
const CALL_ROUNDS_MAX: u32 = 3;

/// An ask home holds while it drains, or home's own reserves.
struct Parked {
    report: Option<ShardReport>,
    batch: Vec<Req>,
    deadline: u64,
    drains: u32,
}

struct PushOut {
    to: u16,
    sent_at: u64,
    drain: bool,
    deadline: u64,
}

#[derive(Default)]
struct Shell {
    call: Option<CallOut>,
    queued: Vec<Req>,
    /// Home only.
    asks: Vec<Parked>,
    own: Option<Parked>,
    pushes: Vec<PushOut>,
}

/// An object: its gate, the rows it has written, and its shell.
struct Object {
    gate: Gate,
    stored: BTreeMap<RowKey, Row>,
    shell: Shell,
}

impl Object {
    fn new(gate: Gate) -> Object {
        let mut o = Object {
            gate,
            stored: BTreeMap::new(),
            shell: Shell::default(),
        };
        o.write();
        o
    }

    /// Writes what the last decision changed, as the object does in the
    /// same turn.
    fn write(&mut self) {
        for change in self.gate.poll_changes() {
            match change {
                Change::Put(row) => {
                    self.stored.insert(row.key(), row);
                }
                Change::Delete(key) => {
                    self.stored.remove(&key.into());
                }
            }
        }
    }

    /// kill -9 and start again: memory is rebuilt from what was written,
    /// and whatever the shell was waiting for is gone with it.
    fn restart(&mut self) {
        self.gate = Gate::restore(self.stored.values().cloned())
            .unwrap_or_else(|e| panic!("restore failed: {e:?}"));
        self.shell = Shell::default();
    }
}

struct Sim {
    rng: Rng,
    /// The shard with ten times the others' buyers.
    hot: u16,
    now_ms: u64,
    shards: u16,
    /// Index 0 is home.
    objects: Vec<Object>,
    network: Vec<(u64, Message)>,
    /// Each buyer's shard.
    buyers: Vec<u16>,
    holds: Vec<(usize, u16, u64)>,
    next_key: u64,
    /// A network that loses, duplicates and restarts nothing, and is fast.
    reliable: bool,
    /// Units that came back (a cancel, an expiry, a restock): when, and
    /// how many.
    returns: VecDeque<(u64, u64)>,
    /// The pause (or resume) in progress: its mode, and when it was done.
    mode_change: Option<(Mode, Option<u64>)>,
    counts: Summary,
    /// `ESCROW_SIM_TRACE=1` prints every event of a run.
    trace: bool,
}

#[derive(Default, Debug, Clone, Copy)]
struct Summary {
    reserved: u64,
    sold_out: u64,
    unavailable: u64,
    waits: u64,
    drains: u64,
    reports: u64,
    dropped: u64,
    duplicated: u64,
    restarts: u64,
    pauses_done: u64,
    reliable_seeds: u64,
    /// Sold-out answers on the reliable network.
    reliable_sold_out: u64,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let shards = rng.range(2, 8) as u16;
        let stock = rng.range(1, 120);
        let patch = ConfigPatch {
            stock_total: Some(stock),
            shards: Some(shards),
            per_buyer_max: Some(PER_BUYER_MAX),
            quantity_max: Some(2),
            hold_ttl_ms: Some(HOLD_TTL_MS),
            idem_window_ms: Some(1_000),
            attempts_per_window_max: Some(10_000),
            ..ConfigPatch::default()
        };
        let home = Gate::create(0, &patch).expect("a valid product");
        let mut objects = vec![Object::new(home)];
        for i in 1..shards {
            objects.push(Object::new(Gate::shard(i, shards)));
        }
        let hot = rng.below(u64::from(shards)) as u16;
        let mut buyers = Vec::new();
        for _ in 0..rng.range(5, 60) {
            buyers.push(buyer_shard(&mut rng, shards, hot));
        }
        let reliable = seed.is_multiple_of(4);
        Sim {
            hot,
            rng,
            now_ms: 1,
            shards,
            objects,
            network: Vec::new(),
            buyers,
            holds: Vec::new(),
            next_key: 0,
            reliable,
            returns: VecDeque::new(),
            mode_change: None,
            counts: Summary {
                reliable_seeds: u64::from(reliable),
                ..Summary::default()
            },
            trace: flashgate_testkit::trace("ESCROW_SIM"),
        }
    }

    fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("{:>7} ms  {}", self.now_ms, what());
        }
    }

    fn send(&mut self, message: Message) {
        self.note(|| format!("send {message:?}"));
        // Mostly fast; on the lossy network one message in seven is slow,
        // up to a second, past every wait for it.
        let delay = if self.reliable || self.rng.chance(85) {
            self.rng.range(0, 60)
        } else {
            self.rng.range(0, 1_000)
        };
        self.network.push((self.now_ms + delay, message));
    }

    // ----- the one-counter model --------------------------------------

    /// Units held or sold over every gate.
    fn committed(&self) -> u64 {
        self.objects.iter().map(|o| own_held_sold(&o.gate)).sum()
    }

    fn stock_total(&self) -> u64 {
        self.objects[0].gate.product_total()
    }

    /// Runs `f` on object `i` and writes what it changed.
    fn on<T>(&mut self, i: usize, f: impl FnOnce(&mut Gate, u64) -> T) -> T {
        // Expiries due are settled first, and logged as units that came
        // back, so that nothing `f` settles goes unseen.
        self.settle(i);
        let now = self.now_ms;
        let o = &mut self.objects[i];
        let t = f(&mut o.gate, now);
        o.write();
        t
    }

    /// Settles every gate's due expiries, logging what came back.
    fn settle(&mut self, i: usize) {
        let now = self.now_ms;
        let o = &mut self.objects[i];
        let before = own_held_sold(&o.gate);
        o.gate.handle_timeout(now);
        o.write();
        let after = own_held_sold(&o.gate);
        if after < before {
            self.returns.push_back((now, before - after));
        }
    }

    /// Units that came back in the last `SOLD_OUT_LAG_MS`.
    fn came_back_lately(&mut self) -> u64 {
        let horizon = self.now_ms.saturating_sub(SOLD_OUT_LAG_MS);
        while self.returns.front().is_some_and(|&(t, _)| t < horizon) {
            self.returns.pop_front();
        }
        self.returns.iter().map(|&(_, u)| u).sum()
    }

    /// An answer that no more than `claimed` units are available is true
    /// now, by one counter of the whole product.
    fn check_answer(&mut self, shard: u16, buyer: usize, outcome: &ReserveOutcome) {
        let claimed = match outcome {
            ReserveOutcome::SoldOut => 0,
            ReserveOutcome::InsufficientStock { available } => *available,
            _ => return,
        };
        let available = self.stock_total() - self.committed();
        let lately = self.came_back_lately();
        assert!(
            available <= claimed + lately,
            "b{buyer} at shard {shard} was told {outcome:?} while {available} units were \
             available in the product ({lately} came back in the last {SOLD_OUT_LAG_MS} ms)"
        );
    }

    // ----- a shard's shell --------------------------------------------

    fn reserve(&mut self, buyer: usize, quantity: u32) {
        let shard = self.buyers[buyer];
        self.next_key += 1;
        let req = Req {
            buyer,
            key: format!("k{}", self.next_key),
            quantity,
        };
        let o = &mut self.objects[usize::from(shard)];
        if shard == 0 {
            o.shell.queued.push(req);
            self.pump_home();
        } else {
            o.shell.queued.push(req);
            self.pump(shard);
        }
    }

    /// A shard's next batch: decided at once, or after a call home.
    fn pump(&mut self, shard: u16) {
        let i = usize::from(shard);
        if self.objects[i].shell.call.is_some() || self.objects[i].shell.queued.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.objects[i].shell.queued);
        self.call_or_decide(shard, batch, 0);
    }

    /// Calls home for `batch` if the shard cannot decide it on what it
    /// has (and the batch has calls left), else decides it.
    fn call_or_decide(&mut self, shard: u16, batch: Vec<Req>, round: u32) {
        let i = usize::from(shard);
        let need: u64 = batch.iter().map(|r| u64::from(r.quantity)).sum();
        self.settle(i);
        let now = self.now_ms;
        if round < CALL_ROUNDS_MAX && self.objects[i].gate.must_call_home(now, need) {
            let o = &mut self.objects[i];
            if let Some(report) = o.gate.poll_report(now, need) {
                o.write();
                o.shell.call = Some(CallOut {
                    seq: report.seq,
                    deadline: now + CALL_TIMEOUT_MS,
                    batch,
                    round: round + 1,
                });
                self.counts.reports += 1;
                self.counts.waits += 1;
                self.send(Message::Report(report));
                return;
            }
        }
        self.decide(shard, batch);
        self.pump(shard);
    }

    /// Decides a batch of reserves at a gate, checking every answer.
    fn decide(&mut self, shard: u16, batch: Vec<Req>) {
        let i = usize::from(shard);
        self.settle(i);
        for r in batch {
            let outcome = self.on(i, |g, now| {
                g.handle_reserve(
                    &NoArchive,
                    now,
                    &format!("b{}", r.buyer),
                    &r.key,
                    r.quantity,
                    None,
                )
            });
            self.check_answer(shard, r.buyer, &outcome);
            self.note(|| {
                format!(
                    "shard {shard} decides b{} x{}: {outcome:?}",
                    r.buyer, r.quantity
                )
            });
            match &outcome {
                ReserveOutcome::Reserved { reservation_id, .. } => {
                    if let Some((Mode::Paused, Some(done))) = self.mode_change {
                        panic!(
                            "b{} reserved at shard {shard} at {} ms, after the pause was done at {done} ms",
                            r.buyer, self.now_ms
                        );
                    }
                    self.counts.reserved += 1;
                    self.holds.push((r.buyer, shard, *reservation_id));
                }
                ReserveOutcome::SoldOut | ReserveOutcome::InsufficientStock { .. } => {
                    self.counts.sold_out += 1;
                    if self.reliable {
                        self.counts.reliable_sold_out += 1;
                    }
                }
                ReserveOutcome::Unavailable { .. } => {
                    self.counts.unavailable += 1;
                    assert!(
                        !self.reliable,
                        "b{} at shard {shard} was told unavailable on a network that lost nothing",
                        r.buyer
                    );
                }
                _ => {}
            }
        }
    }

    /// A shard's background report, if one is due.
    fn tick(&mut self, shard: u16) {
        let i = usize::from(shard);
        self.settle(i);
        let now = self.now_ms;
        let o = &mut self.objects[i];
        if o.shell.call.is_some() {
            return;
        }
        if let Some(report) = o.gate.poll_report(now, 0) {
            o.write();
            o.shell.call = Some(CallOut {
                seq: report.seq,
                deadline: now + CALL_TIMEOUT_MS,
                batch: Vec::new(),
                round: CALL_ROUNDS_MAX,
            });
            self.counts.reports += 1;
            self.send(Message::Report(report));
        }
    }

    // ----- home's shell -----------------------------------------------

    fn push(&mut self, to: u16, drain: bool) {
        let now = self.now_ms;
        let home = &mut self.objects[0];
        let Some(push) = home.gate.push_for(to, drain) else {
            return;
        };
        home.shell.pushes.push(PushOut {
            to,
            sent_at: now,
            drain,
            deadline: now + PUSH_TIMEOUT_MS,
        });
        if drain {
            self.counts.drains += 1;
        }
        self.send(Message::Push {
            to,
            push: Box::new(push),
            sent_at: now,
        });
    }

    /// Hands every parked ask in again: answered, or drains sent, or
    /// still waiting.
    fn poll_asks(&mut self) {
        let asks = std::mem::take(&mut self.objects[0].shell.asks);
        for mut ask in asks {
            let report = ask.report.clone().expect("an ask carries its report");
            let give_up = self.now_ms >= ask.deadline;
            self.settle(0);
            let step = self.on(0, |g, now| g.handle_shard_report(now, &report, give_up));
            match step.unwrap_or_else(|e| panic!("home refused {report:?}: {e:?}")) {
                HomeStep::Reply(mut reply) => {
                    reply.drains = ask.drains;
                    self.send(Message::Reply {
                        to: report.index,
                        reply,
                    });
                }
                HomeStep::Drain(list) => {
                    ask.drains += 1;
                    for j in list {
                        self.push(j, true);
                    }
                    self.objects[0].shell.asks.push(ask);
                }
                HomeStep::Wait => self.objects[0].shell.asks.push(ask),
            }
        }
    }

    /// Home's own reserves: decided once `U` covers them or the drains
    /// they need have answered.
    fn pump_home(&mut self) {
        self.settle(0);
        let now = self.now_ms;
        let shell = &mut self.objects[0].shell;
        if shell.own.is_none() {
            if shell.queued.is_empty() {
                return;
            }
            shell.own = Some(Parked {
                report: None,
                batch: std::mem::take(&mut shell.queued),
                deadline: now + ASK_WAIT_MAX_MS,
                drains: 0,
            });
        }
        let own = shell.own.as_ref().expect("set above");
        let need: u64 = own.batch.iter().map(|r| u64::from(r.quantity)).sum();
        let give_up = now >= own.deadline;
        match self.on(0, |g, now| g.poll_drains(now, need, give_up)) {
            Some(list) if list.is_empty() => {
                let own = self.objects[0].shell.own.take().expect("set above");
                self.decide(0, own.batch);
                self.pump_home();
            }
            Some(list) => {
                for j in list {
                    self.push(j, true);
                }
            }
            None => {}
        }
    }

    /// A pause or resume: pushed to every shard that has not taken it,
    /// and done once all have, or their leases ended.
    fn poll_mode_change(&mut self) {
        let Some((mode, None)) = self.mode_change else {
            return;
        };
        let now = self.now_ms;
        let home = &self.objects[0];
        let behind = home.gate.rules_behind();
        let pushed: Vec<u16> = home.shell.pushes.iter().map(|p| p.to).collect();
        for j in behind {
            if !pushed.contains(&j) {
                self.push(j, false);
            }
        }
        if self.objects[0].gate.rules_bind_at(now).is_none() {
            self.mode_change = Some((mode, Some(now)));
            if mode == Mode::Paused {
                self.counts.pauses_done += 1;
            }
        }
    }

    /// What home's shell does after any event: every parked ask and its
    /// own reserves handed in again (the shell wakes a waiting one on every
    /// change at home, and at least every `HOME_RECHECK_MS`), and the
    /// change of mode looked at.
    fn after_home_event(&mut self) {
        self.poll_asks();
        self.pump_home();
        // Home's own reserves may have released the endgame.
        self.poll_asks();
        self.poll_mode_change();
    }

    // ----- the network ------------------------------------------------

    fn deliver(&mut self, k: usize) {
        let (_, message) = self.network.swap_remove(k);
        self.note(|| format!("deliver {message:?}"));
        match message {
            Message::Report(report) => {
                let deadline = self.now_ms + ASK_WAIT_MAX_MS;
                self.objects[0].shell.asks.push(Parked {
                    report: Some(report),
                    batch: Vec::new(),
                    deadline,
                    drains: 0,
                });
                self.after_home_event();
            }
            Message::Reply { to, reply } => {
                let i = usize::from(to);
                self.on(i, |g, _| g.handle_shard_reply(&reply));
                let answers_call = self.objects[i]
                    .shell
                    .call
                    .as_ref()
                    .is_some_and(|c| c.seq == reply.seq);
                if answers_call {
                    let call = self.objects[i].shell.call.take().expect("checked");
                    self.call_or_decide(to, call.batch, call.round);
                }
            }
            Message::Push { to, push, sent_at } => {
                // Answered at once, even while the shard's own call is out:
                // a drain never waits behind a call home.
                let i = usize::from(to);
                let report = self.on(i, |g, now| g.handle_push(now, &push));
                let report = report.expect("a push reaches a shard");
                self.counts.reports += 1;
                self.send(Message::PushAnswer {
                    report,
                    sent_at,
                    drain: push.drain,
                });
            }
            Message::PushAnswer {
                report,
                sent_at,
                drain,
            } => {
                let shell = &mut self.objects[0].shell;
                let out = shell
                    .pushes
                    .iter()
                    .position(|p| p.to == report.index && p.sent_at == sent_at);
                // A late answer (its push timed out, or home restarted
                // since) still applies its counters, and proves nothing.
                let drain = match out {
                    Some(k) => {
                        shell.pushes.swap_remove(k);
                        drain
                    }
                    None => false,
                };
                self.on(0, |g, now| {
                    g.handle_push_answer(now, report.index, sent_at, drain, Some(&report))
                })
                .unwrap_or_else(|e| panic!("home refused {report:?}: {e:?}"));
                self.after_home_event();
            }
        }
    }

    /// Moves time on by `ms`. On the reliable network every message
    /// arrives when it is due, before any wait for it times out.
    fn advance(&mut self, ms: u64) {
        if !self.reliable {
            self.now_ms += ms;
            return;
        }
        let end = self.now_ms + ms;
        loop {
            // Waits are looked at again every few milliseconds, as the
            // shells poll them.
            let next = self.network.iter().map(|(t, _)| *t).min();
            let tick = (self.now_ms + 10).min(end);
            match next {
                Some(t) if t <= tick => {
                    self.now_ms = self.now_ms.max(t);
                    let k = (0..self.network.len())
                        .find(|&k| self.network[k].0 == t)
                        .expect("found above");
                    self.deliver(k);
                }
                _ if self.now_ms < end => self.now_ms = tick,
                _ => break,
            }
            self.timers();
        }
        self.now_ms = end;
    }

    /// Whatever timed out now: calls home, pushes, asks held too long.
    fn timers(&mut self) {
        let now = self.now_ms;
        for i in 1..self.objects.len() {
            if self.objects[i]
                .shell
                .call
                .as_ref()
                .is_some_and(|c| c.deadline <= now)
            {
                let call = self.objects[i].shell.call.take().expect("checked");
                self.on(i, |g, now| g.handle_call_failed(now));
                self.decide(i as u16, call.batch);
                self.pump(i as u16);
            }
        }
        let (late, kept): (Vec<PushOut>, Vec<PushOut>) =
            std::mem::take(&mut self.objects[0].shell.pushes)
                .into_iter()
                .partition(|p| p.deadline <= now);
        self.objects[0].shell.pushes = kept;
        for p in late {
            self.on(0, |g, now| {
                g.handle_push_answer(now, p.to, p.sent_at, p.drain, None)
            })
            .expect("a missing answer applies");
        }
        self.after_home_event();
    }

    fn tick_all(&mut self) {
        for i in 0..self.shards {
            if i == 0 {
                self.settle(0);
                self.after_home_event();
            } else {
                self.tick(i);
            }
        }
    }

    // ----- checks -----------------------------------------------------

    /// Units each gate keeps, and the pool's view.
    fn check_sums(&self) {
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            panic!("home lost its pool");
        };
        pool.assert_escrow();
        let total = pool.stock_total;
        let mut escrowed = 0;
        for (i, o) in self.objects.iter().enumerate() {
            o.gate
                .audit(&NoArchive)
                .unwrap_or_else(|e| panic!("shard {i}: {e}"));
            escrowed += own_stock(&o.gate);
            if let Escrow::Shard(ledger) = o.gate.escrow() {
                let account = &pool.shards[i];
                assert!(
                    ledger.grants_applied <= account.granted,
                    "shard {i} applied {} of {} granted",
                    ledger.grants_applied,
                    account.granted
                );
                assert!(
                    ledger.returns_sent >= account.returned,
                    "shard {i} sent {} returns, home took {}",
                    ledger.returns_sent,
                    account.returned
                );
            }
        }
        let committed = self.committed();
        assert!(
            committed <= total,
            "oversold: {committed} held or sold of {total}"
        );
        assert!(
            escrowed + pool.unallocated() <= total,
            "escrow broken: {escrowed} escrowed + U {} > {total}",
            pool.unallocated()
        );
    }

    /// Whether shard `i` is quiet: nothing on its way to or from it, no
    /// call or push out, and no report due.
    fn quiet(&self, i: usize) -> bool {
        let o = &self.objects[i];
        !self
            .network
            .iter()
            .any(|(_, m)| usize::from(m.shard()) == i)
            && o.shell.call.is_none()
            && !self.objects[0]
                .shell
                .pushes
                .iter()
                .any(|p| usize::from(p.to) == i)
            && o.gate.poll_report_at(self.now_ms).is_none()
    }

    /// A quiet shard has told home its levels as they are.
    fn check_reported(&self) {
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            unreachable!()
        };
        for i in 1..self.objects.len() {
            if !self.quiet(i) {
                continue;
            }
            let s = self.objects[i].gate.stats(self.now_ms);
            let seen = pool.shards[i].levels;
            assert_eq!(
                (seen.available, seen.held, seen.sold),
                (s.available, s.held, s.sold),
                "shard {i} is quiet, and home's view of it is stale: home has {:?}, the shard {:?}",
                pool.shards[i],
                self.objects[i].gate.escrow()
            );
        }
    }

    fn check_buyers(&self) {
        let mut units: BTreeMap<String, u32> = BTreeMap::new();
        for o in &self.objects {
            for row in o.gate.rows() {
                if let Row::Reservation(r) = row {
                    if matches!(
                        r.state,
                        flashgate_core::HoldState::Held | flashgate_core::HoldState::Confirmed
                    ) {
                        *units.entry(r.buyer).or_default() += r.quantity;
                    }
                }
            }
        }
        for (buyer, u) in units {
            assert!(u <= PER_BUYER_MAX, "{buyer} has {u} units");
        }
    }

    /// Runs time forward in report intervals, delivering everything, until
    /// nothing moves.
    fn quiesce(&mut self) {
        for _ in 0..200 {
            self.advance(100);
            self.timers();
            self.tick_all();
            for i in 1..self.shards {
                self.pump(i);
            }
            while let Some(k) = (0..self.network.len()).min_by_key(|&k| self.network[k].0) {
                self.now_ms = self.now_ms.max(self.network[k].0);
                self.deliver(k);
            }
            let busy = (1..self.objects.len()).any(|i| !self.quiet(i))
                || self.objects.iter().any(|o| !o.shell.queued.is_empty())
                || !self.objects[0].shell.asks.is_empty()
                || self.objects[0].shell.own.is_some()
                || !self.objects[0].shell.pushes.is_empty();
            if !busy {
                return;
            }
        }
        panic!("the escrow never came to rest");
    }
}

/// The units a gate may sell: its own stock total (home's escrow, a
/// shard's, or a single product's).
fn own_stock(gate: &Gate) -> u64 {
    match gate.escrow() {
        Escrow::Home(pool) => pool.shards[0].granted - pool.shards[0].returned,
        Escrow::Shard(ledger) => ledger.grants_applied - ledger.returns_sent,
        Escrow::Single => gate.escrowed(),
    }
}

/// A new buyer's shard: one shard gets ten times the buyers of each other.
fn buyer_shard(rng: &mut Rng, shards: u16, hot: u16) -> u16 {
    let draw = rng.below(u64::from(shards) - 1 + 10);
    let others: Vec<u16> = (0..shards).filter(|&s| s != hot).collect();
    if draw < 10 {
        hot
    } else {
        others[(draw - 10) as usize % others.len()]
    }
}

/// Units a gate itself holds or sold (home's `stats` sum every shard's;
/// its escrow stats keep its own as shard 0).
fn own_held_sold(gate: &Gate) -> u64 {
    match gate.escrow_overview() {
        Some(e) => e.per_shard[0].levels.held + e.per_shard[0].levels.sold,
        None => {
            let l = gate.levels(0);
            l.held + l.sold
        }
    }
}

impl Simulation for Sim {
    type Summary = Summary;

    fn step(&mut self) -> String {
        let ms = self.rng.range(0, 60);
        self.advance(ms);
        let faults = !self.reliable;
        match self.rng.below(100) {
            0..=39 => {
                // A third of the reserves come from buyers never seen, so
                // that demand outlasts the per-buyer limit and the sale
                // reaches its end.
                if self.rng.chance(33) {
                    let shard = buyer_shard(&mut self.rng, self.shards, self.hot);
                    self.buyers.push(shard);
                }
                let buyer = self.rng.below(self.buyers.len() as u64) as usize;
                let q = self.rng.range(1, 2) as u32;
                self.reserve(buyer, q);
                format!("reserve b{buyer} x{q} at shard {}", self.buyers[buyer])
            }
            40..=49 if !self.holds.is_empty() => {
                let k = self.rng.below(self.holds.len() as u64) as usize;
                let (buyer, shard, id) = self.holds.swap_remove(k);
                let confirm = self.rng.chance(70);
                let i = usize::from(shard);
                self.settle(i);
                let before = own_held_sold(&self.objects[i].gate);
                let outcome = self.on(i, |g, now| {
                    if confirm {
                        format!(
                            "{:?}",
                            g.handle_confirm(&NoArchive, now, id, &format!("b{buyer}"), "pay")
                        )
                    } else {
                        format!(
                            "{:?}",
                            g.handle_cancel(&NoArchive, now, id, &format!("b{buyer}"))
                        )
                    }
                });
                let after = own_held_sold(&self.objects[i].gate);
                if after < before {
                    self.returns.push_back((self.now_ms, before - after));
                }
                format!("settle hold {id} of b{buyer} at shard {shard}: {outcome}")
            }
            50..=59 if !self.network.is_empty() => {
                // Reordered: any message in flight may go first.
                let k = self.rng.below(self.network.len() as u64) as usize;
                let what = format!("{:?}", self.network[k].1);
                self.deliver(k);
                format!("deliver early {}", &what[..what.len().min(80)])
            }
            60..=69 => {
                // Every message due by now, in a random order.
                let mut n = 0;
                while let Some(k) = {
                    let due: Vec<usize> = (0..self.network.len())
                        .filter(|&k| self.network[k].0 <= self.now_ms)
                        .collect();
                    (!due.is_empty()).then(|| due[self.rng.below(due.len() as u64) as usize])
                } {
                    self.deliver(k);
                    n += 1;
                    if n > 200 {
                        break;
                    }
                }
                self.timers();
                format!("deliver {n} due messages, then the timers")
            }
            70..=74 if faults && !self.network.is_empty() => {
                // A lost message: its sender's wait times out.
                let k = self.rng.below(self.network.len() as u64) as usize;
                let (_, lost) = self.network.swap_remove(k);
                self.counts.dropped += 1;
                format!("drop a message of shard {}", lost.shard())
            }
            75..=77 if faults && !self.network.is_empty() => {
                let k = self.rng.below(self.network.len() as u64) as usize;
                let copy = self.network[k].clone();
                self.network.push(copy);
                self.counts.duplicated += 1;
                "duplicate a message".into()
            }
            78..=89 => {
                self.tick_all();
                self.timers();
                "tick every shard".into()
            }
            90..=92 if faults => {
                let i = self.rng.below(u64::from(self.shards)) as usize;
                self.objects[i].restart();
                self.counts.restarts += 1;
                format!("restart shard {i}")
            }
            93 if self.rng.chance(25) => {
                let units = self.rng.range(1, 10);
                self.on(0, |g, now| g.restock(&NoArchive, now, units))
                    .expect("a restock in range");
                self.returns.push_back((self.now_ms, units));
                self.after_home_event();
                format!("restock {units}")
            }
            95 if matches!(self.mode_change, None | Some((_, Some(_)))) => {
                let mode = if self.objects[0].gate.mode() == Mode::Active {
                    Mode::Paused
                } else {
                    Mode::Active
                };
                self.on(0, |g, now| g.set_mode(now, mode))
                    .expect("pause or resume");
                self.mode_change = Some((mode, None));
                self.poll_mode_change();
                format!("home mode {mode:?}")
            }
            _ => {
                let ms = self.rng.range(0, HOLD_TTL_MS);
                self.advance(ms);
                self.timers();
                self.tick_all();
                "time passes".into()
            }
        }
    }

    fn check(&mut self, _step: &str) {
        self.check_sums();
        self.check_buyers();
        self.check_reported();
    }

    fn finish(mut self) -> Summary {
        // Quiescence: the sale resumes, every hold expires, every message
        // is delivered, and the shards report until nothing moves.
        if self.objects[0].gate.mode() != Mode::Active {
            self.on(0, |g, now| g.set_mode(now, Mode::Active))
                .expect("resume");
        }
        self.mode_change = None;
        self.advance(HOLD_TTL_MS + 1);
        self.quiesce();
        // Reserves decided on the way hold units until they expire too.
        self.advance(HOLD_TTL_MS + 1);
        self.quiesce();
        // From here nothing is lost: what the faults left is settled.
        self.reliable = true;
        self.check_sums();
        // No undersell: every unit is in `U` or in a shard's gate.
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            unreachable!()
        };
        let escrowed: u64 = self.objects.iter().map(|o| own_stock(&o.gate)).sum();
        assert_eq!(
            escrowed + pool.unallocated(),
            pool.stock_total,
            "units lost in transit at quiescence"
        );
        self.check_reported();
        // A product left alone rests: a minute with no traffic sends no
        // report and no push.
        let reports = self.counts.reports;
        let drains = self.counts.drains;
        for _ in 0..600 {
            self.advance(100);
            self.timers();
            self.tick_all();
            assert!(self.network.is_empty(), "an idle product sent a message");
        }
        assert_eq!(
            (self.counts.reports, self.counts.drains),
            (reports, drains),
            "an idle product reported"
        );
        // Buyers one at a time, at every shard in turn: each gets a unit
        // while any is left anywhere, with no retry, and the first told
        // `sold_out` is told the truth.
        let mut shard = 0u16;
        for _ in 0..self.stock_total() + 2 {
            let available = self.stock_total() - self.committed();
            self.buyers.push(shard);
            let buyer = self.buyers.len() - 1;
            let before = self.counts;
            self.reserve(buyer, 1);
            self.quiesce();
            let got = self.counts.reserved - before.reserved;
            let refused = self.counts.sold_out - before.sold_out;
            // Paid at once, so that no unit comes back while the line goes on.
            while let Some((b, s, id)) = self.holds.pop() {
                self.on(usize::from(s), |g, now| {
                    g.handle_confirm(&NoArchive, now, id, &format!("b{b}"), "pay")
                });
            }
            if available > 0 {
                assert_eq!(
                    got, 1,
                    "a lone buyer at shard {shard} got nothing while {available} units were available"
                );
            } else {
                assert_eq!(refused, 1, "the last buyer was not told sold_out");
                break;
            }
            shard = (shard + 1) % self.shards;
        }
        self.check_sums();
        self.counts
    }
}

#[test]
fn escrow_never_oversells_never_lies_and_rests() {
    let plan = Plan::from_env("ESCROW_SIM", 300, 3_000);
    let runs = run_plan(&plan, Sim::new);
    let mut total = Summary::default();
    for s in &runs {
        total.reserved += s.reserved;
        total.sold_out += s.sold_out;
        total.unavailable += s.unavailable;
        total.waits += s.waits;
        total.drains += s.drains;
        total.reports += s.reports;
        total.dropped += s.dropped;
        total.duplicated += s.duplicated;
        total.restarts += s.restarts;
        total.pauses_done += s.pauses_done;
        total.reliable_seeds += s.reliable_seeds;
        total.reliable_sold_out += s.reliable_sold_out;
    }
    println!("{} seeds: {total:?}", runs.len());
    // The faults the run is about were all injected, and the endgame ran.
    assert!(total.reserved > 0 && total.dropped > 0 && total.duplicated > 0);
    assert!(
        total.restarts > 0 && total.drains > 0 && total.sold_out > 0 && total.pauses_done > 0,
        "{total:?}"
    );
}
