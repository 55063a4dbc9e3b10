//! The gate's side of the escrow (`escrow.rs`): a product whose stock
//! lives in K stock shards. A further `impl Gate` block, beside `gate.rs`.
//!
//! A gate is one of three kinds (`Escrow`):
//! - `Single`, a product of one shard (K = 1, the default): exactly the
//!   gate as it always was, its stock all its own;
//! - `Home`, shard 0 of a product of K ≥ 2: it keeps the `Pool`, draws from
//!   `U` in the turn of the reserve that needs it, gives every unit it does
//!   not hold or sell back to `U` at once, answers the shards' reports, and
//!   alone tells the origin the stock total;
//! - `Shard`, shard i ≥ 1: it keeps a `Ledger`, sells only what home
//!   granted it, takes home's rules and waiting room from each reply, and
//!   tells the origin nothing but its own orders and voids.
//!
//! In every kind the gate's own `stock_total` is the units it may sell
//! (for home and a shard, its escrow), so I1 and every check of `gate.rs`
//! hold unchanged per shard.

use serde::{Deserialize, Serialize};

use crate::config::{Config, Mode};
use crate::escrow::{Ledger, Pool, ReportRefusal, ShardLevels, ShardReply, ShardReport};
use crate::gate::Gate;
use crate::outbox::Outbox;

/// Which part of a product's stock a gate keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Escrow {
    #[default]
    Single,
    Home(Pool),
    Shard(Ledger),
}

impl Gate {
    /// Shard `index` of a product of `count` shards, before it has heard
    /// from home: no units, and closed until home's first reply gives it
    /// the rules.
    pub fn shard(index: u16, count: u16) -> Gate {
        let mut gate = Gate::empty(Config::default(), Mode::Closed, 0, 1, Outbox::default());
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
        let total = self.stock_total;
        self.escrow = Escrow::Home(Pool::new(total, count));
        self.stock_total = 0;
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

    /// The product's stock total: home's pool, or the gate's own. A shard
    /// knows only its escrow.
    pub fn product_total(&self) -> u64 {
        match &self.escrow {
            Escrow::Home(pool) => pool.stock_total,
            Escrow::Single | Escrow::Shard(_) => self.stock_total,
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
        self.stock_total += got;
        self.available += got;
        self.dirty.escrow = true;
        self.dirty.meta = true;
        self.assert_stock();
    }

    /// Home gives every unit it does not hold or sell back to `U`, so that
    /// no unit waits at home while a shard starves. Called wherever home's
    /// available units grow.
    pub(crate) fn give_back_home(&mut self) {
        let Escrow::Home(pool) = &mut self.escrow else {
            return;
        };
        if self.available == 0 {
            return;
        }
        pool.give_back_home(self.available);
        self.stock_total -= self.available;
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
    pub fn escrow_stats(&self) -> Option<crate::escrow::EscrowStats> {
        match &self.escrow {
            Escrow::Home(pool) => {
                let mut stats = pool.stats();
                stats.per_shard[0].levels = ShardLevels {
                    available: self.available,
                    held: self.held,
                    sold: self.sold,
                };
                Some(stats)
            }
            Escrow::Single | Escrow::Shard(_) => None,
        }
    }

    // ----- a shard ------------------------------------------------------

    /// Whether a buyer who asks for `needed` units here must wait for a
    /// call home first: a shard that has not heard from home, or one with
    /// too few units while home may have more.
    pub fn must_call_home(&self, now_ms: u64, needed: u64) -> bool {
        let Escrow::Shard(ledger) = &self.escrow else {
            return false;
        };
        let home_empty = ledger
            .home_empty_at_ms
            .is_some_and(|at| now_ms < at + crate::escrow::limits::HOME_EMPTY_MS);
        !ledger.joined || (self.available < needed && !home_empty)
    }

    /// Whether a shard's copy of home's waiting room is too old for
    /// `ticket`: the room admits by time and this copy does not yet admit
    /// it. Home may have counted more tickets since (the edge reports them
    /// to home, not to shards), so the shard refreshes its copy with a call
    /// home before it turns the ticket away.
    pub fn room_copy_refuses(&self, now_ms: u64, ticket: &crate::admission::Ticket) -> bool {
        if !matches!(self.escrow, Escrow::Shard(_)) || self.config.admit_per_s == 0 {
            return false;
        }
        let rules = self.admission_rules();
        !self
            .admission
            .watermark(now_ms, rules)
            .admits(ticket.key(rules.opens_at_ms))
    }

    /// The report to send home now, if there is one to send: `needed`
    /// units for a buyer waiting (0 for a tick). A surplus is debited here,
    /// before the report that carries it leaves, so the shell must write
    /// the changes (`poll_changes`) before it sends.
    pub fn poll_report(&mut self, now_ms: u64, needed: u64) -> Option<ShardReport> {
        let levels = self.own_levels();
        let backlog_units = self.outbox.backlog_units();
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return None;
        };
        if needed == 0 && !ledger.wants_tick(now_ms, levels, backlog_units) {
            return None;
        }
        let surplus = if needed == 0 && ledger.joined {
            ledger.surplus(now_ms, self.available)
        } else {
            0
        };
        if surplus > 0 {
            ledger.send_return(surplus);
            self.available -= surplus;
            self.stock_total -= surplus;
            self.dirty.meta = true;
            self.dirty.escrow = true;
        }
        let want = ledger.want(now_ms, self.available, needed);
        let need = needed.saturating_sub(self.available).min(want);
        ledger.asked = need;
        ledger.calls.reports += 1;
        if needed > 0 {
            ledger.calls.sync += 1;
        }
        let calls = ledger.calls;
        // The surplus given back above changed the levels.
        let levels = ShardLevels {
            available: self.available,
            held: self.held,
            sold: self.sold,
        };
        ledger.reported = (levels, backlog_units);
        // The report's number and what it said are written before it
        // leaves, so a restart never numbers a later report below it.
        self.dirty.escrow = true;
        let report = ShardReport {
            index: ledger.index,
            grants_applied: ledger.grants_applied,
            returns_sent: ledger.returns_sent,
            levels,
            want,
            need,
            backlog_units,
            calls,
        };
        self.assert_stock();
        Some(report)
    }

    /// Home's reply to a report: apply the grant, give back what home
    /// asks, and take its rules and waiting room. A late or repeated reply
    /// credits nothing (grants are cumulative). Returns whether the shard
    /// must report again at once (it gave units back).
    pub fn handle_shard_reply(&mut self, now_ms: u64, reply: &ShardReply) -> bool {
        let Escrow::Shard(ledger) = &mut self.escrow else {
            return false;
        };
        ledger.joined = true;
        let credit = ledger.apply_grant(reply.granted);
        // Only the reply to the latest report settles the call: a late
        // reply to an earlier one (whose successor may be lost) credits
        // its grant and says nothing more.
        let latest = reply.answers == ledger.calls.reports;
        if latest {
            ledger.call_failed = false;
            // An ask home could not meet in full leaves the shard wanting:
            // it asks again at its ticks while its buyers may still ask.
            if credit < ledger.asked {
                ledger.starving_until_ms = now_ms + crate::escrow::limits::STARVING_MS;
            } else {
                ledger.starving_until_ms = 0;
            }
            ledger.asked = 0;
            ledger.home_empty_at_ms = (reply.unallocated == 0).then_some(now_ms);
        }
        let reclaim = reply.reclaim.min(self.available + credit);
        ledger.send_return(reclaim);
        // The latest reply means home heard every return sent before it.
        ledger.unreported = (ledger.unreported && !latest) || reclaim > 0;
        self.stock_total = self.stock_total + credit - reclaim;
        self.available = self.available + credit - reclaim;
        if self.config != reply.config {
            self.config = reply.config.clone();
            self.dirty.config = true;
        }
        if self.mode != reply.mode {
            self.mode = reply.mode;
        }
        if self.admission != reply.admission {
            self.admission = reply.admission.clone();
            self.dirty.admission = true;
        }
        self.dirty.meta = true;
        self.dirty.escrow = true;
        self.assert_stock();
        reclaim > 0
    }

    /// The call home failed (or its answer was lost): the next tick calls
    /// again, with the same cumulative counters, so nothing applies twice.
    pub fn handle_call_failed(&mut self) {
        if let Escrow::Shard(ledger) = &mut self.escrow {
            ledger.call_failed = true;
        }
    }

    /// When a shard should next report, if it has reason to.
    pub fn poll_report_at(&self, now_ms: u64) -> Option<u64> {
        let Escrow::Shard(ledger) = &self.escrow else {
            return None;
        };
        let levels = self.own_levels();
        ledger
            .wants_tick(now_ms, levels, self.outbox.backlog_units())
            .then_some(now_ms + crate::escrow::limits::REPORT_INTERVAL_MS)
    }

    // ----- home ---------------------------------------------------------

    /// A shard's report, at home: returns land in `U` before anything is
    /// granted (lower before raise), and if `U` is empty while another
    /// shard starves, home first gives back its own units.
    pub fn handle_shard_report(
        &mut self,
        now_ms: u64,
        report: &ShardReport,
    ) -> Result<ShardReply, ReportRefusal> {
        self.settle(now_ms);
        let Escrow::Home(pool) = &mut self.escrow else {
            return Err(ReportRefusal::NoSuchShard);
        };
        let (granted, reclaim) = pool.handle_report(now_ms, report)?;
        self.dirty.escrow = true;
        let reply = ShardReply {
            granted,
            reclaim,
            answers: report.calls.reports,
            unallocated: pool.unallocated(),
            config: self.config.clone(),
            mode: self.mode,
            admission: self.admission.clone(),
        };
        self.sync_admission(now_ms);
        Ok(reply)
    }
}
