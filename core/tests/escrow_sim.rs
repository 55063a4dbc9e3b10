//! The escrow's simulator: one product's home and its K − 1 stock shards,
//! joined by a network that delays, drops, duplicates and reorders their
//! messages, with restarts of any object at any step and buyers spread
//! unevenly (one shard sees ten times the others' demand).
//!
//! After every step it checks that `Σ (held + sold) ≤ stock_total` over
//! every gate, each gate's own I1 and audit, that home's pool holds, that
//! each shard's escrow is within what home granted it, and that no buyer
//! holds more than the per-buyer limit. At the end (every hold expired,
//! every message delivered, the shards ticking) it checks that nothing is
//! stranded: a buyer asking at any shard gets a unit while any is
//! available anywhere, and every unit is accounted for (no undersell).
//!
//! `ESCROW_SIM_SEED`, `ESCROW_SIM_SEEDS` and `ESCROW_SIM_STEPS` choose the
//! run; a failure prints the line that replays it.

use std::collections::BTreeMap;

use flashgate_core::escrow::{ShardReply, ShardReport};
use flashgate_core::{
    Change, ConfigPatch, Escrow, Gate, Mode, NoArchive, ReserveOutcome, Row, RowKey,
};
use flashgate_testkit::{run_plan, Plan, Rng, Simulation};

const HOLD_TTL_MS: u64 = 2_000;
const PER_BUYER_MAX: u32 = 3;

/// A message on the network between home and a shard.
#[derive(Clone, Debug)]
enum Message {
    Report(ShardReport),
    // Boxed: a reply carries the whole waiting room (its record included).
    Reply { to: u16, reply: Box<ShardReply> },
}

/// An object: its gate and the rows it has written.
struct Object {
    gate: Gate,
    stored: BTreeMap<RowKey, Row>,
}

impl Object {
    fn new(gate: Gate) -> Object {
        let mut o = Object {
            gate,
            stored: BTreeMap::new(),
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

    /// kill -9 and start again: memory is rebuilt from what was written.
    fn restart(&mut self) {
        self.gate = Gate::restore(self.stored.values().cloned())
            .unwrap_or_else(|e| panic!("restore failed: {e:?}"));
    }
}

struct Sim {
    rng: Rng,
    now_ms: u64,
    shards: u16,
    /// Index 0 is home.
    objects: Vec<Object>,
    network: Vec<(u64, Message)>,
    /// Each buyer's shard, and the holds it was given: (shard, id).
    buyers: Vec<u16>,
    holds: Vec<(usize, u16, u64)>,
    next_key: u64,
    /// The shard with ten times the others' buyers.
    hot: u16,
    counts: Summary,
}

#[derive(Default, Debug, Clone, Copy)]
struct Summary {
    reserved: u64,
    sold_out: u64,
    sync_calls: u64,
    reports: u64,
    dropped: u64,
    duplicated: u64,
    restarts: u64,
    reclaims: u64,
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
        let buyers = (0..rng.range(5, 60)).map(|_| 0).collect::<Vec<_>>();
        let hot = rng.below(u64::from(shards)) as u16;
        let mut sim = Sim {
            rng,
            now_ms: 1,
            shards,
            objects,
            network: Vec::new(),
            buyers,
            holds: Vec::new(),
            next_key: 0,
            hot,
            counts: Summary::default(),
        };
        // One shard gets ten times the buyers of each other one.
        for b in 0..sim.buyers.len() {
            let weight = u64::from(shards) - 1 + 10;
            let draw = sim.rng.below(weight);
            sim.buyers[b] = if draw < 10 {
                sim.hot
            } else {
                let others: Vec<u16> = (0..shards).filter(|&s| s != sim.hot).collect();
                others[(draw - 10) as usize % others.len()]
            };
        }
        sim
    }

    fn send(&mut self, message: Message) {
        let at = self.now_ms + self.rng.range(0, 400);
        self.network.push((at, message));
    }

    /// Shard `i` calls home for `needed` units (0: a tick).
    fn call_home(&mut self, i: u16, needed: u64) {
        let o = &mut self.objects[usize::from(i)];
        if let Some(report) = o.gate.poll_report(self.now_ms, needed) {
            // The debit of a return is written before the report leaves.
            o.write();
            self.counts.reports += 1;
            self.send(Message::Report(report));
        }
    }

    fn deliver(&mut self, k: usize) {
        let (_, message) = self.network.swap_remove(k);
        match message {
            Message::Report(report) => {
                let home = &mut self.objects[0];
                let reply = home
                    .gate
                    .handle_shard_report(self.now_ms, &report)
                    .unwrap_or_else(|e| panic!("home refused {report:?}: {e:?}"));
                home.write();
                if reply.reclaim > 0 {
                    self.counts.reclaims += 1;
                }
                self.send(Message::Reply {
                    to: report.index,
                    reply: Box::new(reply),
                });
            }
            Message::Reply { to, reply } => {
                let o = &mut self.objects[usize::from(to)];
                let again = o.gate.handle_shard_reply(self.now_ms, &reply);
                o.write();
                if again {
                    self.call_home(to, 0);
                }
            }
        }
    }

    fn reserve(&mut self, buyer: usize, quantity: u32) -> ReserveOutcome {
        let shard = self.buyers[buyer];
        let o = &mut self.objects[usize::from(shard)];
        if o.gate.must_call_home(self.now_ms, u64::from(quantity)) {
            // The buyer waits for the call home; in this model it retries
            // later, as the edge's client does on "none available now".
            self.counts.sync_calls += 1;
            self.call_home(shard, u64::from(quantity));
            // The reply is still on its way: a shard that never heard from
            // home cannot decide; one that did decides on what it has.
            if self.objects[usize::from(shard)]
                .gate
                .must_call_home(self.now_ms, 0)
            {
                return ReserveOutcome::SoldOut;
            }
        }
        let now = self.now_ms;
        self.next_key += 1;
        let key = format!("k{}", self.next_key);
        let o = &mut self.objects[usize::from(shard)];
        let outcome =
            o.gate
                .handle_reserve(&NoArchive, now, &format!("b{buyer}"), &key, quantity, None);
        o.write();
        match &outcome {
            ReserveOutcome::Reserved { reservation_id, .. } => {
                self.counts.reserved += 1;
                self.holds.push((buyer, shard, *reservation_id));
            }
            ReserveOutcome::SoldOut | ReserveOutcome::InsufficientStock { .. } => {
                self.counts.sold_out += 1
            }
            _ => {}
        }
        outcome
    }

    fn tick_all(&mut self) {
        for i in 0..self.shards {
            let o = &mut self.objects[usize::from(i)];
            o.gate.handle_timeout(self.now_ms);
            o.write();
            if i > 0 {
                self.call_home(i, 0);
            }
        }
    }

    /// Units each gate keeps, and the pool's view.
    fn check_sums(&self) {
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            panic!("home lost its pool");
        };
        pool.assert_escrow();
        let total = pool.stock_total;
        let mut committed = 0;
        let mut escrowed = 0;
        for (i, o) in self.objects.iter().enumerate() {
            o.gate
                .audit(&NoArchive)
                .unwrap_or_else(|e| panic!("shard {i}: {e}"));
            let own_total = own_stock(&o.gate);
            committed += own_held_sold(&o.gate);
            escrowed += own_total;
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

    /// A shard with nothing in flight and no reason to report has told
    /// home its levels as they are: home's figures for the product lag a
    /// shard only while a report is due or on its way.
    fn check_reported(&self) {
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            unreachable!()
        };
        for (i, o) in self.objects.iter().enumerate().skip(1) {
            let in_flight = self.network.iter().any(|(_, m)| match m {
                Message::Report(r) => usize::from(r.index) == i,
                Message::Reply { to, .. } => usize::from(*to) == i,
            });
            if in_flight || o.gate.poll_report_at(self.now_ms).is_some() {
                continue;
            }
            let s = o.gate.stats(self.now_ms);
            let seen = pool.shards[i].levels;
            assert_eq!(
                (seen.available, seen.held, seen.sold),
                (s.available, s.held, s.sold),
                "shard {i} is quiet, and home's view of it is stale: home has {:?}, the shard {:?}",
                pool.shards[i],
                o.gate.escrow()
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
}

/// The units a gate may sell: its own stock total (home's escrow, a
/// shard's, or a single product's).
fn own_stock(gate: &Gate) -> u64 {
    match gate.escrow() {
        Escrow::Home(pool) => pool.shards[0].granted - pool.shards[0].returned,
        Escrow::Shard(ledger) => ledger.grants_applied - ledger.returns_sent,
        Escrow::Single => gate.stock_total(),
    }
}

fn own_held_sold(gate: &Gate) -> u64 {
    let mut n = 0;
    for row in gate.rows() {
        if let Row::Reservation(r) = row {
            if matches!(
                r.state,
                flashgate_core::HoldState::Held | flashgate_core::HoldState::Confirmed
            ) {
                n += u64::from(r.quantity);
            }
        }
    }
    n
}

impl Simulation for Sim {
    type Summary = Summary;

    fn step(&mut self) -> String {
        self.now_ms += self.rng.range(0, 60);
        match self.rng.below(100) {
            0..=39 => {
                let buyer = self.rng.below(self.buyers.len() as u64) as usize;
                let q = self.rng.range(1, 2) as u32;
                let outcome = self.reserve(buyer, q);
                format!(
                    "reserve b{buyer} x{q} at shard {}: {outcome:?}",
                    self.buyers[buyer]
                )
            }
            40..=49 if !self.holds.is_empty() => {
                let k = self.rng.below(self.holds.len() as u64) as usize;
                let (buyer, shard, id) = self.holds.swap_remove(k);
                let now = self.now_ms;
                let o = &mut self.objects[usize::from(shard)];
                let outcome = if self.rng.chance(70) {
                    format!(
                        "{:?}",
                        o.gate
                            .handle_confirm(&NoArchive, now, id, &format!("b{buyer}"), "pay")
                    )
                } else {
                    format!(
                        "{:?}",
                        o.gate
                            .handle_cancel(&NoArchive, now, id, &format!("b{buyer}"))
                    )
                };
                o.write();
                format!("settle hold {id} of b{buyer} at shard {shard}: {outcome}")
            }
            50..=59 if !self.network.is_empty() => {
                // Reordered: any message in flight may go first.
                let k = self.rng.below(self.network.len() as u64) as usize;
                let what = format!("{:?}", self.network[k].1);
                self.deliver(k);
                format!("deliver early {}", &what[..what.len().min(80)])
            }
            60..=69 if !self.network.is_empty() => {
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
                format!("deliver {n} due messages")
            }
            70..=74 if !self.network.is_empty() => {
                // A lost message is a failed call to the shard that made
                // it: its fetch home errs (or times out), and it says so.
                let k = self.rng.below(self.network.len() as u64) as usize;
                let (_, lost) = self.network.swap_remove(k);
                let shard = match lost {
                    Message::Report(r) => r.index,
                    Message::Reply { to, .. } => to,
                };
                self.objects[usize::from(shard)].gate.handle_call_failed();
                self.counts.dropped += 1;
                format!("drop a message of shard {shard}")
            }
            75..=77 if !self.network.is_empty() => {
                let k = self.rng.below(self.network.len() as u64) as usize;
                let copy = self.network[k].clone();
                self.network.push(copy);
                self.counts.duplicated += 1;
                "duplicate a message".into()
            }
            78..=89 => {
                self.tick_all();
                "tick every shard".into()
            }
            90..=93 => {
                let i = self.rng.below(u64::from(self.shards)) as usize;
                self.objects[i].restart();
                self.counts.restarts += 1;
                format!("restart shard {i}")
            }
            94 => {
                let units = self.rng.range(1, 10);
                let now = self.now_ms;
                let home = &mut self.objects[0];
                home.gate
                    .restock(&NoArchive, now, units)
                    .expect("a restock in range");
                home.write();
                format!("restock {units}")
            }
            95 => {
                let now = self.now_ms;
                let home = &mut self.objects[0];
                let mode = if home.gate.mode() == Mode::Active {
                    Mode::Paused
                } else {
                    Mode::Active
                };
                home.gate.set_mode(now, mode).expect("pause or resume");
                home.write();
                format!("home mode {mode:?}")
            }
            _ => {
                self.now_ms += self.rng.range(0, HOLD_TTL_MS);
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
        // is delivered, and the shards tick until nothing moves.
        let now = self.now_ms;
        let home = &mut self.objects[0];
        if home.gate.mode() != Mode::Active {
            home.gate.set_mode(now, Mode::Active).expect("resume");
            home.write();
        }
        let drain = |sim: &mut Sim| {
            for _ in 0..20 {
                sim.now_ms += flashgate_core::escrow::limits::REPORT_INTERVAL_MS;
                sim.tick_all();
                while !sim.network.is_empty() {
                    sim.deliver(0);
                }
            }
        };
        self.now_ms += HOLD_TTL_MS + 1;
        drain(&mut self);
        self.check_sums();
        // Nothing stranded: while any unit is available anywhere, a buyer
        // asking at any shard gets one, within a few rounds of retries.
        for shard in 0..self.shards {
            let available: u64 = product_available(&self);
            if available == 0 {
                break;
            }
            self.buyers.push(shard);
            let buyer = self.buyers.len() - 1;
            let mut got = false;
            for _ in 0..40 {
                if let ReserveOutcome::Reserved { .. } = self.reserve(buyer, 1) {
                    got = true;
                    break;
                }
                drain(&mut self);
            }
            assert!(
                got,
                "a buyer at shard {shard} got nothing while {available} units were available"
            );
            self.check_sums();
        }
        // And no undersell: with every message delivered, every unit is in
        // `U` or in a shard's gate.
        drain(&mut self);
        let Escrow::Home(pool) = self.objects[0].gate.escrow() else {
            unreachable!()
        };
        let escrowed: u64 = self.objects.iter().map(|o| own_stock(&o.gate)).sum();
        assert_eq!(
            escrowed + pool.unallocated(),
            pool.stock_total,
            "units lost in transit at quiescence"
        );
        // And home's figures for the product are the shards' own: every
        // change was reported.
        for (i, o) in self.objects.iter().enumerate().skip(1) {
            let s = o.gate.stats(self.now_ms);
            let seen = pool.shards[i].levels;
            assert_eq!(
                (seen.available, seen.held, seen.sold),
                (s.available, s.held, s.sold),
                "home's view of shard {i} is stale at quiescence"
            );
        }
        self.counts
    }
}

/// Units available in every gate, and `U`.
fn product_available(sim: &Sim) -> u64 {
    let Escrow::Home(pool) = sim.objects[0].gate.escrow() else {
        unreachable!()
    };
    let own: u64 = sim
        .objects
        .iter()
        .map(|o| own_stock(&o.gate) - own_held_sold(&o.gate))
        .sum();
    own + pool.unallocated()
}

#[test]
fn escrow_never_oversells_and_strands_nothing() {
    let plan = Plan::from_env("ESCROW_SIM", 300, 3_000);
    let runs = run_plan(&plan, Sim::new);
    let mut total = Summary::default();
    for s in &runs {
        total.reserved += s.reserved;
        total.sold_out += s.sold_out;
        total.sync_calls += s.sync_calls;
        total.reports += s.reports;
        total.dropped += s.dropped;
        total.duplicated += s.duplicated;
        total.restarts += s.restarts;
        total.reclaims += s.reclaims;
    }
    println!("{} seeds: {total:?}", runs.len());
    // The faults the run is about were all injected.
    assert!(total.reserved > 0 && total.dropped > 0 && total.duplicated > 0);
    assert!(total.restarts > 0 && total.reclaims > 0, "{total:?}");
}
