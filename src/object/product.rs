//! The product's Durable Object as a pure state machine over its storage.
//!
//! `wasm/object/product.rs` is only the shell around this: it hands in the request
//! and the time, executes SQL through the `Storage` it passes, sets the
//! alarm this module asks for, and performs the fetch to the origin that a
//! `Lease` describes. Every decision of the object lives here, so the
//! simulator in `tests/object_sim.rs` drives the failure paths natively: a
//! failed write, the poison it leaves, the reload, and a delivery whose
//! answer arrives after the object reloaded.
//!
//! Rules (ARCHITECTURE.md):
//! - A decision and the write of its rows happen in one call, with nothing
//!   awaited between them. A reply is only returned once its rows are
//!   written; a failed write returns an error instead, and nothing unwritten
//!   is acknowledged.
//! - A failed write poisons the object: memory may be ahead of storage, so
//!   the next event reloads from storage before it decides anything.
//! - A delivery's answer is applied only to the generation of the gate that
//!   leased the batch. A reload in between voids it; the batch is simply
//!   leased and sent again (the origin dedupes).

use std::cell::RefCell;

use flashgate_core::escrow::{HomePush, ReportRefusal, ShardReply, ShardReport};
use flashgate_core::{
    AckOutcome, Archive, Bucket, Change, Gate, History, HistoryWrite, HomeStep, LotteryKey,
    ReservationId, ReservationRow, Restorer, Row,
};
use flashgate_wire::{Batch, BatchResult};

use crate::http::reply::Reply;
use crate::http::views::ShellStatus;
use crate::limits::COMMANDS_PER_BATCH_MAX;
use crate::object::delivery::{self, DeliveryError};
use crate::object::live::LiveState;
use crate::object::service::{self, Product};
use crate::protocol::buyer_filter::BuyerFilter;
use crate::protocol::{Command, ShardAnswer, ShardAt, ShardOp};

/// Why storage failed. The shell logs it; the client gets a 5xx.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageError(pub String);

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What storage holds for a product.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub product_id: String,
    pub rows: Vec<Row>,
}

/// The object's durable storage. Every call is synchronous, as the
/// Durable Object's SQL is.
pub trait Storage {
    /// Streams the stored product's rows to `each`, one at a time (the
    /// singletons first, then the reservations kept in memory by id, then
    /// the paid ones by buyer, then the outbox), and returns its product
    /// id; `None` if this object never held one.
    fn load(
        &mut self,
        each: &mut dyn FnMut(Row) -> Result<(), StorageError>,
    ) -> Result<Option<String>, StorageError>;
    /// Every stored row at once: for tests, which compare them.
    fn load_all(&mut self) -> Result<Option<Stored>, StorageError> {
        let mut rows = Vec::new();
        let id = self.load(&mut |row| {
            rows.push(row);
            Ok(())
        })?;
        Ok(id.map(|product_id| Stored { product_id, rows }))
    }
    /// Writes one decision's changes; for a product being created, first
    /// its tables and id.
    fn write(&mut self, create: Option<&str>, changes: &[Change]) -> Result<(), StorageError>;
    /// The paid reservation `id`, as written (earlier in the same
    /// transaction included): the core's archive (`flashgate_core::archive`).
    fn paid(&mut self, id: ReservationId) -> Result<Option<ReservationRow>, StorageError>;
    /// The paid reservation `buyer` made under `idem_key`.
    fn paid_by_key(
        &mut self,
        buyer: &str,
        idem_key: &str,
    ) -> Result<Option<ReservationRow>, StorageError>;
    /// Every paid reservation of `buyer`.
    fn paid_of_buyer(&mut self, buyer: &str) -> Result<Vec<ReservationRow>, StorageError>;
    /// The most units any buyer's confirmed reservations hold.
    fn paid_units_max(&mut self) -> Result<u32, StorageError>;
    /// Each buyer with paid reservations, once, streamed.
    fn each_paid_buyer(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StorageError>;
    /// Every paid reservation: for audits in tests.
    fn all_paid(&mut self) -> Result<Vec<ReservationRow>, StorageError>;
    /// The product's history as stored (`flashgate_core::history`): its
    /// step and its buckets, `None` before its first write.
    fn load_history(&mut self) -> Result<Option<(u64, Vec<Bucket>)>, StorageError>;
    /// Writes what `History::poll_write` handed over.
    fn write_history(&mut self, w: &HistoryWrite) -> Result<(), StorageError>;
    /// Runs `body` as one transaction: if it returns an error, or the commit
    /// fails, none of its writes are stored (`transactionSync` in the
    /// Worker).
    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError>
    where
        Self: Sized;
}

/// Storage as the core's archive, for the length of one decision. The
/// core's reads cannot fail, so a read that does is kept here and the
/// decision is then thrown away as a failed write is: the batch rolls back,
/// nothing of it is acknowledged, and the object reloads.
pub struct Reader<'a, S> {
    store: RefCell<&'a mut S>,
    error: RefCell<Option<StorageError>>,
}

impl<'a, S: Storage> Reader<'a, S> {
    pub fn new(store: &'a mut S) -> Self {
        Reader {
            store: RefCell::new(store),
            error: RefCell::new(None),
        }
    }

    fn read<T: Default>(&self, f: impl FnOnce(&mut S) -> Result<T, StorageError>) -> T {
        match f(&mut self.store.borrow_mut()) {
            Ok(t) => t,
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                T::default()
            }
        }
    }

    /// Ends the decision: the store back, or the first read that failed.
    pub fn finish(self) -> Result<&'a mut S, StorageError> {
        match self.error.into_inner() {
            Some(e) => Err(StorageError(format!("reading an archived record: {e}"))),
            None => Ok(self.store.into_inner()),
        }
    }
}

impl<S: Storage> Archive for Reader<'_, S> {
    fn paid(&self, id: ReservationId) -> Option<ReservationRow> {
        self.read(|s| s.paid(id))
    }
    fn paid_by_key(&self, buyer: &str, idem_key: &str) -> Option<ReservationRow> {
        self.read(|s| s.paid_by_key(buyer, idem_key))
    }
    fn paid_of_buyer(&self, buyer: &str) -> Vec<ReservationRow> {
        self.read(|s| s.paid_of_buyer(buyer))
    }
    fn paid_units_max(&self) -> u32 {
        self.read(|s| s.paid_units_max())
    }
    fn each_paid_buyer(&self, each: &mut dyn FnMut(&str)) {
        self.read(|s| s.each_paid_buyer(each))
    }
    fn all_paid(&self) -> Vec<ReservationRow> {
        self.read(|s| s.all_paid())
    }
}

/// A batch leased from the outbox, for the shell to sign and send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub batch: Batch,
    up_to_seq: u64,
    generation: u64,
}

/// What became of a delivery's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The origin applied the batch; its entries left the outbox. `refused`
    /// counts the events it refused (a disagreement, never expected).
    Acked { entries: u64, refused: u64 },
    /// The core refused the ack; nothing changed (a bug signal).
    AckRefused(AckOutcome),
    /// The delivery failed; the batch goes again after a backoff. `nacked`
    /// is false when the lease had already lapsed and been handed out
    /// again, so there was nothing to nack.
    Failed { error: DeliveryError, nacked: bool },
    /// The object reloaded while the batch was out, so the answer belongs to
    /// a gate that no longer exists. Nothing is written.
    Stale,
}

pub struct ProductObject {
    product: Option<Product>,
    /// Keys the codec of the product's reservation ids (`ID_SECRET`).
    id_secret: Vec<u8>,
    /// Memory may be ahead of (or was never read from) storage: the next
    /// event reloads before deciding anything.
    poisoned: bool,
    /// Bumped at every load, so a lease from before a reload is void.
    generation: u64,
    /// The alarm this object last set and that has not fired yet.
    alarm_at_ms: Option<u64>,
    delivery: ShellStatus,
    /// Where lottery keys come from: `entropy` is 32 random bytes from the
    /// shell, and each key is `SHA-256(entropy ‖ draws)`, so one seed
    /// yields as many unpredictable keys as the object needs.
    entropy: [u8; 32],
    draws: u64,
    /// Whether home has tried to make its shards in this life.
    shards_made: bool,
    /// Whether this event's transaction wrote rows: its history then goes
    /// with them (`History::poll_write`).
    wrote: bool,
}

impl ProductObject {
    /// An object that has read nothing yet; its first event loads.
    /// `entropy`: 32 random bytes (the shell's `crypto.getRandomValues`).
    pub fn new(id_secret: &[u8], entropy: [u8; 32]) -> ProductObject {
        ProductObject {
            product: None,
            id_secret: id_secret.to_vec(),
            poisoned: true,
            generation: 0,
            alarm_at_ms: None,
            delivery: ShellStatus::default(),
            entropy,
            draws: 0,
            shards_made: false,
            wrote: false,
        }
    }

    /// Hands the gate a lottery key if it wants one (a room just set up or
    /// rescheduled), in the event that made it want one, so that its rows
    /// carry the key and no snapshot goes out without it. Returns whether
    /// it drew one.
    fn draw_lottery_key(&mut self) -> bool {
        let Some(p) = self.product.as_mut() else {
            return false;
        };
        if !p.gate.lottery_wanted() {
            return false;
        }
        use sha2::{Digest, Sha256};
        self.draws += 1;
        let mut h = Sha256::new();
        h.update(b"flashgate-lottery-key-v1");
        h.update(self.entropy);
        h.update(self.draws.to_be_bytes());
        p.gate.handle_lottery_key(LotteryKey(h.finalize().into()));
        true
    }

    /// Reloads from storage if memory cannot be trusted.
    pub fn ensure_loaded(&mut self, store: &mut impl Storage) -> Result<(), StorageError> {
        if !self.poisoned {
            return Ok(());
        }
        // Row by row from the cursor into the gate, so that the rows are
        // never all held at once beside the gate they build.
        let corrupt = |e| StorageError(format!("stored gate is corrupt: {e:?}"));
        // The object writes every change it takes, so its gate leaves paid
        // records in storage (`flashgate_core::archive`).
        let mut restorer = Restorer::archived();
        let mut rows = 0u64;
        let id = store.load(&mut |row| {
            rows += 1;
            restorer.push(row).map_err(corrupt)
        })?;
        let product = match id {
            None => None,
            Some(product_id) => {
                let gate = restorer.finish().map_err(corrupt)?;
                let mut product = Product::new(product_id, gate, &self.id_secret);
                if let Some((step_ms, buckets)) = store.load_history()? {
                    product.history = History::restore(step_ms, buckets)
                        .map_err(|e| StorageError(format!("stored history is corrupt: {e:?}")))?;
                }
                Some(product)
            }
        };
        self.wrote = false;
        self.delivery.work.rows_loaded = rows;
        self.product = product;
        self.poisoned = false;
        self.generation += 1;
        Ok(())
    }

    /// Writes what the last decision changed. On failure the object is
    /// poisoned and the error returned, so no reply acknowledges it.
    fn persist(&mut self, store: &mut impl Storage, created: bool) -> Result<(), StorageError> {
        let Some(p) = self.product.as_mut() else {
            return Ok(());
        };
        let changes = p.gate.poll_changes();
        if changes.is_empty() && !created {
            return Ok(());
        }
        let create = created.then_some(p.id.as_str());
        self.wrote = true;
        store.write(create, &changes).inspect_err(|_| {
            self.poisoned = true;
        })
    }

    /// Ends an event's transaction: notes the sale in its history, and
    /// writes the history if the event wrote rows (so that every count of a
    /// change of state is stored with the change) or its oldest unwritten
    /// note is due (`limits::HISTORY_FLUSH_MS`; the alarm covers it).
    fn persist_history(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
    ) -> Result<(), StorageError> {
        let wrote = std::mem::take(&mut self.wrote);
        let Some(p) = self.product.as_mut() else {
            return Ok(());
        };
        let mark = p.gate.mark(now_ms);
        p.history.note(now_ms, p.gate.counters(), mark);
        match p.history.poll_write(now_ms, wrote) {
            Some(w) => store.write_history(&w).inspect_err(|_| {
                self.poisoned = true;
            }),
            None => Ok(()),
        }
    }

    /// Notes the sale in its history after an event that writes nothing
    /// (a batch of reads): in memory, written with a later event's rows or
    /// by the alarm.
    fn note_history(&mut self, now_ms: u64) {
        if let Some(p) = self.product.as_mut() {
            let mark = p.gate.mark(now_ms);
            p.history.note(now_ms, p.gate.counters(), mark);
        }
    }

    /// Group commit: runs a batch of commands in one transaction. Each is
    /// decided and its rows written in turn, exactly as one command alone,
    /// so a later command sees what an earlier one decided; the rows of all
    /// of them then commit together. Either every reply is returned, or
    /// none: a failed write or commit anywhere in the batch rolls the whole
    /// batch back and poisons the object, so nothing unwritten is
    /// acknowledged. At most `COMMANDS_PER_BATCH_MAX` commands.
    pub fn commands(
        &mut self,
        store: &mut impl Storage,
        cmds: &[Command],
        now_ms: u64,
    ) -> Result<Vec<Reply>, StorageError> {
        assert!(
            cmds.len() <= COMMANDS_PER_BATCH_MAX,
            "a batch over its limit"
        );
        let snapshots_before = self.delivery.snapshots;
        let result = if !self.poisoned && cmds.iter().all(Command::is_read) {
            // Reads of a loaded object ask for no change (the gate's read
            // methods take it shared), so they write nothing and need no
            // transaction: what they read is committed, and one would cost a
            // savepoint and its release for nothing.
            let replies = cmds
                .iter()
                .map(|cmd| self.decide(store, cmd, now_ms))
                .collect();
            self.note_history(now_ms);
            replies
        } else {
            store.atomically(|s| {
                self.ensure_loaded(s)?;
                let replies = cmds
                    .iter()
                    .map(|cmd| self.decide(s, cmd, now_ms))
                    .collect::<Result<Vec<_>, _>>()?;
                self.persist_history(s, now_ms)?;
                Ok(replies)
            })
        };
        if result.is_err() {
            // The rows are rolled back, so memory is ahead of storage. Even
            // when the body succeeded and only the commit failed.
            self.poisoned = true;
            self.delivery.snapshots = snapshots_before;
        } else {
            let work = &mut self.delivery.work;
            work.batches += 1;
            work.commands += cmds.len() as u64;
            work.batch_commands_max = work.batch_commands_max.max(cmds.len() as u64);
            self.note_settled(now_ms);
        }
        result
    }

    fn decide(
        &mut self,
        store: &mut impl Storage,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        if matches!(cmd, Command::Sync { .. }) {
            self.delivery.snapshots += 1;
        }
        if matches!(
            cmd,
            Command::History { .. }
                | Command::Shard {
                    operation: ShardOp::History,
                    ..
                }
        ) {
            // What the batch before decided is in the history it reads.
            self.note_history(now_ms);
        }
        let existed = self.product.is_some();
        let reader = Reader::new(store);
        let reply = service::execute(
            &mut self.product,
            cmd,
            now_ms,
            &self.delivery,
            &self.id_secret,
            &reader,
        );
        let store = reader.finish()?;
        let mut reply = reply;
        if self.draw_lottery_key() && matches!(cmd, Command::Configure { .. }) && reply.status < 300
        {
            // The admin's answer is the product as it now stands: with the
            // commitment to the key just drawn.
            if let Some(p) = &self.product {
                reply.body = crate::http::views::product(&p.gate, &p.id, now_ms);
            }
        }
        let created = !existed && self.product.is_some();
        self.persist(store, created)?;
        Ok(reply)
    }

    /// Units the reserves of `cmds` need in all, if they are for a stock
    /// shard that must call home before it can decide them: one that does
    /// not exist yet, whose rules lapsed, whose copy of the waiting room
    /// would refuse a ticket, or with too few units and no fresh word from
    /// home that none is left elsewhere. One call serves the batch.
    pub fn home_call_needed<'c>(
        &self,
        cmds: impl IntoIterator<Item = &'c Command>,
        now_ms: u64,
    ) -> Option<u64> {
        let mut need = 0u64;
        let mut any = false;
        let mut stale_room = false;
        for cmd in cmds {
            if let Command::Shard {
                operation: op @ ShardOp::Reserve { ticket, .. },
                ..
            } = cmd
            {
                any = true;
                need += op.units();
                if let (Some(p), Some(t)) = (&self.product, ticket) {
                    stale_room |= p.gate.room_copy_refuses(now_ms, t);
                }
            }
        }
        if !any {
            return None;
        }
        match &self.product {
            None => Some(need),
            Some(p) => (stale_room || p.gate.must_call_home(now_ms, need)).then_some(need),
        }
    }

    /// The report a stock shard sends home now, with the product id (home's
    /// object name): an ask for `need` units (0: a background report, if
    /// one is due). A shard that does not exist yet is created from
    /// `first`, the reserve that needs it. Whatever the report debits (a
    /// surplus given back) is written before it is returned, so a report
    /// never claims a return storage does not hold.
    pub fn report_home(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
        first: Option<&Command>,
        need: u64,
    ) -> Result<Option<(String, ShardReport)>, StorageError> {
        let result = store.atomically(|s| {
            self.ensure_loaded(s)?;
            let mut created = false;
            if self.product.is_none() {
                let Some(Command::Shard {
                    product_id,
                    at,
                    operation: ShardOp::Reserve { .. },
                }) = first
                else {
                    return Ok(None);
                };
                self.product = Some(Product::new(
                    product_id.clone(),
                    Gate::shard(at.index(), at.count()),
                    &self.id_secret,
                ));
                created = true;
            }
            let Some(p) = self.product.as_mut() else {
                return Ok(None);
            };
            let report = p.gate.poll_report(now_ms, need);
            let home = p.id.clone();
            self.persist(s, created)?;
            self.persist_history(s, now_ms)?;
            Ok(report.map(|r| (home, r)))
        });
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Home's answer to a report (or why there was none), written at once.
    pub fn handle_home_reply(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
        reply: Result<ShardReply, String>,
    ) -> Result<(), StorageError> {
        if self.poisoned {
            return Ok(());
        }
        let Some(p) = self.product.as_mut() else {
            return Ok(());
        };
        match reply {
            Ok(reply) => p.gate.handle_shard_reply(&reply),
            Err(_) => p.gate.handle_call_failed(now_ms),
        }
        let written = store.atomically(|s| {
            self.persist(s, false)?;
            self.persist_history(s, now_ms)
        });
        if written.is_err() {
            self.poisoned = true;
        }
        written
    }

    /// A stock shard answers home's push at once (never behind its own
    /// call home, which may be waiting for home): the rules and the grant
    /// taken, a drain's units given back and written, and its report, with
    /// the buyers whose replays must reach it when it has no unit left.
    /// A shard that does not exist yet is made by home's first push (home
    /// makes its shards as the product is made, so that they live near it:
    /// an object is placed near whoever first calls it). Only objects
    /// send pushes; the edge cannot.
    pub fn answer_push(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
        product_id: &str,
        at: ShardAt,
        push: &HomePush,
    ) -> Result<Option<ShardAnswer>, StorageError> {
        let result = store.atomically(|s| {
            self.ensure_loaded(s)?;
            let created = self.product.is_none();
            if created {
                self.product = Some(Product::new(
                    product_id.to_string(),
                    Gate::shard(at.index(), at.count()),
                    &self.id_secret,
                ));
            }
            let Some(p) = self.product.as_mut() else {
                return Ok(None);
            };
            let Some(report) = p.gate.handle_push(now_ms, push) else {
                return Ok(None);
            };
            let buyers = (report.levels.available == 0)
                .then(|| BuyerFilter::from_bloom(p.gate.buyers_filter()));
            self.persist(s, created)?;
            self.persist_history(s, now_ms)?;
            Ok(Some(ShardAnswer { report, buyers }))
        });
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Home takes a shard's report and decides what to do with its ask
    /// (`Gate::handle_shard_report`), written at once. The shell hands the
    /// same report in again after the drains it is asked to send; with
    /// `give_up`, home answers with what it knows.
    pub fn answer_report(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
        report: &ShardReport,
        give_up: bool,
    ) -> Result<Result<HomeStep, ReportRefusal>, StorageError> {
        let result = store.atomically(|s| {
            self.ensure_loaded(s)?;
            let Some(p) = self.product.as_mut() else {
                return Ok(Err(ReportRefusal::NoSuchShard));
            };
            let step = p.gate.handle_shard_report(now_ms, report, give_up);
            self.persist(s, false)?;
            self.persist_history(s, now_ms)?;
            Ok(step)
        });
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// The push for stock shard `index` now, and the shard's address.
    pub fn push_for(&self, index: u16, drain: bool) -> Option<(String, ShardAt, HomePush)> {
        let p = self.product.as_ref()?;
        let at = ShardAt::new(index, p.gate.shards())?;
        Some((p.id.clone(), at, p.gate.push_for(index, drain)?))
    }

    /// Shard `index`'s answer to a push sent at `sent_at_ms` (`None`: none
    /// came in time), written at once; its buyers kept for the snapshot.
    pub fn handle_push_answer(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
        index: u16,
        sent_at_ms: u64,
        drain: bool,
        answer: Option<ShardAnswer>,
    ) -> Result<(), StorageError> {
        if self.poisoned {
            return Ok(());
        }
        let Some(p) = self.product.as_mut() else {
            return Ok(());
        };
        let applied = p.gate.handle_push_answer(
            now_ms,
            index,
            sent_at_ms,
            drain,
            answer.as_ref().map(|a| &a.report),
        );
        if applied.is_err() {
            // A shard's answer home refuses is a bug signal; it changed
            // nothing.
            return Ok(());
        }
        if let Some(buyers) = answer.and_then(|a| a.buyers) {
            if let Some(slot) = p.shard_buyers.get_mut(usize::from(index)) {
                *slot = Some(buyers);
            }
        }
        let written = store.atomically(|s| {
            self.persist(s, false)?;
            self.persist_history(s, now_ms)
        });
        if written.is_err() {
            self.poisoned = true;
        }
        written
    }

    /// At home, the shards to drain before the batch `cmds` is decided:
    /// for its reserves when `U` cannot cover them, and for a snapshot when
    /// the product looks sold out and its proofs are old. `Some(empty)`:
    /// decide now; `None`: drains this needs are out, look again shortly.
    /// With `give_up` the reserves are decided on what is known.
    pub fn drains_needed<'c>(
        &mut self,
        cmds: impl IntoIterator<Item = &'c Command> + Clone,
        now_ms: u64,
        give_up: bool,
    ) -> Option<Vec<u16>> {
        let Some(p) = self.product.as_mut() else {
            return Some(Vec::new());
        };
        if p.gate.shards() < 2 || p.gate.shard_index() > 0 || self.poisoned {
            return Some(Vec::new());
        }
        let need: u64 = cmds
            .clone()
            .into_iter()
            .map(|c| match c {
                Command::Reserve { quantity, .. } => u64::from(*quantity),
                _ => 0,
            })
            .sum();
        let mut drains = if need > 0 {
            p.gate.poll_drains(now_ms, need, give_up)?
        } else {
            Vec::new()
        };
        if !give_up && cmds.into_iter().any(|c| matches!(c, Command::Sync { .. })) {
            drains.extend(p.gate.poll_proofs(now_ms));
        }
        drains.sort_unstable();
        drains.dedup();
        Some(drains)
    }

    /// At home, the shards that have not taken the current rules, and,
    /// the first time it is asked, those not made yet. (A shard home
    /// could not make then is made by its first reserve.)
    pub fn rules_behind(&mut self) -> Vec<u16> {
        let make = !std::mem::replace(&mut self.shards_made, true);
        self.product.as_ref().map_or_else(Vec::new, |p| {
            let mut shards = p.gate.rules_behind();
            if make {
                shards.extend(p.gate.shards_unmade());
            }
            shards
        })
    }

    /// At home, when the current rules bind every shard (`None`: now).
    pub fn rules_bind_at(&self, now_ms: u64) -> Option<u64> {
        self.product.as_ref()?.gate.rules_bind_at(now_ms)
    }

    /// The alarm fired: expire what is due and write it. Returns how many
    /// holds expired.
    pub fn alarm(&mut self, store: &mut impl Storage, now_ms: u64) -> Result<u32, StorageError> {
        self.alarm_at_ms = None;
        let result = store.atomically(|s| {
            self.ensure_loaded(s)?;
            let expired = match self.product.as_mut() {
                Some(p) => p.gate.handle_timeout(now_ms),
                None => 0,
            };
            self.persist(s, false)?;
            self.persist_history(s, now_ms)?;
            Ok(expired)
        });
        if result.is_err() {
            self.poisoned = true;
        } else {
            self.delivery.work.alarms += 1;
            self.note_settled(now_ms);
        }
        result
    }

    fn note_settled(&mut self, now_ms: u64) {
        if let Some(p) = &self.product {
            let n = u64::from(p.gate.settled_in_event(now_ms));
            let most = &mut self.delivery.work.settled_per_event_max;
            *most = (*most).max(n);
        }
    }

    /// The instant to set the alarm to, if it must move: only earlier, since
    /// an alarm that fires early finds nothing due and sets the next one. A
    /// deadline already passed means "as soon as possible", which the
    /// runtime wants as a future instant. An alarm already set at or before
    /// that instant (even one already due, and not yet delivered) stays: a
    /// batch must never push a pending alarm later, or steady traffic could
    /// keep it from ever firing.
    pub fn alarm_to_set(&self, now_ms: u64) -> Option<u64> {
        let gate = &self.product.as_ref()?.gate;
        // A stock shard also wakes to report home (`Gate::poll_report_at`).
        // And to write the history's unwritten notes when they are due.
        let history = self.product.as_ref()?.history.flush_at();
        let next = [gate.poll_timeout(), gate.poll_report_at(now_ms), history]
            .into_iter()
            .flatten()
            .min()?;
        let target = next.max(now_ms + 1);
        match self.alarm_at_ms {
            Some(at) if at <= target => None,
            _ => Some(target),
        }
    }

    /// The shell set the alarm to `at_ms`.
    pub fn alarm_set(&mut self, at_ms: u64) {
        self.alarm_at_ms = Some(at_ms);
    }

    /// The shell found this alarm already set when the object started.
    pub fn alarm_found(&mut self, at_ms: Option<u64>) {
        self.alarm_at_ms = at_ms;
    }

    /// Leases the next outbox batch for the shell to send, if one is due.
    pub fn lease(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
    ) -> Result<Option<Lease>, StorageError> {
        self.ensure_loaded(store)?;
        let Some(p) = self.product.as_mut() else {
            return Ok(None);
        };
        let entries = p
            .gate
            .poll_outbox(now_ms, crate::limits::EVENTS_PER_BATCH_MAX);
        let Some(last) = entries.last() else {
            return Ok(None);
        };
        Ok(Some(Lease {
            up_to_seq: last.seq,
            batch: delivery::batch(&p.id, &p.ids, &entries),
            generation: self.generation,
        }))
    }

    /// Applies a delivery's result, after the await that produced it: an
    /// ack or a nack of the lease, written at once. `jitter_seed` spreads
    /// the retry.
    pub fn handle_delivery(
        &mut self,
        store: &mut impl Storage,
        lease: Lease,
        result: Result<BatchResult, DeliveryError>,
        now_ms: u64,
        jitter_seed: u64,
    ) -> Result<DeliveryOutcome, StorageError> {
        // The await may have let another event fail a write (poison) or
        // reload the gate: this lease then belongs to a gate that is gone.
        if self.poisoned || lease.generation != self.generation {
            return Ok(DeliveryOutcome::Stale);
        }
        let Some(p) = self.product.as_mut() else {
            return Ok(DeliveryOutcome::Stale);
        };
        let settled = match result {
            Ok(answer) => match p.gate.handle_ack(lease.up_to_seq) {
                AckOutcome::Acked { entries } => DeliveryOutcome::Acked {
                    entries,
                    refused: answer.refused() as u64,
                },
                refused => DeliveryOutcome::AckRefused(refused),
            },
            Err(error) => {
                let nacked = p.gate.handle_nack(now_ms, jitter_seed);
                DeliveryOutcome::Failed { error, nacked }
            }
        };
        let written = store.atomically(|s| {
            self.persist(s, false)?;
            self.persist_history(s, now_ms)
        });
        if written.is_err() {
            // Nothing of it is stored, and the batch goes again: the
            // delivery telemetry must not count it yet.
            self.poisoned = true;
            return written.map(|()| settled);
        }
        match &settled {
            DeliveryOutcome::Acked { refused, .. } => {
                self.delivery.refused += refused;
                self.delivery.last_success_ms = Some(now_ms);
                self.delivery.last_error = None;
            }
            DeliveryOutcome::Failed { error, .. } => {
                self.delivery.last_error = Some(error.describe())
            }
            DeliveryOutcome::AckRefused(_) | DeliveryOutcome::Stale => {}
        }
        Ok(settled)
    }

    /// For tests and the simulator: the rows the object holds in memory
    /// (every stored row but the paid records, which stay in storage).
    pub fn rows(&self) -> Option<(&str, Vec<Row>)> {
        self.product
            .as_ref()
            .map(|p| (p.id.as_str(), p.gate.rows()))
    }

    /// When the gate next has work, as the alarm must cover it.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        let p = self.product.as_ref()?;
        [p.gate.poll_timeout(), p.history.flush_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The alarm the object believes is set.
    pub fn alarm_at_ms(&self) -> Option<u64> {
        self.alarm_at_ms
    }

    /// What live viewers see of the product now, loading first if memory
    /// cannot be trusted; `None` if this object holds no product.
    pub fn live_state(
        &mut self,
        store: &mut impl Storage,
        now_ms: u64,
    ) -> Result<Option<LiveState>, StorageError> {
        self.ensure_loaded(store)?;
        Ok(self.live_now(now_ms))
    }

    /// `live_state` from memory as it is, for the push after a batch or an
    /// alarm (which loaded, or failed and left nothing to push).
    pub fn live_now(&self, now_ms: u64) -> Option<LiveState> {
        if self.poisoned {
            return None;
        }
        let l = self.product.as_ref()?.gate.levels(now_ms);
        Some(LiveState {
            state: l.sale_state.as_str(),
            stock_total: l.stock_total,
            available: l.available,
            held: l.held,
            sold: l.sold,
        })
    }

    /// Whether this object is a stock shard of its product (not its home).
    pub fn is_shard(&self) -> bool {
        self.product
            .as_ref()
            .is_some_and(|p| p.gate.shard_index() > 0)
    }

    /// The product's id, once one is loaded.
    pub fn product_id(&self) -> Option<&str> {
        self.product.as_ref().map(|p| p.id.as_str())
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    pub fn delivery(&self) -> &ShellStatus {
        &self.delivery
    }
}
