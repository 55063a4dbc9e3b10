//! The gate's side of the escrow (`escrow.rs`): a product whose stock
//! lives in K stock shards. A further `impl Gate` block, beside `gate.rs`.
//!
//! A gate is one of three kinds (`Escrow`):
//! - `Single`, a product of one shard (K = 1, the default): exactly the
//!   gate as it always was, its stock all its own;
//! - `Home`, shard 0 of a product of K ≥ 2: it keeps the `Pool`, draws from
//!   `U` in the turn of the reserve that needs it, gives every unit it does
//!   not hold or sell back to `U` at once, answers the shards' reports,
//!   drains them when it must know where units are, pushes its rules to
//!   them, and alone tells the origin the stock total;
//! - `Shard`, shard i ≥ 1: it keeps a `Ledger`, sells only what home
//!   granted it, decides reserves only under rules whose lease holds, tells
//!   a buyer `sold_out` only on home's word that nothing is left
//!   elsewhere, and tells the origin nothing but its own orders and voids.
//!
//! In every kind the gate's `escrowed` is the units it may sell (the stock
//! total for `Single`; for home and a shard, its escrow), so I1 and every
//! check of `gate.rs` hold unchanged per shard. `stock_total` is only ever
//! the product's (`Gate::product_total`).

use serde::{Deserialize, Serialize};

use crate::escrow::{
    limits, Ask, HomePush, HomeRules, Ledger, Pool, ReportRefusal, Said, ShardLevels, ShardReply,
    ShardReport,
};
use crate::gate::Gate;
use crate::outcome::ReserveOutcome;

/// Which part of a product's stock a gate keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Escrow {
    #[default]
    Single,
    Home(Pool),
    Shard(Ledger),
}

/// What home does with a shard's report (`Gate::handle_shard_report`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HomeStep {
    /// Answer the shard (the shell fills in `drains`).
    Reply(Box<ShardReply>),
    /// Drain these shards first, then hand the report in again.
    Drain(Vec<u16>),
    /// Drains this answer waits for are out; hand the report in again
    /// shortly.
    Wait,
}

impl Escrow {
    /// Forgets what lives in memory only (a call out, drains out, proofs),
    /// as a restart does whatever the storage: a restored gate knows only
    /// what it wrote.
    pub(crate) fn forget_memory(&mut self) {
        match self {
            Escrow::Single => {}
            Escrow::Home(pool) => {
                for s in &mut pool.shards {
                    s.drain = crate::escrow::Drain::default();
                }
            }
            Escrow::Shard(ledger) => ledger.call = crate::escrow::Call::Idle,
        }
    }
}

impl Gate {
    /// Shard `index` of a product of `count` shards, before it has heard
    /// from home: no units, and no rules, so it decides nothing until
    /// home's first reply.
    pub fn shard(index: u16, count: u16) -> Gate {
        let mut gate = Gate::empty(
            crate::config::Config::default(),
            crate::config::Mode::Closed,
            0,
            1,
            crate::outbox::Outbox::default(),
        );
        gate.escrow = Escrow::Shard(Ledger::new(index, count));
        gate.dirty.meta = true;
        gate.dirty.config = true;
        gate.dirty.admission = true;
        gate.dirty.escrow = true;
        gate
    }

    /// Turns a new product's gate into the home of `count` shards: every
    /// unit goes to `U`.
    pub(crate) fn become_home(&mut self, count: u16) {
        debug_assert!(self.held == 0 && self.sold == 0);
        let total = self.escrowed;
        self.escrow = Escrow::Home(Pool::new(total, count));
        self.escrowed = 0;
        self.available = 0;
        self.dirty.escrow = true;
        self.assert_stock();
    }

    /// How many stock shards the product has.
    pub fn shards(&self) -> u16 {
        match &self.escrow {
            Escrow::Single => 1,
            Escrow::Home(pool) => pool.count(),
            Escrow::Shard(ledger) => ledger.count,
        }
    }

    /// This gate's shard: 0 for home (and a single product).
    pub fn shard_index(&self) -> u16 {
        match &self.escrow {
            Escrow::Single | Escrow::Home(_) => 0,
            Escrow::Shard(ledger) => ledger.index,
        }
    }

    pub fn escrow(&self) -> &Escrow {
        &self.escrow
    }

    /// Whether this gate is a stock shard, which takes no admin's change.
    pub(crate) fn is_shard(&self) -> bool {
        matches!(self.escrow, Escrow::Shard(_))
    }

    /// The product's stock total: home's pool, or the gate's own. A shard
    /// knows only its escrow.
    pub fn product_total(&self) -> u64 {
        match &self.escrow {
            Escrow::Home(pool) => pool.stock_total,
            Escrow::Single | Escrow::Shard(_) => self.escrowed,
        }
    }

    /// Units a reserve here may take now: the gate's own, and at home also
    /// `U`, which it draws from in the same turn.
    pub(crate) fn sellable(&self) -> u64 {
        match &self.escrow {
            Escrow::Home(pool) => self.available + pool.unallocated(),
            Escrow::Single | Escrow::Shard(_) => self.available,
        }
    }

    /// Units the product can still sell anywhere, as this gate knows it:
    /// what the waiting room advances on.
    pub(crate) fn product_available(&self) -> u64 {
        match &self.escrow {
            Escrow::Home(pool) => self.available + pool.shards_levels().available,
            Escrow::Single | Escrow::Shard(_) => self.available,
        }
    }

    /// After the line of a reserve: home takes from `U` what `quantity`
    /// needs beyond its own available units.
    pub(crate) fn draw(&mut self, quantity: u64) {
        let Escrow::Home(pool) = &mut self.escrow else {
            return;
        };
        let short = quantity.saturating_sub(self.available);
        if short == 0 {
            return;
        }
        let got = pool.grant(0, short);
        assert_eq!(got, short, "a reserve drew more than U held");
        self.escrowed += got;
        self.available += got;
        self.dirty.escrow = true;
        self.dirty.meta = true;
        self.assert_stock();
    }

    /// Home gives every unit it does not hold or sell back to `U`, so that
    /// no unit waits at home while a shard's buyer asks. Called wherever
    /// home's available units grow.
    pub(crate) fn give_back_home(&mut self) {
        let Escrow::Home(pool) = &mut self.escrow else {
            return;
        };
        if self.available == 0 {
            return;
        }
        pool.give_back_home(self.available);
        self.escrowed -= self.available;
        self.available = 0;
        self.dirty.escrow = true;
        self.dirty.meta = true;
        self.assert_stock();
    }

    /// The product's levels: for home, summed over every shard as each last
    /// reported, with `U` counted as available.
    pub(crate) fn product_levels(&self) -> ShardLevels {
        let own = self.own_levels();
        match &self.escrow {
            Escrow::Home(pool) => {
                let s = pool.shards_levels();
                ShardLevels {
                    available: own.available + s.available,
                    held: own.held + s.held,
                    sold: own.sold + s.sold,
                }
            }
            Escrow::Single | Escrow::Shard(_) => own,
        }
    }

    /// This gate's own levels, as a shard reports them.
    fn own_levels(&self) -> ShardLevels {
        ShardLevels {
            available: self.available,
            held: self.held,
            sold: self.sold,
        }
    }

    /// A reserve of `units` was decided here: a shard measures its demand.
    pub(crate) fn note_demand(&mut self, now_ms: u64, units: u64) {
        if let Escrow::Shard(ledger) = &mut self.escrow {
            ledger.demand.record(now_ms, units);
        }
    }

    /// The escrow's figures, at home.
    pub fn escrow_overview(&self) -> Option<crate::escrow::Overview> {
        match &self.escrow {
            Escrow::Home(pool) => {
                let mut stats = pool.stats();
                stats.per_shard[0].levels = self.own_levels();
                Some(stats)
            }
            Escrow::Single | Escrow::Shard(_) => None,
        }
    }

    // ----- what a buyer hears when units are short ------------------------

    /// The answer to a reserve of `quantity` when only `sellable` units
    /// are here (fewer than it needs): `sold_out` (or the units there are)
    /// only when no unit is available elsewhere, within the lag; otherwise
    /// the reserve could not be decided, and says so.
    pub(crate) fn shortage(&self, now_ms: u64, sellable: u64) -> ReserveOutcome {
        let none_elsewhere = match &self.escrow {
            Escrow::Single => true,
            Escrow::Home(pool) => pool.none_elsewhere(now_ms),
            Escrow::Shard(ledger) => ledger.none_elsewhere(now_ms),
        };
        if !none_elsewhere {
            ReserveOutcome::Unavailable {
                retry_after_ms: limits::UNDECIDED_RETRY_MS,
            }
        } else if sellable == 0 {
            ReserveOutcome::SoldOut
        } else {
            ReserveOutcome::InsufficientStock {
                available: sellable,
            }
        }
    }

    /// Whether a shard's rules have lapsed: it never heard from home, or
    /// its lease ended. It decides no reserve until it has asked again.
    pub(crate) fn rules_lapsed(&self, now_ms: u64) -> bool {
        match &self.escrow {
            Escrow::Shard(ledger) => !ledger.leased(now_ms),
            Escrow::Single | Escrow::Home(_) => false,
        }
    }

    // ----- a shard ------------------------------------------------------

    /// Whether a buyer who asks for `needed` units here must wait for a
    /// call home first: a shard whose rules lapsed, or one with too few
    /// units and no fresh word from home that none is left elsewhere.
    pub fn must_call_home(&self, now_ms: u64, needed: u64) -> bool {
        let Escrow::Shard(ledger) = &self.escrow else {
            return false;
        };
        !ledger.leased(now_ms) || (self.available < needed && !ledger.none_elsewhere(now_ms))
    }

    /// Whether a shard's copy of home's waiting room is too old for
    /// `ticket`: the room admits by time and this copy does not yet admit
    /// it. Home may have counted more tickets since (the edge reports them
    /// to home, not to shards), so the shard refreshes its copy with a call
    /// home before it turns the ticket away.
    pub fn room_copy_refuses(&self, now_ms: u64, ticket: &crate::admission::Ticket) -> bool {
        if !self.is_shard() || self.config.admit_per_s == 0 {
            return false;
        }
        let rules = self.admission_rules();
        !self
            .room
            .admission
            .watermark(now_ms, rules)
            .admits(ticket.key(rules.opens_at_ms))
    }

    /// The report to send home now: an ask for `need` units that waiting
    /// buyers need in all, or with `need` 0 a background report, only if
    /// one is due (`poll_report_at`). A surplus is debited here, before the
    /// report that carries it leaves, so the shell must write the changes
    /// (`poll_changes`) before it sends.
    pub fn poll_report(&mut self, now_ms: u64, need: u64) -> Option<ShardReport> {
        if need == 0 && self.poll_report_at(now_ms).is_none_or(|at| at > now_ms) {
            return None;
        }
        let backlog_units = self.outbox.backlog_units();
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return None;
        };
        if matches!(ledger.call, crate::escrow::Call::Out { .. }) {
            return None;
        }
        let surplus = if need == 0 && ledger.joined() {
            ledger.surplus(now_ms, self.available)
        } else {
            0
        };
        if surplus > 0 {
            ledger.send_return(surplus);
            self.available -= surplus;
            self.escrowed -= surplus;
            self.dirty.meta = true;
        }
        let refill = ledger.refill(now_ms, self.available);
        let levels = ShardLevels {
            available: self.available,
            held: self.held,
            sold: self.sold,
        };
        let said = Said {
            levels,
            backlog_units,
            returns_sent: ledger.returns_sent,
        };
        let seq = ledger.sent(now_ms, said, need);
        // The report's number, and any return it carries, are written
        // before it leaves, so a restart never numbers a later report
        // below it, nor forgets a return home may already hold.
        self.dirty.escrow = true;
        let report = ShardReport {
            index: ledger.index,
            seq,
            grants_applied: ledger.grants_applied,
            returns_sent: ledger.returns_sent,
            levels,
            backlog_units,
            need,
            refill,
            rules_version: ledger.rules_version,
            counts: ledger.counts,
        };
        self.assert_stock();
        Some(report)
    }

    /// Takes home's rules, if they are at least as new as the shard's.
    fn take_rules(&mut self, rules: &HomeRules) {
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return;
        };
        let Some(rules) = ledger.newer_rules(rules) else {
            return;
        };
        if self.config != rules.config {
            self.config = rules.config.clone();
            self.dirty.config = true;
        }
        if self.mode != rules.mode {
            self.mode = rules.mode;
        }
        if self.room.admission != rules.admission {
            self.room.admission = rules.admission.clone();
            self.dirty.admission = true;
        }
        self.dirty.meta = true;
        self.dirty.escrow = true;
    }

    /// Applies home's cumulative grant: the units credited.
    fn take_grant(&mut self, granted: u64) -> u64 {
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return 0;
        };
        let credit = ledger.apply_grant(granted);
        self.escrowed += credit;
        self.available += credit;
        self.dirty.meta = true;
        self.dirty.escrow = true;
        credit
    }

    /// Home's reply to a report: apply the grant and take its rules and
    /// waiting room. Only the reply to the report out settles the call,
    /// renews the lease and says what is left elsewhere; a late or
    /// repeated reply credits nothing twice (grants are cumulative) and
    /// never puts older rules back.
    pub fn handle_shard_reply(&mut self, reply: &ShardReply) {
        self.take_grant(reply.granted);
        if let Escrow::Shard(ledger) = &mut self.escrow {
            ledger.seen(reply.seen);
            ledger.replied(reply);
        }
        self.take_rules(&reply.rules);
        self.dirty.escrow = true;
        self.assert_stock();
    }

    /// The call home failed (or its answer was lost): the next report goes
    /// after a backoff, with the same cumulative counters, so nothing
    /// applies twice.
    pub fn handle_call_failed(&mut self, now_ms: u64) {
        if let Escrow::Shard(ledger) = &mut self.escrow {
            ledger.call_failed(now_ms);
        }
    }

    /// Home's push: its grant and rules, and for a drain, every available
    /// unit given back. Answered with a report, which home applies as any
    /// other. The shell writes the changes before it answers, so that a
    /// return home will hold is never forgotten here. `None` if this is no
    /// shard.
    pub fn handle_push(&mut self, now_ms: u64, push: &HomePush) -> Option<ShardReport> {
        self.take_grant(push.granted);
        self.take_rules(&push.rules);
        let backlog_units = self.outbox.backlog_units();
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return None;
        };
        ledger.seen(push.seen);
        if push.drain && self.available > 0 {
            ledger.send_return(self.available);
            self.escrowed -= self.available;
            self.available = 0;
        }
        let levels = ShardLevels {
            available: self.available,
            held: self.held,
            sold: self.sold,
        };
        let said = Said {
            levels,
            backlog_units,
            returns_sent: ledger.returns_sent,
        };
        // Home's next message says whether the answer arrived; without
        // one, the shard reports again (`PUSH_ACK_GRACE_MS`).
        let seq = ledger.answered(now_ms, said);
        let report = ShardReport {
            index: ledger.index,
            seq,
            grants_applied: ledger.grants_applied,
            returns_sent: ledger.returns_sent,
            levels,
            backlog_units,
            need: 0,
            refill: 0,
            rules_version: ledger.rules_version,
            counts: ledger.counts,
        };
        self.dirty.meta = true;
        self.dirty.escrow = true;
        self.assert_stock();
        Some(report)
    }

    /// When a shard should next report in the background, if it has
    /// reason to (`Ledger::report_at`): nothing while its levels rest.
    pub fn poll_report_at(&self, now_ms: u64) -> Option<u64> {
        let Escrow::Shard(ledger) = &self.escrow else {
            return None;
        };
        let refill_wanted = ledger.clone().refill(now_ms, self.available) > 0;
        ledger.report_at(
            self.own_levels(),
            self.outbox.backlog_units(),
            refill_wanted,
        )
    }

    // ----- home ---------------------------------------------------------

    /// Home's rules as the shards take them.
    pub fn home_rules(&self) -> HomeRules {
        let version = match &self.escrow {
            Escrow::Home(pool) => pool.rules_version,
            Escrow::Single | Escrow::Shard(_) => 0,
        };
        HomeRules {
            version,
            config: self.config.clone(),
            mode: self.mode,
            admission: self.room.admission.clone(),
        }
    }

    /// A shard's report, at home: its returns land in `U` (lower before
    /// raise), its levels are taken if newest, and its ask is answered
    /// from the pool (`Pool::ask`), or after drains the shell sends first.
    /// `give_up`: the bounded wait is over; answer with what is known.
    /// Handing the same report in again is harmless: its counters are
    /// cumulative.
    pub fn handle_shard_report(
        &mut self,
        now_ms: u64,
        report: &ShardReport,
        give_up: bool,
    ) -> Result<HomeStep, ReportRefusal> {
        self.settle(now_ms);
        let Escrow::Home(pool) = &mut self.escrow else {
            return Err(ReportRefusal::NoSuchShard);
        };
        pool.apply_report(report)?;
        self.dirty.escrow = true;
        let step = match pool.ask(now_ms, report.index, report.need, report.refill, give_up) {
            Ask::Answer(elsewhere) => {
                pool.leased(report.index, now_ms);
                let account = &pool.shards[usize::from(report.index)];
                let (granted, seen) = (account.granted, account.seq);
                HomeStep::Reply(Box::new(ShardReply {
                    seq: report.seq,
                    granted,
                    seen,
                    elsewhere,
                    drains: 0,
                    rules: self.home_rules(),
                }))
            }
            Ask::Drain(shards) => HomeStep::Drain(shards),
            Ask::Wait => HomeStep::Wait,
        };
        self.sync_admission(now_ms);
        Ok(step)
    }

    /// The shards home must drain before it decides home's own reserves,
    /// which need `need` units in all: none while `U` covers them; else
    /// every other shard not freshly proven empty (`Pool::ask`). `None`
    /// when the drains it needs are already out (ask again shortly).
    pub fn poll_drains(&mut self, now_ms: u64, need: u64, give_up: bool) -> Option<Vec<u16>> {
        let Escrow::Home(pool) = &mut self.escrow else {
            return Some(Vec::new());
        };
        match pool.ask(now_ms, 0, need, 0, give_up) {
            Ask::Answer(_) => Some(Vec::new()),
            Ask::Drain(shards) => Some(shards),
            Ask::Wait => None,
        }
    }

    /// The shards home must drain before its snapshot can say whether any
    /// unit is left (`Pool::proofs_wanted`).
    pub fn poll_proofs(&mut self, now_ms: u64) -> Vec<u16> {
        match &mut self.escrow {
            Escrow::Home(pool) => pool.proofs_wanted(now_ms),
            Escrow::Single | Escrow::Shard(_) => Vec::new(),
        }
    }

    /// The push for shard `index` now.
    pub fn push_for(&self, index: u16, drain: bool) -> Option<HomePush> {
        let Escrow::Home(pool) = &self.escrow else {
            return None;
        };
        let account = pool.shards.get(usize::from(index))?;
        Some(HomePush {
            granted: account.granted,
            seen: account.seq,
            drain,
            rules: self.home_rules(),
        })
    }

    /// A push to shard `index`, sent at `sent_at_ms`, was answered with
    /// `report` (`None`: it got no answer in time).
    pub fn handle_push_answer(
        &mut self,
        now_ms: u64,
        index: u16,
        sent_at_ms: u64,
        drain: bool,
        report: Option<&ShardReport>,
    ) -> Result<(), ReportRefusal> {
        let Escrow::Home(pool) = &mut self.escrow else {
            return Err(ReportRefusal::NoSuchShard);
        };
        let applied = match (report, drain) {
            (Some(r), true) => pool.drain_answered(sent_at_ms, r),
            (Some(r), false) => pool.apply_report(r).map(|_| ()),
            (None, true) => {
                pool.drain_failed(index, sent_at_ms);
                Ok(())
            }
            (None, false) => Ok(()),
        };
        self.dirty.escrow = true;
        self.sync_admission(now_ms);
        applied
    }

    /// How long ago no unit was available anywhere, if home can say so now
    /// (`Pool::sold_out_age`; for one shard, 0 while none is available).
    pub fn sold_out_age(&self, now_ms: u64) -> Option<u64> {
        match &self.escrow {
            Escrow::Single => (self.available == 0).then_some(0),
            Escrow::Home(pool) => {
                if self.available > 0 {
                    return None;
                }
                pool.sold_out_age(now_ms)
            }
            Escrow::Shard(_) => None,
        }
    }

    /// The shards that exist, a bit each (bit 0 is home).
    pub fn existing_shards(&self) -> u64 {
        match &self.escrow {
            Escrow::Home(pool) => pool.existing(),
            Escrow::Single | Escrow::Shard(_) => 1,
        }
    }

    /// The shards not made yet (`Pool::unmade`).
    pub fn shards_unmade(&self) -> Vec<u16> {
        match &self.escrow {
            Escrow::Home(pool) => pool.unmade(),
            Escrow::Single | Escrow::Shard(_) => Vec::new(),
        }
    }

    /// The shards that have not taken home's current rules.
    pub fn rules_behind(&self) -> Vec<u16> {
        match &self.escrow {
            Escrow::Home(pool) => pool.behind_rules(),
            Escrow::Single | Escrow::Shard(_) => Vec::new(),
        }
    }

    /// When home's current rules bind every shard (`Pool::rules_bind_at`):
    /// `None` once they do.
    pub fn rules_bind_at(&self, now_ms: u64) -> Option<u64> {
        match &self.escrow {
            Escrow::Home(pool) => pool.rules_bind_at(now_ms),
            Escrow::Single | Escrow::Shard(_) => None,
        }
    }
}
