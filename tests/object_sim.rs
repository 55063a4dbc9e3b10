//! Deterministic simulation of the Durable Object shell (`ProductObject`)
//! over a storage that fails on demand and an origin that misbehaves.
//!
//! The core's own simulator (`core/tests/sim.rs`) checks the decisions
//! against a model. This one checks what the shell adds: that a reply is
//! only given for what storage holds, that a failed write poisons the object
//! and the next event reloads exactly what storage holds, that a delivery
//! answer arriving after a reload is void, that the alarm always covers the
//! next deadline, and that every confirmed order reaches the origin exactly
//! once in the end (I2), whatever failed on the way.
//!
//! Commands run in batches, as the Worker's group commit runs them: a write
//! or a commit fails at any point inside a batch, and then no command of it
//! is answered and none of its rows is stored; an eviction between batches
//! loses only the commands still waiting, which nobody was answered for.
//!
//! A reserve's 201 is sometimes lost on the way back, as a reset connection
//! loses it: the client sends the same request again at once, with the same
//! key, sometimes to a new instance. The retry must get the same answer,
//! marked replayed, and write nothing, so that it takes no more stock (I3).
//!
//! `cargo test --test object_sim` runs 100 seeds of 3,000 steps.
//! `OBJECT_SIM_SEED=n` runs one seed, `OBJECT_SIM_SEEDS=n` n seeds, and
//! `OBJECT_SIM_STEPS=n` sets the steps per seed (`flashgate_testkit::Plan`).
//! A failure prints its seed, its step and the line that reruns it.

use std::collections::{BTreeMap, BTreeSet};

use flashgate::ids::IdCodec;
use flashgate::object::delivery::{self, Attempt};
use flashgate::object::product::{DeliveryOutcome, Lease, ProductObject, Storage, StorageError};
use flashgate::protocol::Command;
use flashgate_core::escrow::limits::SOLD_OUT_LAG_MS;
use flashgate_core::escrow::{ShardReply, ShardReport};
use flashgate_core::ReserveKind;
use flashgate_core::{
    Archive, Bucket, Change, ConfigPatch, Counters, HistoryWrite, HoldState, HomeStep, ItemKey,
    OutboxEvent, ReservationRow, Row, RowKey,
};
use flashgate_wire::{Batch, BatchResult, Event, EventResult, EventStatus};

const SECRET: &[u8] = b"id-secret-0123456789abcdef0123456789";

use flashgate_testkit::{run_plan, Plan, Rng, Simulation};

/// Storage as a map of rows, as SQLite holds them, that can be told to fail
/// a write a few writes from now, its next commit, or its next load. A
/// failed write applies nothing, and a transaction that fails rolls back
/// every write inside it. Until the product is created there are no
/// tables, and reads fail as SQLite's would.
#[derive(Default)]
struct MemStorage {
    product_id: Option<String>,
    rows: BTreeMap<RowKey, Row>,
    /// Fail the write this many writes from now.
    fail_write_in: Option<u32>,
    fail_commits: u32,
    fail_loads: u32,
    /// Fail the next read of a paid record (the core's archive).
    fail_reads: u32,
    loads: u64,
    /// Transactions committed with the rows of more than one reservation
    /// in them: batches that carried several decisions.
    grouped_commits: u64,
    reservations_in_transaction: u32,
    /// The history's table: buckets by start, and their step.
    history: BTreeMap<u64, Bucket>,
    history_step: u64,
    /// History writes committed.
    history_writes: u64,
}

impl MemStorage {
    fn read(&mut self) -> Result<(), StorageError> {
        // As in SQLite, where the tables are made when the product is
        // (`sql::create`): a read before then fails. A map that answered
        // "nothing" here hid a batch that read before it wrote its
        // creation (tests/sql_storage.rs has that case).
        if self.product_id.is_none() {
            return Err(StorageError("no such table: reservations".into()));
        }
        if self.fail_reads > 0 {
            self.fail_reads -= 1;
            return Err(StorageError("injected read failure".into()));
        }
        Ok(())
    }
}

impl Storage for MemStorage {
    fn load(
        &mut self,
        each: &mut dyn FnMut(Row) -> Result<(), StorageError>,
    ) -> Result<Option<String>, StorageError> {
        if self.fail_loads > 0 {
            self.fail_loads -= 1;
            return Err(StorageError("injected load failure".into()));
        }
        self.loads += 1;
        if self.product_id.is_some() {
            // In the order `sql::load` reads them: the singletons, the
            // records kept in memory by id, the paid ones by buyer, the
            // outbox.
            let paid = |r: &Row| matches!(r, Row::Reservation(r) if r.state.paid());
            let mut rows: Vec<&Row> = self.rows.values().collect();
            rows.sort_by_key(|r| match r {
                Row::Reservation(x) if paid(r) => (2, x.buyer.clone(), x.id),
                Row::Reservation(x) => (1, String::new(), x.id),
                Row::Outbox(e) => (3, String::new(), e.seq),
                _ => (0, String::new(), 0),
            });
            for row in rows {
                each(row.clone())?;
            }
        }
        Ok(self.product_id.clone())
    }

    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let saved = (self.product_id.clone(), self.rows.clone());
        let saved_history = (self.history.clone(), self.history_step, self.history_writes);
        self.reservations_in_transaction = 0;
        let r = body(self).and_then(|t| {
            if self.fail_commits > 0 {
                self.fail_commits -= 1;
                return Err(StorageError("injected commit failure".into()));
            }
            Ok(t)
        });
        match r {
            Ok(_) if self.reservations_in_transaction > 1 => self.grouped_commits += 1,
            Ok(_) => {}
            Err(_) => {
                (self.product_id, self.rows) = saved;
                (self.history, self.history_step, self.history_writes) = saved_history;
            }
        }
        r
    }

    fn load_history(&mut self) -> Result<Option<(u64, Vec<Bucket>)>, StorageError> {
        Ok((!self.history.is_empty())
            .then(|| (self.history_step, self.history.values().cloned().collect())))
    }

    fn write_history(&mut self, w: &HistoryWrite) -> Result<(), StorageError> {
        if let Some(n) = self.fail_write_in.as_mut() {
            if *n == 0 {
                self.fail_write_in = None;
                return Err(StorageError("injected write failure".into()));
            }
            *n -= 1;
        }
        if w.replace {
            self.history.clear();
        }
        self.history_step = w.step_ms;
        for b in &w.buckets {
            self.history.insert(b.start_ms, b.clone());
        }
        self.history_writes += 1;
        Ok(())
    }

    fn paid(&mut self, id: u64) -> Result<Option<ReservationRow>, StorageError> {
        self.read()?;
        Ok(Archive::paid(&self.rows, id))
    }

    fn paid_by_key(
        &mut self,
        buyer: &str,
        idem_key: &str,
    ) -> Result<Option<ReservationRow>, StorageError> {
        self.read()?;
        Ok(Archive::paid_by_key(&self.rows, buyer, idem_key))
    }

    fn paid_of_buyer(&mut self, buyer: &str) -> Result<Vec<ReservationRow>, StorageError> {
        self.read()?;
        Ok(Archive::paid_of_buyer(&self.rows, buyer))
    }

    fn paid_units_max(&mut self) -> Result<u32, StorageError> {
        self.read()?;
        Ok(Archive::paid_units_max(&self.rows))
    }

    fn each_paid_buyer(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StorageError> {
        self.read()?;
        Archive::each_paid_buyer(&self.rows, each);
        Ok(())
    }

    fn all_paid(&mut self) -> Result<Vec<ReservationRow>, StorageError> {
        if self.product_id.is_none() {
            return Err(StorageError("no such table: reservations".into()));
        }
        Ok(Archive::all_paid(&self.rows))
    }

    fn write(&mut self, create: Option<&str>, changes: &[Change]) -> Result<(), StorageError> {
        if let Some(id) = create {
            assert!(self.product_id.is_none(), "a product is created once");
            self.product_id = Some(id.to_string());
        }
        assert!(self.product_id.is_some(), "rows written for no product");
        for change in changes {
            // Row by row, as `sql::write` runs one statement per row: an
            // injected failure can land after some of a batch's rows are
            // written, which the transaction must then roll back.
            if let Some(n) = self.fail_write_in.as_mut() {
                if *n == 0 {
                    self.fail_write_in = None;
                    return Err(StorageError("injected write failure".into()));
                }
                *n -= 1;
            }
            if matches!(
                change,
                Change::Put(Row::Reservation(_)) | Change::Delete(ItemKey::Reservation(_))
            ) {
                self.reservations_in_transaction += 1;
            }
            match change {
                Change::Put(row) => {
                    self.rows.insert(row.key(), row.clone());
                }
                Change::Delete(key) => {
                    let gone = self.rows.remove(&(*key).into());
                    assert!(gone.is_some(), "delete of absent {key:?}");
                }
            }
        }
        Ok(())
    }
}

/// The origin: orders by id, inserted once; voids applied once; stock
/// totals applied only forward by sequence.
#[derive(Default)]
struct Origin {
    /// Order id -> (quantity, voided).
    orders: BTreeMap<String, (u32, bool)>,
    /// (sequence, total) of the last stock event applied.
    stock: Option<(u64, u64)>,
    deliveries: u64,
    refused: u64,
}

impl Origin {
    /// Applies a batch idempotently and answers as the real origin would.
    fn ingest(&mut self, batch: &Batch) -> BatchResult {
        self.deliveries += 1;
        let results = batch
            .events
            .iter()
            .map(|e| {
                let status = match e {
                    Event::Stock {
                        seq, stock_total, ..
                    } => match self.stock {
                        Some((applied, _)) if applied >= *seq => EventStatus::Duplicate,
                        _ => {
                            self.stock = Some((*seq, *stock_total));
                            EventStatus::Applied
                        }
                    },
                    Event::Order {
                        reservation_id,
                        quantity,
                        ..
                    } => {
                        if self.orders.contains_key(reservation_id) {
                            EventStatus::Duplicate
                        } else {
                            self.orders
                                .insert(reservation_id.clone(), (*quantity, false));
                            EventStatus::Applied
                        }
                    }
                    Event::Void { reservation_id, .. } => {
                        match self.orders.get_mut(reservation_id) {
                            Some((_, true)) => EventStatus::Duplicate,
                            Some((_, voided)) => {
                                *voided = true;
                                EventStatus::Applied
                            }
                            None => {
                                self.refused += 1;
                                EventStatus::Refused
                            }
                        }
                    }
                };
                EventResult {
                    seq: e.seq(),
                    status,
                }
            })
            .collect();
        BatchResult { results }
    }
}

struct Sim {
    rng: Rng,
    now: u64,
    store: MemStorage,
    object: ProductObject,
    origin: Origin,
    /// Reservation ids a 201 acknowledged, with their buyer.
    reserved: BTreeMap<u64, String>,
    /// Reservation ids a confirm acknowledged.
    confirmed: BTreeSet<u64>,
    /// A lease taken and not settled yet: its delivery is "in flight".
    in_flight: Option<Lease>,
    key: u64,
    stale: u64,
    /// The stock total the last acknowledged admin answer showed: storage
    /// must never hold another, or an unacknowledged change leaked in.
    acked_total: Option<u64>,
    failed_writes: u64,
    reloads: u64,
    created: bool,
    /// Commands that arrived and wait for the next batch (group commit).
    pending: Vec<Command>,
    batches: u64,
    failed_batches: u64,
    /// Reserves whose 201 was lost and whose retry got it again.
    lost_answers_retried: u64,
    /// Reserve answers given (each one count in the gate's counters): in
    /// all, as of the last history write, and those whose counts a crash
    /// or an eviction took before a history write held them.
    reserve_answers: u64,
    reserve_answers_written: u64,
    reserve_answers_lost: u64,
    history_writes_seen: u64,
}

const PRODUCT: &str = "sim";

/// The most times a client sends a lost answer's request again: far more
/// than the faults a run injects at once.
const LOST_ANSWER_RETRIES_MAX: usize = 8;

fn codec() -> &'static IdCodec {
    static CODEC: std::sync::OnceLock<IdCodec> = std::sync::OnceLock::new();
    CODEC.get_or_init(|| IdCodec::new(SECRET, PRODUCT))
}

/// The origin's id of reservation `id`.
fn order(id: u64) -> String {
    format!("{PRODUCT}:{}", codec().encode(id))
}

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim {
            rng: Rng::new(seed),
            now: 1_000_000,
            store: MemStorage::default(),
            object: ProductObject::new(SECRET, seed.to_le_bytes().repeat(4).try_into().unwrap()),
            origin: Origin::default(),
            reserved: BTreeMap::new(),
            confirmed: BTreeSet::new(),
            in_flight: None,
            key: 0,
            stale: 0,
            acked_total: None,
            failed_writes: 0,
            reloads: 0,
            created: false,
            pending: Vec::new(),
            batches: 0,
            failed_batches: 0,
            lost_answers_retried: 0,
            reserve_answers: 0,
            reserve_answers_written: 0,
            reserve_answers_lost: 0,
            history_writes_seen: 0,
        }
    }

    fn buyer(&mut self) -> String {
        format!("b{}", self.rng.below(12))
    }

    /// A command arrives. It waits for the next batch, which runs now
    /// about half the time, as requests of one tick share a batch.
    fn command(&mut self, cmd: Command) -> String {
        self.pending.push(cmd);
        if self.pending.len() > self.rng.below(8) as usize || self.rng.chance(40) {
            self.flush()
        } else {
            format!("queued ({} waiting)", self.pending.len())
        }
    }

    /// Runs the waiting commands as one batch and checks every reply: all
    /// of them are answered, and each 2xx is stored; or none is answered,
    /// and storage holds none of the batch.
    fn flush(&mut self) -> String {
        let batch = std::mem::take(&mut self.pending);
        if batch.is_empty() {
            return "flush: nothing waiting".into();
        }
        let poisoned = self.object.is_poisoned();
        let loads = self.store.loads;
        let before = (self.store.product_id.clone(), self.store.rows.clone());
        let result = self.object.commands(&mut self.store, &batch, self.now);
        if poisoned && self.store.loads > loads {
            self.reloads += 1;
        }
        self.batches += 1;
        let replies = match result {
            Ok(replies) => replies,
            Err(e) => {
                self.failed_writes += 1;
                self.failed_batches += 1;
                self.memory_lost();
                assert!(
                    self.object.is_poisoned(),
                    "batch of {}: a failed write must poison",
                    batch.len()
                );
                assert!(
                    (self.store.product_id.clone(), self.store.rows.clone()) == before,
                    "batch of {}: a failed batch ({e}) left some of its rows stored",
                    batch.len()
                );
                return format!("batch of {} -> storage error", batch.len());
            }
        };
        assert_eq!(replies.len(), batch.len(), "one reply per command");
        self.answered(&batch, &replies);
        let mut out = format!("batch of {}:", batch.len());
        let mut lost = Vec::new();
        for (cmd, reply) in batch.iter().zip(replies) {
            out.push_str(&format!(" {}", self.acknowledged(cmd, &reply)));
            if matches!(cmd, Command::Reserve { .. }) && reply.status == 201 && self.rng.chance(25)
            {
                lost.push((cmd.clone(), reply));
            }
        }
        if !lost.is_empty() {
            out.push_str(&format!(" {}", self.retry_lost(lost)));
        }
        out
    }

    /// The client of each reserve in `lost` never saw its 201 (the
    /// connection reset on the way back), so it sends the same request
    /// again at once, with the same key; sometimes the object was evicted
    /// meanwhile and a new instance takes it. Each retry must get the first
    /// answer again, marked replayed, and write nothing: it takes no more
    /// stock. A retry whose own batch fails (an injected fault) got no
    /// answer either, and is sent again.
    fn retry_lost(&mut self, lost: Vec<(Command, flashgate::http::reply::Reply)>) -> String {
        let mut out = format!("{} answers lost;", lost.len());
        if self.rng.chance(30) {
            let entropy = self.rng.next_u64().to_le_bytes().repeat(4);
            self.object = ProductObject::new(SECRET, entropy.try_into().unwrap());
            self.in_flight = None;
            self.memory_lost();
            out.push_str(" evicted;");
        }
        let retries: Vec<Command> = lost.iter().map(|(cmd, _)| cmd.clone()).collect();
        // Each failure is an injected fault, which is spent once it fires.
        for _ in 0..LOST_ANSWER_RETRIES_MAX {
            let before = (self.store.product_id.clone(), self.store.rows.clone());
            let replies = match self.object.commands(&mut self.store, &retries, self.now) {
                Ok(replies) => replies,
                Err(e) => {
                    self.failed_writes += 1;
                    self.failed_batches += 1;
                    self.memory_lost();
                    assert!(self.object.is_poisoned(), "a failed retry must poison");
                    assert!(
                        (self.store.product_id.clone(), self.store.rows.clone()) == before,
                        "a failed retry ({e}) left rows stored"
                    );
                    out.push_str(" retry -> storage error;");
                    continue;
                }
            };
            for ((cmd, first), again) in lost.iter().zip(&replies) {
                assert!(
                    again.status == 200 && again.replayed && again.body == first.body,
                    "{cmd:?}: its 201 was lost and its retry with the same key got {} {} (replayed {}), not the first answer {}",
                    again.status,
                    again.body,
                    again.replayed,
                    first.body
                );
            }
            assert!(
                (self.store.product_id.clone(), self.store.rows.clone()) == before,
                "{} retries of lost answers wrote to storage: a replay takes nothing",
                retries.len()
            );
            self.lost_answers_retried += retries.len() as u64;
            self.answered(&retries, &replies);
            out.push_str(&format!(" {} retries -> the same answers;", retries.len()));
            return out;
        }
        panic!("{out} the retry never got an answer")
    }

    /// Checks that what `reply` acknowledged is stored, and remembers it.
    fn acknowledged(&mut self, cmd: &Command, reply: &flashgate::http::reply::Reply) -> String {
        let desc = format!("{cmd:?}");
        // What a 2xx acknowledged must be in storage now.
        if matches!(cmd, Command::Configure { .. } | Command::Restock { .. }) && reply.status < 300
        {
            self.acked_total = reply.body["stock_total"].as_u64();
        }
        match (cmd, reply.status) {
            (Command::Configure { .. }, 201) => self.created = true,
            (Command::Reserve { buyer, .. }, 201) => {
                let id: u64 = reply.body["reservation_id"]
                    .as_str()
                    .and_then(|s| codec().decode(s))
                    .expect("a reservation id");
                assert!(
                    self.stored_reservation(id).is_some(),
                    "{desc}: acknowledged hold {id} is not stored"
                );
                self.reserved.insert(id, buyer.clone());
            }
            (Command::Confirm { reservation_id, .. }, 200) => {
                // A void later in the same batch may already have refunded
                // it: a voided record still carries its payment.
                let r = self.stored_reservation(*reservation_id);
                assert!(
                    r.as_ref()
                        .is_some_and(|r| r.state.paid() && r.payment_ref.is_some()),
                    "{desc}: acknowledged confirmation is not stored: {r:?}"
                );
                self.confirmed.insert(*reservation_id);
            }
            (Command::Void { reservation_id, .. }, 200) => {
                let r = self.stored_reservation(*reservation_id);
                assert!(
                    r.is_some_and(|r| r.state == HoldState::Voided),
                    "{desc}: acknowledged void is not stored"
                );
            }
            _ => {}
        }
        format!("{desc} -> {};", reply.status)
    }

    fn stored_reservation(&self, id: u64) -> Option<&flashgate_core::ReservationRow> {
        match self.store.rows.get(&RowKey::Reservation(id)) {
            Some(Row::Reservation(r)) => Some(r),
            _ => None,
        }
    }

    /// The shell's arm(): set the alarm the object asks for.
    fn arm(&mut self) {
        let before = self.object.alarm_at_ms();
        if let Some(t) = self.object.alarm_to_set(self.now) {
            assert!(t > self.now, "an alarm in the past");
            // Only ever earlier: an alarm pushed later at every batch could
            // be kept from firing by steady traffic.
            if let Some(b) = before {
                assert!(t < b, "the alarm at {b} was pushed later, to {t}");
            }
            self.object.alarm_set(t);
        }
    }

    /// Sends the in-flight lease and settles it, as the drain does after
    /// its await.
    fn deliver(&mut self) -> String {
        let Some(lease) = self.in_flight.take() else {
            return "deliver: nothing in flight".into();
        };
        let attempt = match self.rng.below(10) {
            0 => Attempt::Network("reset".into()),
            1 => Attempt::Timeout,
            2 => Attempt::Answered {
                status: 503,
                body: vec![],
            },
            3 => {
                // Committed, but the answer was lost on the way back.
                self.origin.ingest(&lease.batch);
                Attempt::Answered {
                    status: 500,
                    body: vec![],
                }
            }
            _ => {
                let answer = self.origin.ingest(&lease.batch);
                Attempt::Answered {
                    status: 200,
                    body: serde_json::to_vec(&answer).expect("encodes"),
                }
            }
        };
        let orders = lease.batch.events.len();
        let result = delivery::classify(&lease.batch, attempt);
        let seed = self.rng.next_u64();
        match self
            .object
            .handle_delivery(&mut self.store, lease, result, self.now, seed)
        {
            Ok(DeliveryOutcome::Stale) => {
                self.stale += 1;
                format!("deliver {orders}: stale")
            }
            Ok(s) => {
                if let DeliveryOutcome::Acked { refused, .. } = s {
                    assert_eq!(refused, 0, "the origin never refuses");
                }
                format!("deliver {orders}: {s:?}")
            }
            Err(_) => {
                self.failed_writes += 1;
                assert!(self.object.is_poisoned());
                format!("deliver {orders}: storage error")
            }
        }
    }

    /// One random event, described.
    fn operate(&mut self) -> String {
        // Faults are injected before an event, as a disk would fail.
        if self.rng.chance(4) {
            // Often inside a batch, after some of its rows were written.
            self.store.fail_write_in = Some(self.rng.below(6) as u32);
        }
        if self.rng.chance(1) {
            self.store.fail_commits = 1;
        }
        if self.rng.chance(1) {
            self.store.fail_loads = 1;
        }
        if self.rng.chance(3) {
            // A read of a paid record fails: the decision that asked is
            // thrown away as a failed write is.
            self.store.fail_reads = 1;
        }
        let desc = match self.rng.below(100) {
            0..=2 if !self.created || self.rng.chance(30) => {
                let patch = ConfigPatch {
                    stock_total: Some(self.rng.below(30)),
                    per_buyer_max: Some(3),
                    quantity_max: Some(2),
                    hold_ttl_ms: Some(500 + self.rng.below(3_000)),
                    idem_window_ms: Some(self.rng.below(2_000)),
                    ..ConfigPatch::default()
                };
                self.command(Command::Configure {
                    product_id: PRODUCT.into(),
                    patch,
                })
            }
            0..=39 => {
                self.key += 1;
                let key = if self.rng.chance(10) {
                    format!("k{}", self.key / 2)
                } else {
                    format!("k{}", self.key)
                };
                let buyer = self.buyer();
                let quantity = 1 + self.rng.below(2) as u32;
                self.command(Command::Reserve {
                    product_id: PRODUCT.into(),
                    buyer,
                    idem_key: key,
                    quantity,
                    ticket: None,
                })
            }
            40..=54 => {
                let (id, buyer) = self.some_reservation();
                self.command(Command::Confirm {
                    product_id: PRODUCT.into(),
                    buyer,
                    reservation_id: id,
                    payment_ref: format!("pay-{id}"),
                })
            }
            55..=59 => {
                let (id, buyer) = self.some_reservation();
                self.command(Command::Cancel {
                    product_id: PRODUCT.into(),
                    buyer,
                    reservation_id: id,
                })
            }
            60..=62 => {
                let units = 1 + self.rng.below(5);
                self.command(Command::Restock {
                    product_id: PRODUCT.into(),
                    units,
                })
            }
            63 if self.rng.chance(50) => {
                // The edge refreshes its snapshot and reports tickets; the
                // waiting room's row is written like any other.
                let mut arrivals = flashgate_core::Arrivals::default();
                for _ in 0..self.rng.below(5) {
                    let t = flashgate_core::Ticket {
                        arrived_ms: self.now.saturating_sub(self.rng.below(3_000)),
                        tiebreak: self.rng.next_u64() as u32,
                        infinite_queue: false,
                    };
                    arrivals.add(&t, None);
                }
                self.command(Command::Sync {
                    product_id: PRODUCT.into(),
                    arrivals,
                })
            }
            63 => self.command(Command::Stats {
                product_id: PRODUCT.into(),
            }),
            64 => {
                // A void, most often of an acknowledged confirmation.
                let id = match self.confirmed.iter().nth(self.rng.below(4) as usize) {
                    Some(id) => *id,
                    None => 1 + self.rng.below(20),
                };
                self.command(Command::Void {
                    product_id: PRODUCT.into(),
                    reservation_id: id,
                })
            }
            65..=74 => {
                self.now += self.rng.below(1_500);
                // The runtime fires the alarm once its time has come.
                match self.object.alarm_at_ms() {
                    Some(at) if at <= self.now => {
                        match self.object.alarm(&mut self.store, self.now) {
                            Ok(n) => format!("alarm at {}: expired {n}", self.now),
                            Err(_) => {
                                self.failed_writes += 1;
                                self.memory_lost();
                                // The runtime retries a failed alarm.
                                self.object.alarm_set(self.now + 1);
                                format!("alarm at {}: storage error", self.now)
                            }
                        }
                    }
                    _ => format!("time {}", self.now),
                }
            }
            75..=84 => {
                if self.in_flight.is_some() {
                    self.deliver()
                } else {
                    match self.object.lease(&mut self.store, self.now) {
                        Ok(Some(lease)) => {
                            let n = lease.batch.events.len();
                            assert!(n <= flashgate::limits::EVENTS_PER_BATCH_MAX);
                            self.in_flight = Some(lease);
                            format!("lease {n}")
                        }
                        Ok(None) => "lease: nothing due".into(),
                        Err(_) => "lease: storage error".into(),
                    }
                }
            }
            85..=87 => {
                // Eviction: the object is rebuilt from storage, and a delivery
                // in flight dies with the old instance.
                // Commands waiting for a batch die unanswered with it.
                let entropy = self.rng.next_u64().to_le_bytes().repeat(4);
                self.object = ProductObject::new(SECRET, entropy.try_into().unwrap());
                self.in_flight = None;
                self.memory_lost();
                let lost = std::mem::take(&mut self.pending).len();
                format!("evicted ({lost} unanswered commands)")
            }
            _ => {
                self.key += 1;
                let buyer = self.buyer();
                let (id, _) = self.some_reservation();
                self.command(Command::GetReservation {
                    product_id: PRODUCT.into(),
                    buyer,
                    reservation_id: id,
                })
            }
        };
        self.arm();
        desc
    }

    /// A batch was answered: its reserves were counted, and if a history
    /// write committed since the last look, every answer so far is in it.
    fn answered(&mut self, batch: &[Command], replies: &[flashgate::http::reply::Reply]) {
        // A reserve for a product not made yet is the shell's 404, which
        // no gate counts.
        self.reserve_answers += batch
            .iter()
            .zip(replies)
            .filter(|(c, r)| matches!(c, Command::Reserve { .. }) && r.status != 404)
            .count() as u64;
        self.history_written();
    }

    fn history_written(&mut self) {
        if self.store.history_writes > self.history_writes_seen {
            self.history_writes_seen = self.store.history_writes;
            self.reserve_answers_written = self.reserve_answers;
        }
    }

    /// The object's memory is gone (a failed write poisoned it, or it was
    /// evicted): the counts it had not written are lost, as a crash loses
    /// them. The history bounds how many: those of the last flush interval.
    fn memory_lost(&mut self) {
        self.history_written();
        self.reserve_answers_lost += self.reserve_answers - self.reserve_answers_written;
        self.reserve_answers_written = self.reserve_answers;
    }

    /// The stored history against storage and the answers given: a count
    /// that comes of a change of state is exact (the reserves the stored
    /// gate handed ids to, the confirmations it stores), and the reserve
    /// answers it counts are those given less those a lost memory took.
    fn check_history(&mut self, desc: &str) {
        self.history_written();
        if self.object.is_poisoned() {
            self.memory_lost();
        }
        let Some(Row::Meta(m)) = self.store.rows.get(&RowKey::Meta) else {
            assert!(
                self.store.history.is_empty(),
                "{desc}: a history without a product"
            );
            return;
        };
        let mut total = Counters::default();
        for b in self.store.history.values() {
            total.add(&b.counts);
        }
        assert_eq!(
            total.reserve(ReserveKind::Reserved) + 1,
            m.next_reservation_id,
            "{desc}: the stored history's reserves are not the ids the stored gate handed out"
        );
        let paid = self
            .store
            .rows
            .values()
            .filter(|r| matches!(r, Row::Reservation(r) if r.state.paid()))
            .count() as u64;
        assert_eq!(
            total.holds_confirmed, paid,
            "{desc}: the stored history's confirmations are not the stored paid records"
        );
        let counted: u64 = ReserveKind::ALL.iter().map(|&k| total.reserve(k)).sum();
        assert!(
            counted <= self.reserve_answers
                && counted >= self.reserve_answers_written - self.reserve_answers_lost,
            "{desc}: the stored history counts {counted} reserve answers, of {} given, {} of them written and {} lost with a memory",
            self.reserve_answers,
            self.reserve_answers_written,
            self.reserve_answers_lost
        );
    }

    fn some_reservation(&mut self) -> (u64, String) {
        if self.reserved.is_empty() || self.rng.chance(5) {
            let b = self.buyer();
            return (1 + self.rng.below(50), b);
        }
        let i = self.rng.below(self.reserved.len() as u64) as usize;
        let (id, buyer) = self.reserved.iter().nth(i).expect("in range");
        (*id, buyer.clone())
    }

    fn check_all(&self, desc: &str) {
        // An object that trusts its memory holds exactly what storage
        // holds, but the paid records, which it leaves in storage.
        if !self.object.is_poisoned() {
            let stored: Vec<Row> = self
                .store
                .rows
                .values()
                .filter(|r| !matches!(r, Row::Reservation(r) if r.state.paid()))
                .cloned()
                .collect();
            match self.object.rows() {
                Some((id, rows)) => {
                    assert_eq!(Some(id), self.store.product_id.as_deref(), "{desc}");
                    assert!(rows == stored, "{desc}: memory differs from storage");
                }
                None => assert!(self.store.product_id.is_none(), "{desc}"),
            }
            // The alarm covers the next deadline.
            if let Some(t) = self.object.next_deadline_ms() {
                let at = self.object.alarm_at_ms();
                assert!(
                    at.is_some_and(|a| a <= t.max(self.now + 1)),
                    "{desc}: deadline {t} but alarm {at:?}"
                );
            }
        }
        // Storage holds no admin change that was not acknowledged.
        if let Some(Row::Meta(m)) = self.store.rows.get(&RowKey::Meta) {
            assert_eq!(
                Some(m.escrowed),
                self.acked_total,
                "{desc}: stored total is not the acknowledged one"
            );
        }
        // Every acknowledged confirmation is stored as confirmed, and is in
        // the outbox or at the origin.
        let outbox: BTreeSet<u64> = self
            .store
            .rows
            .values()
            .filter_map(|r| match r {
                Row::Outbox(e) => match e.event {
                    OutboxEvent::Order { reservation_id, .. } => Some(reservation_id),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        for id in &self.confirmed {
            let r = self.stored_reservation(*id);
            assert!(
                r.is_some_and(|r| r.state.paid()),
                "{desc}: confirmation {id} lost"
            );
            let at_origin = self.origin.orders.contains_key(&order(*id));
            assert!(
                outbox.contains(id) || at_origin,
                "{desc}: confirmation {id} neither in the outbox nor at the origin"
            );
        }
        // The origin holds only confirmed (or since voided) reservations.
        for oid in self.origin.orders.keys() {
            let id = oid
                .strip_prefix("sim:")
                .and_then(|s| codec().decode(s))
                .expect("an order id");
            let r = self.stored_reservation(id);
            assert!(
                r.is_some_and(|r| r.state.paid()),
                "{desc}: the origin holds {oid}, which is not a stored confirmation"
            );
        }
        assert_eq!(
            self.origin.refused, 0,
            "{desc}: the origin refused an event"
        );
    }

    /// Ends the run: no more faults, time passes, the outbox drains, and the
    /// origin then holds exactly the stored confirmations (I2).
    fn drain(&mut self) {
        self.store.fail_write_in = None;
        self.store.fail_commits = 0;
        self.store.fail_loads = 0;
        self.store.fail_reads = 0;
        self.in_flight = None;
        let last = self.flush();
        assert!(!last.contains("error"), "{last}");
        for _ in 0..10_000 {
            self.now += 1_000;
            if let Some(at) = self.object.alarm_at_ms() {
                if at <= self.now {
                    self.object
                        .alarm(&mut self.store, self.now)
                        .expect("no faults now");
                }
            }
            if let Some(lease) = self
                .object
                .lease(&mut self.store, self.now)
                .expect("no faults now")
            {
                let answer = self.origin.ingest(&lease.batch);
                let result = Ok(answer);
                let s = self
                    .object
                    .handle_delivery(&mut self.store, lease, result, self.now, 1)
                    .expect("no faults now");
                assert!(matches!(s, DeliveryOutcome::Acked { .. }), "{s:?}");
            }
            self.arm();
            let backlog = self
                .store
                .rows
                .values()
                .any(|r| matches!(r, Row::Outbox(_)));
            if !backlog {
                break;
            }
        }
        let stored: BTreeMap<String, bool> = self
            .store
            .rows
            .values()
            .filter_map(|r| match r {
                Row::Reservation(r) if r.state.paid() => {
                    Some((order(r.id), r.state == HoldState::Voided))
                }
                _ => None,
            })
            .collect();
        let at_origin: BTreeMap<String, bool> = self
            .origin
            .orders
            .iter()
            .map(|(id, (_, voided))| (id.clone(), *voided))
            .collect();
        assert_eq!(
            at_origin, stored,
            "I2: origin orders and voids != the gate's"
        );
        // The origin's total follows the gate's.
        if let Some(Row::Meta(m)) = self.store.rows.get(&RowKey::Meta) {
            assert_eq!(
                self.origin.stock.map(|(_, t)| t),
                Some(m.escrowed),
                "the origin's total"
            );
        }
    }
}

impl Simulation for Sim {
    /// Failed writes, reloads, stale deliveries, deliveries, grouped
    /// commits, failed batches and lost answers retried: the paths the run
    /// exists for.
    type Summary = [u64; 7];

    fn step(&mut self) -> String {
        self.operate()
    }

    fn check(&mut self, step: &str) {
        self.check_all(step);
        self.check_history(step);
    }

    fn finish(mut self) -> [u64; 7] {
        self.drain();
        [
            self.failed_writes,
            self.reloads,
            self.stale,
            self.origin.deliveries,
            self.store.grouped_commits,
            self.failed_batches,
            self.lost_answers_retried,
        ]
    }
}

#[test]
fn simulate_the_object_under_faults() {
    let plan = Plan::from_env("OBJECT_SIM", 100, 3_000);
    let mut totals = [0u64; 7];
    for counts in run_plan(&plan, Sim::new) {
        for (t, c) in totals.iter_mut().zip(counts) {
            *t += c;
        }
    }
    eprintln!(
        "object sim: {} seeds x {} steps; failed writes {}, reloads {}, stale deliveries {}, deliveries {}, grouped commits {}, failed batches {}, lost answers retried {}",
        plan.seeds.len(),
        plan.steps,
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[4],
        totals[5],
        totals[6],
    );
    // The run must reach the paths it exists for.
    if plan.seeds.len() >= 20 {
        assert!(totals.iter().all(|&t| t > 0), "{totals:?}");
    }
}

// ----- K > 1: home and its stock shards, as objects ----------------------

/// Home and its stock shards as `ProductObject`s over storages that fail on
/// demand, joined the way the Worker's shell joins them
/// (`src/wasm/object/product.rs`): a shard's batch of reserves calls home
/// (`home_call_needed`, `report_home`, at most `CALL_ROUNDS_MAX` calls, as
/// `home_call::BatchCalls` counts them), home answers the report after the
/// drains it asks for (`answer_report`, `push_for`, each shard's
/// `answer_push`, `handle_push_answer`), the reply is applied
/// (`handle_home_reply`) and only then the batch decided (`commands`).
/// Objects restart (memory lost, storage kept), writes and commits fail.
///
/// After every step: no oversell over what storage holds; and every
/// `sold_out` a shard or home answered is checked, at once, against one
/// counter of the product (units neither held nor sold anywhere, beyond
/// those that came back within `SOLD_OUT_LAG_MS`): the object's own call
/// home path is simulated, not only the core's.
struct Escrowed {
    rng: Rng,
    now: u64,
    /// Index 0 is home.
    objects: Vec<(ProductObject, MemStorage)>,
    shards: u16,
    /// Units that came back: when, and how many.
    returns: Vec<(u64, u64)>,
    key: u64,
    counts: [u64; 5],
}

const ESCROWED: &str = "escrowed";

impl Escrowed {
    fn new(seed: u64) -> Escrowed {
        let mut rng = Rng::new(seed);
        let shards = rng.range(2, 6) as u16;
        let entropy: [u8; 32] = seed.to_le_bytes().repeat(4).try_into().unwrap();
        let mut objects: Vec<(ProductObject, MemStorage)> = (0..shards)
            .map(|_| (ProductObject::new(SECRET, entropy), MemStorage::default()))
            .collect();
        let create = Command::Configure {
            product_id: ESCROWED.into(),
            patch: ConfigPatch {
                stock_total: Some(rng.range(1, 40)),
                shards: Some(shards),
                per_buyer_max: Some(2),
                quantity_max: Some(2),
                hold_ttl_ms: Some(3_000),
                attempts_per_window_max: Some(10_000),
                ..ConfigPatch::default()
            },
        };
        let (home, store) = &mut objects[0];
        let reply = home
            .commands(store, std::slice::from_ref(&create), 1_000_000)
            .expect("created")
            .remove(0);
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        let mut sim = Escrowed {
            rng,
            now: 1_000_000,
            objects,
            shards,
            returns: Vec::new(),
            key: 0,
            counts: [0; 5],
        };
        // Home makes its shards, as its shell does after the creation.
        let unmade = sim.objects[0].0.rules_behind();
        for j in unmade {
            sim.push(j, false);
        }
        sim
    }

    /// Units held or sold, and the product's total, as storage holds them.
    fn stored(&self) -> (u64, u64) {
        let mut committed = 0;
        let mut total = 0;
        for (_, store) in &self.objects {
            for row in store.rows.values() {
                match row {
                    Row::Reservation(r)
                        if matches!(r.state, HoldState::Held | HoldState::Confirmed) =>
                    {
                        committed += u64::from(r.quantity)
                    }
                    Row::Escrow(e) => {
                        if let flashgate_core::Escrow::Home(pool) = e.as_ref() {
                            total = pool.stock_total;
                        }
                    }
                    _ => {}
                }
            }
        }
        (committed, total)
    }

    /// Runs `f` on object `i`, and logs the units that came back in it.
    fn on<T>(&mut self, i: usize, f: impl FnOnce(&mut ProductObject, &mut MemStorage) -> T) -> T {
        let before = self.stored().0;
        let (o, s) = &mut self.objects[i];
        let t = f(o, s);
        let after = self.stored().0;
        if after < before {
            self.returns.push((self.now, before - after));
        }
        t
    }

    fn push(&mut self, j: u16, drain: bool) {
        let sent_at = self.now;
        let Some((product_id, at, push)) = self.objects[0].0.push_for(j, drain) else {
            return;
        };
        // The push crosses the wire as the Worker sends it, a `Command`
        // in JSON, and its answer comes back in JSON: a push the shard
        // cannot read is a push that failed.
        let sent = Command::Push {
            product_id,
            at,
            push,
        };
        let Ok(Command::Push {
            product_id,
            at,
            push,
        }) = wire::<Command>(&sent)
        else {
            let now = self.now;
            self.on(0, |o, s| {
                o.handle_push_answer(s, now, j, sent_at, drain, None)
            })
            .ok();
            return;
        };
        let now = self.now;
        let answer = self.on(usize::from(j), |o, s| {
            o.answer_push(s, now, &product_id, at, &push)
        });
        let answer = answer.ok().flatten().and_then(|a| wire(&a).ok());
        self.on(0, |o, s| {
            o.handle_push_answer(s, now, j, sent_at, drain, answer)
        })
        .ok();
    }

    /// Home's answer to a report, after the drains it asks for; `None`
    /// when home failed (its storage), as a failed call.
    fn home_answers(&mut self, report: &ShardReport) -> Option<ShardReply> {
        let deadline = self.now + flashgate::limits::ASK_WAIT_MAX_MS;
        for _ in 0..20 {
            let now = self.now;
            let step = self.on(0, |o, s| o.answer_report(s, now, report, now >= deadline));
            match step {
                Ok(Ok(HomeStep::Reply(reply))) => return wire(&*reply).ok(),
                Ok(Ok(HomeStep::Drain(list))) => {
                    for j in list {
                        self.push(j, true);
                    }
                    self.now += 2;
                }
                Ok(Ok(HomeStep::Wait)) => self.now += 5,
                Ok(Err(refusal)) => panic!("home refused {report:?}: {refusal:?}"),
                Err(_) => return None,
            }
        }
        self.now = deadline;
        None
    }

    /// A batch at shard `i` (0: home), as the shell runs it.
    fn batch(&mut self, i: u16, cmds: Vec<Command>) -> Option<Vec<flashgate::http::reply::Reply>> {
        let idx = usize::from(i);
        if i == 0 {
            // Home's own reserves wait for the drains they need.
            for _ in 0..20 {
                let now = self.now;
                let drains = self.objects[0].0.drains_needed(&cmds, now, false);
                match drains {
                    Some(list) if list.is_empty() => break,
                    Some(list) => {
                        for j in list {
                            self.push(j, true);
                        }
                    }
                    None => self.now += 5,
                }
            }
        } else {
            let mut calls = flashgate::object::home_call::BatchCalls::default();
            loop {
                let now = self.now;
                let needed = self.objects[idx].0.home_call_needed(&cmds, now);
                let Some(need) = calls.next(needed, now) else {
                    break;
                };
                self.counts[0] += 1;
                let first = cmds.first().cloned();
                let report = self.on(idx, |o, s| o.report_home(s, now, first.as_ref(), need));
                let reply = match report {
                    Ok(Some((home, report))) => {
                        let cmd = Command::Report {
                            product_id: home,
                            report,
                        };
                        match wire::<Command>(&cmd) {
                            Ok(Command::Report { report, .. }) => self.home_answers(&report),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                calls.answered(reply.as_ref().map_or(0, |r| r.drains));
                let now = self.now;
                let reply = reply.ok_or_else(|| "no answer".to_string());
                self.on(idx, |o, s| o.handle_home_reply(s, now, reply)).ok();
            }
        }
        let now = self.now;
        self.on(idx, |o, s| o.commands(s, &cmds, now)).ok()
    }

    fn reserve(&mut self) -> String {
        let i = self.rng.below(u64::from(self.shards)) as u16;
        let buyer = self.rng.below(40) as usize;
        let n = self.rng.range(1, 3) as usize;
        let cmds: Vec<Command> = (0..n)
            .map(|k| {
                self.key += 1;
                let reserve = Command::Reserve {
                    product_id: ESCROWED.into(),
                    buyer: format!("b{}-{}", buyer + k, i),
                    idem_key: format!("k{}", self.key),
                    quantity: self.rng.range(1, 2) as u32,
                    ticket: None,
                };
                match flashgate::protocol::ShardAt::new(i, self.shards) {
                    Some(at) => Command::Shard {
                        product_id: ESCROWED.into(),
                        at,
                        operation: flashgate::protocol::ShardOp::of(reserve, |id| id)
                            .expect("a reserve"),
                    },
                    None => reserve,
                }
            })
            .collect();
        let Some(replies) = self.batch(i, cmds.clone()) else {
            self.counts[1] += 1;
            return format!("a batch of {n} at shard {i} failed (storage)");
        };
        let (committed, total) = self.stored();
        let available = total.saturating_sub(committed);
        let horizon = self.now.saturating_sub(SOLD_OUT_LAG_MS);
        let lately: u64 = self
            .returns
            .iter()
            .filter(|&&(t, _)| t >= horizon)
            .map(|&(_, u)| u)
            .sum();
        let mut said = Vec::new();
        for (cmd, reply) in cmds.iter().zip(&replies) {
            let code = reply.body["code"].as_str().unwrap_or("");
            said.push(format!("{} {code}", reply.status));
            let claimed = match code {
                "sold_out" => 0,
                "insufficient_stock" => reply.body["available"].as_u64().unwrap_or(0),
                _ => continue,
            };
            self.counts[2] += 1;
            assert!(
                available <= claimed + lately,
                "{cmd:?} at shard {i} was told {code} ({claimed}) while {available} units were available ({lately} came back lately)"
            );
        }
        self.counts[3] += replies.iter().filter(|r| r.status == 503).count() as u64;
        format!("{n} reserves at shard {i}: {}", said.join(", "))
    }

    fn step(&mut self) -> String {
        self.now += self.rng.range(0, 80);
        match self.rng.below(100) {
            0..=49 => self.reserve(),
            50..=59 => {
                // Time passes: holds expire at their alarms, and shards
                // report in the background.
                self.now += self.rng.range(0, 2_000);
                for i in 0..self.objects.len() {
                    let now = self.now;
                    self.on(i, |o, s| o.alarm(s, now)).ok();
                    if i > 0 {
                        let report = self.on(i, |o, s| o.report_home(s, now, None, 0));
                        if let Ok(Some((_, report))) = report {
                            let reply =
                                self.home_answers(&report).ok_or_else(|| "lost".to_string());
                            let now = self.now;
                            self.on(i, |o, s| o.handle_home_reply(s, now, reply)).ok();
                        }
                    }
                }
                "time passes".into()
            }
            60..=69 => {
                let i = self.rng.below(self.objects.len() as u64) as usize;
                self.objects[i].1.fail_write_in = Some(self.rng.below(4) as u32);
                self.counts[4] += 1;
                format!("the next write of object {i} fails")
            }
            70..=74 => {
                let i = self.rng.below(self.objects.len() as u64) as usize;
                let entropy = [7u8; 32];
                self.objects[i].0 = ProductObject::new(SECRET, entropy);
                format!("object {i} restarts")
            }
            75..=79 => {
                let i = self.rng.below(self.objects.len() as u64) as usize;
                self.objects[i].1.fail_commits = 1;
                format!("the next commit of object {i} fails")
            }
            _ => self.reserve(),
        }
    }
}

/// A message between objects as it crosses the wire: written as JSON and
/// read back as the receiving side reads it.
fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(message: &T) -> Result<T, String> {
    let json = serde_json::to_string(message).map_err(|e| e.to_string())?;
    serde_json::from_str(&json).map_err(|e| e.to_string())
}

impl Escrowed {
    /// A product of one unit over home and one shard, with a waiting room
    /// that admits a ticket a second.
    fn with_room() -> Escrowed {
        let shards = 2;
        let mut objects: Vec<(ProductObject, MemStorage)> = (0..shards)
            .map(|_| (ProductObject::new(SECRET, [3u8; 32]), MemStorage::default()))
            .collect();
        let create = Command::Configure {
            product_id: ESCROWED.into(),
            patch: ConfigPatch {
                stock_total: Some(1),
                shards: Some(shards),
                admit_per_s: Some(1),
                hold_ttl_ms: Some(600_000),
                ..ConfigPatch::default()
            },
        };
        let now = 1_000_000;
        let (home, store) = &mut objects[0];
        let reply = home
            .commands(store, std::slice::from_ref(&create), now)
            .expect("created")
            .remove(0);
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        let mut sim = Escrowed {
            rng: Rng::new(1),
            now,
            objects,
            shards,
            returns: Vec::new(),
            key: 0,
            counts: [0; 5],
        };
        let unmade = sim.objects[0].0.rules_behind();
        for j in unmade {
            sim.push(j, false);
        }
        sim
    }

    /// `buyer` reserves one unit at shard `i` with `ticket`: the answer's
    /// code (or "reserved").
    fn reserve_with(&mut self, i: u16, buyer: &str, ticket: flashgate_core::Ticket) -> String {
        self.key += 1;
        let reserve = Command::Reserve {
            product_id: ESCROWED.into(),
            buyer: buyer.into(),
            idem_key: format!("k{}", self.key),
            quantity: 1,
            ticket: Some(ticket),
        };
        let cmd = match flashgate::protocol::ShardAt::new(i, self.shards) {
            Some(at) => Command::Shard {
                product_id: ESCROWED.into(),
                at,
                operation: flashgate::protocol::ShardOp::of(reserve, |id| id).expect("a reserve"),
            },
            None => reserve,
        };
        let reply = self.batch(i, vec![cmd]).expect("decided").remove(0);
        match reply.status {
            201 => "reserved".into(),
            _ => reply.body["code"].as_str().unwrap_or("").to_string(),
        }
    }
}

/// A product over K > 1 shards with a waiting room sells out, while
/// tickets still wait in the room (the room stops when nothing is left to
/// sell): a buyer at home, whose reserve home decides only after draining
/// the shard, is told `sold_out`. Home's drain carries the room to the
/// shard; a shard that could not read it failed every drain, and every
/// buyer after the last unit heard `unavailable`, for ever.
#[test]
fn a_sharded_product_with_a_waiting_room_sells_out_while_tickets_wait() {
    let mut sim = Escrowed::with_room();
    let ticket = |arrived_ms: u64, tiebreak: u32| flashgate_core::Ticket {
        arrived_ms,
        tiebreak,
        infinite_queue: false,
    };
    // Two buyers arrive in one second, five more in the next: the room
    // admits a ticket a second, so the later ones wait.
    let first = [ticket(1_000_000, 1), ticket(1_000_000, 2)];
    let mut arrivals = flashgate_core::Arrivals::default();
    for t in &first {
        arrivals.add(t, None);
    }
    for k in 0..5 {
        arrivals.add(&ticket(1_001_000, 10 + k), None);
    }
    let sync = Command::Sync {
        product_id: ESCROWED.into(),
        arrivals,
    };
    sim.now = 1_001_500;
    let reply = sim.batch(0, vec![sync]).expect("decided").remove(0);
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    sim.now += 3_000;
    // The only unit, at the shard.
    assert_eq!(sim.reserve_with(1, "b1", first[0]), "reserved");
    sim.now += 100;
    // Home drains the shard before it answers its own buyer.
    assert_eq!(sim.reserve_with(0, "b2", first[1]), "sold_out");
}

impl Simulation for Escrowed {
    type Summary = [u64; 5];

    fn step(&mut self) -> String {
        Escrowed::step(self)
    }

    fn check(&mut self, _step: &str) {
        let (committed, total) = self.stored();
        assert!(
            committed <= total,
            "oversold: {committed} held or sold of {total}"
        );
    }

    fn finish(self) -> [u64; 5] {
        self.counts
    }
}

#[test]
fn simulate_home_and_its_shards_as_objects() {
    let plan = Plan::from_env("OBJECT_ESCROW_SIM", 60, 1_500);
    let mut totals = [0u64; 5];
    for counts in run_plan(&plan, Escrowed::new) {
        for (t, c) in totals.iter_mut().zip(counts) {
            *t += c;
        }
    }
    eprintln!(
        "object escrow sim: {} seeds x {} steps; calls home {}, failed batches {}, sold-out answers checked {}, unavailable {}, failed writes injected {}",
        plan.seeds.len(),
        plan.steps,
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[4],
    );
    if plan.seeds.len() >= 20 {
        assert!(
            totals[0] > 0 && totals[2] > 0 && totals[4] > 0,
            "{totals:?}"
        );
    }
}
