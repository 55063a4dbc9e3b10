//! Escrow: one product's stock split over K stock shards, never oversold.
//!
//! The demarcation protocol (O'Neil 1986; Barbará and Garcia-Molina 1991;
//! the bounded counters of Balegas et al. 2015). The product's home object
//! keeps the unallocated pool `U` and, per shard, the units it has ever
//! granted and the units it has ever taken back:
//!
//! `U = stock_total − Σ (granted[i] − returned[i]) ≥ 0`.
//!
//! Each shard keeps, beside its gate, the grants it has applied and the
//! returns it has sent, and its gate's own I1 holds over their difference:
//!
//! `available + held + sold == grants_applied − returns_sent`.
//!
//! A shard applies a grant only as far as home's cumulative `granted[i]`
//! says (`grants_applied ≤ granted[i]`), and debits a return before it
//! reports it (`returns_sent ≥ returned[i]`). So whatever the network does
//! to the messages (delay, loss, duplication, reordering), `Σ (held + sold)`
//! over the shards is at most `Σ (granted[i] − returned[i]) ≤ stock_total`.
//! Every message carries cumulative counters rather than deltas, so a
//! retried or duplicated message applies nothing twice, and a late one
//! applies nothing at all.
//!
//! Home is shard 0 of its own product: its gate draws from `U` in the same
//! synchronous turn as the reserve that needs it, and gives back to `U`
//! every unit it does not hold or sell at the end of each decision, so home
//! never keeps a surplus and its own turns need no message. Shards 1..K are
//! objects of their own, which call home (`ShardReport`, answered by a
//! `ShardReply`) in the background to refill below a low watermark and to
//! return a surplus, and synchronously only when a buyer finds them empty.
//! Only home decides a grant; only a shard decides a return.

use serde::{Deserialize, Serialize};

use crate::admission::Admission;
use crate::config::{Config, Mode};

/// Limits and timings of the escrow, units last.
pub mod limits {
    /// The most stock shards one product may have (home included).
    pub const SHARDS_MAX: u16 = 64;
    /// A shard refills in the background once its available units would
    /// last less than this at its observed demand.
    pub const REFILL_LOW_MS: u64 = 1_000;
    /// A refill asks for this long of the shard's observed demand.
    pub const REFILL_TARGET_MS: u64 = 3_000;
    /// A shard gives back what it holds beyond this long of its observed
    /// demand.
    pub const SURPLUS_MS: u64 = 10_000;
    /// The fewest units a refill asks for, so that a shard whose demand is
    /// not yet measured does not call home for every reserve.
    pub const REFILL_UNITS_MIN: u64 = 4;
    /// How often a shard with units, a pending return or an unmet ask
    /// reports to home.
    pub const REPORT_INTERVAL_MS: u64 = 250;
    /// How long a shard's ask that home could not meet counts as a buyer
    /// still asking there, for whom home reclaims other shards' units.
    pub const STARVING_MS: u64 = 2_000;
    /// How long a shard trusts home's word that `U` is empty.
    pub const HOME_EMPTY_MS: u64 = 1_000;
    /// The window over which a shard measures its demand.
    pub const DEMAND_WINDOW_MS: u64 = 1_000;

    const _: () = assert!(REFILL_LOW_MS < REFILL_TARGET_MS);
    const _: () = assert!(REFILL_TARGET_MS < SURPLUS_MS);
}

/// A shard's levels as it last reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLevels {
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// What a shard tells home: its cumulative counters, its levels, and how
/// many units it asks for now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReport {
    pub index: u16,
    /// Units of grants the shard has applied, ever.
    pub grants_applied: u64,
    /// Units the shard has given back, ever (already debited there).
    pub returns_sent: u64,
    pub levels: ShardLevels,
    /// Units asked for now; 0 asks for nothing.
    pub want: u64,
    /// Of those, the units buyers are waiting for now (a batch's reserves
    /// the shard could not serve); the rest is a refill.
    #[serde(default)]
    pub need: u64,
    /// Units of orders and voids in the shard's outbox, not yet at the
    /// origin: the drift check counts them as on their way.
    #[serde(default)]
    pub backlog_units: i64,
    /// The shard's calls home so far.
    #[serde(default)]
    pub calls: Calls,
}

/// A shard's calls home, counted since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calls {
    /// Every report sent.
    pub reports: u64,
    /// Reports a buyer waited for (the shard could not decide a reserve on
    /// what it had).
    pub sync: u64,
}

/// Home's answer to a report: the cumulative grant to apply, units asked
/// back, and the product's rules as they are now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReply {
    /// Units home has granted this shard, ever.
    pub granted: u64,
    /// Units home asks this shard to give back now.
    pub reclaim: u64,
    /// The number of the report this answers (`Calls::reports`): a shard
    /// takes the grant of any reply (grants are cumulative), but only the
    /// reply to its latest report tells it that report arrived.
    #[serde(default)]
    pub answers: u64,
    /// `U` after this report: 0 tells the shard not to call home for every
    /// buyer it cannot serve (home would have nothing to give).
    pub unallocated: u64,
    pub config: Config,
    pub mode: Mode,
    /// The waiting room as home keeps it: a shard admits a ticket only when
    /// this admits it.
    pub admission: Admission,
}

/// Why home refused a report. Shards are objects of this Worker, so a
/// refusal is a bug signal, never an expected outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportRefusal {
    /// Not a shard of this product (0 is home, and reports to no one).
    NoSuchShard,
    /// The shard claims more grants applied or returns sent than home
    /// granted.
    BeyondGranted,
}

/// What home keeps about one shard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardAccount {
    pub granted: u64,
    pub returned: u64,
    /// What the shard said in its last report.
    pub grants_seen: u64,
    pub levels: ShardLevels,
    pub reported_at_ms: u64,
    /// Until when an ask home could not meet counts as a buyer still asking.
    pub starving_until_ms: u64,
    #[serde(default)]
    pub backlog_units: i64,
    #[serde(default)]
    pub calls: Calls,
}

impl ShardAccount {
    /// Units granted and not taken back: the most the shard can hold.
    pub fn escrowed(&self) -> u64 {
        self.granted - self.returned
    }

    /// Units the shard can still sell, as home knows it: its reported
    /// available units, and grants it has not yet applied (in transit).
    pub fn available(&self) -> u64 {
        self.levels.available + self.granted.saturating_sub(self.grants_seen)
    }
}

/// Home's side: the product's total, and every shard's account. Shard 0 is
/// home itself, whose account its own gate keeps in step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub stock_total: u64,
    pub shards: Vec<ShardAccount>,
}

impl Pool {
    /// A product of `stock_total` units over `count` shards, all unallocated.
    pub fn new(stock_total: u64, count: u16) -> Pool {
        assert!((2..=limits::SHARDS_MAX).contains(&count));
        Pool {
            stock_total,
            shards: vec![ShardAccount::default(); usize::from(count)],
        }
    }

    pub fn count(&self) -> u16 {
        self.shards.len() as u16
    }

    /// `U`: units granted to no shard.
    pub fn unallocated(&self) -> u64 {
        let escrowed: u64 = self.shards.iter().map(ShardAccount::escrowed).sum();
        self.stock_total - escrowed
    }

    /// The escrow's own invariant, checked wherever it moves. A failure is
    /// a bug, not an outcome.
    pub fn assert_escrow(&self) {
        let escrowed: u64 = self.shards.iter().map(ShardAccount::escrowed).sum();
        assert!(
            escrowed <= self.stock_total,
            "escrow broken: {escrowed} units escrowed of {}",
            self.stock_total
        );
        for (i, s) in self.shards.iter().enumerate() {
            assert!(
                s.returned <= s.granted,
                "shard {i} returned more than granted"
            );
        }
    }

    /// Takes up to `units` from `U` into shard `index`'s escrow; returns how
    /// many it took.
    pub fn grant(&mut self, index: u16, units: u64) -> u64 {
        let g = units.min(self.unallocated());
        self.shards[usize::from(index)].granted += g;
        self.assert_escrow();
        g
    }

    /// Home's own shard gives `units` back to `U`.
    pub fn give_back_home(&mut self, units: u64) {
        let home = &mut self.shards[0];
        assert!(units <= home.escrowed(), "home gives back more than it has");
        home.returned += units;
    }

    /// Whether a shard other than `except` has a buyer asking that home
    /// could not serve, as of `now_ms`.
    pub fn someone_starving(&self, now_ms: u64, except: u16) -> bool {
        self.shards
            .iter()
            .enumerate()
            .any(|(i, s)| i != usize::from(except) && s.starving_until_ms > now_ms)
    }

    /// A shard's report: apply its returns, record its levels, grant what
    /// `U` allows of its ask, and ask back its units if `U` is empty and
    /// another shard starves (lower before raise: a return lands in `U`
    /// before anything is granted from it). Returns the shard's cumulative
    /// grant and the units asked back.
    pub fn handle_report(
        &mut self,
        now_ms: u64,
        report: &ShardReport,
    ) -> Result<(u64, u64), ReportRefusal> {
        let i = usize::from(report.index);
        if i == 0 || i >= self.shards.len() {
            return Err(ReportRefusal::NoSuchShard);
        }
        let account = &self.shards[i];
        if report.grants_applied > account.granted || report.returns_sent > account.granted {
            return Err(ReportRefusal::BeyondGranted);
        }
        // Every refusal is above this line. From here the report applies.
        let account = &mut self.shards[i];
        account.returned = account.returned.max(report.returns_sent);
        account.grants_seen = account.grants_seen.max(report.grants_applied);
        // Levels are a state, not a counter: only a report newer than the
        // last applied one replaces them (a late or repeated one would put
        // the shard back in time). Reports are numbered by their count.
        if report.calls.reports >= account.calls.reports {
            account.levels = report.levels;
            account.reported_at_ms = now_ms;
            account.backlog_units = report.backlog_units;
            account.calls = report.calls;
        }
        // A refill takes at most a fair share of `U` (what buyers wait for
        // is always granted first), so that near sell-out the first shards
        // to ask do not take units the others' buyers will want.
        let fair = self.unallocated().div_ceil(u64::from(self.count()));
        let grant = report.want.min(report.need.max(fair));
        let granted = self.grant(report.index, grant);
        let account = &mut self.shards[i];
        if granted < report.need {
            account.starving_until_ms = now_ms + limits::STARVING_MS;
        } else {
            account.starving_until_ms = 0;
        }
        let reclaim = if self.unallocated() == 0
            && self.shards[i].starving_until_ms <= now_ms
            && self.someone_starving(now_ms, report.index)
        {
            self.shards[i].levels.available
        } else {
            0
        };
        self.assert_escrow();
        Ok((self.shards[i].granted, reclaim))
    }

    /// Adds units to `U`.
    pub fn restock(&mut self, units: u64) {
        self.stock_total += units;
    }

    /// Sets the total, if the change fits in `U`.
    pub fn set_total(&mut self, stock_total: u64) -> bool {
        let escrowed = self.stock_total - self.unallocated();
        if stock_total < escrowed {
            return false;
        }
        self.stock_total = stock_total;
        true
    }

    /// What the console and the load tool read of the escrow.
    pub fn stats(&self) -> EscrowStats {
        let shards = &self.shards[1..];
        EscrowStats {
            shards: self.count(),
            unallocated: self.unallocated(),
            reports: shards.iter().map(|s| s.calls.reports).sum(),
            sync_calls: shards.iter().map(|s| s.calls.sync).sum(),
            backlog_units: shards.iter().map(|s| s.backlog_units).sum(),
            per_shard: self
                .shards
                .iter()
                .map(|s| ShardStats {
                    escrowed: s.escrowed(),
                    levels: s.levels,
                })
                .collect(),
        }
    }

    /// The product's levels summed over the shards 1..K as they last
    /// reported, plus `U`; home's own gate adds its own.
    pub fn shards_levels(&self) -> ShardLevels {
        let mut sum = ShardLevels {
            available: self.unallocated(),
            ..ShardLevels::default()
        };
        for s in &self.shards[1..] {
            sum.available += s.available();
            sum.held += s.levels.held;
            sum.sold += s.levels.sold;
        }
        sum
    }
}

/// The escrow as the stats show it, summed over the shards 1..K as each
/// last reported (home's own figures are the gate's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscrowStats {
    pub shards: u16,
    /// `U`.
    pub unallocated: u64,
    pub reports: u64,
    pub sync_calls: u64,
    /// Units in the shards' outboxes on their way to the origin.
    pub backlog_units: i64,
    /// Each shard's escrow and levels, home's (0) as home last kept them.
    pub per_shard: Vec<ShardStats>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStats {
    pub escrowed: u64,
    pub levels: ShardLevels,
}

/// A shard's side: what it has applied and sent, and its demand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub index: u16,
    pub count: u16,
    pub grants_applied: u64,
    pub returns_sent: u64,
    /// Whether home has yet to hear of a return.
    pub unreported: bool,
    /// Units buyers waited for in the last report, to tell whether home
    /// met them.
    pub asked: u64,
    /// The last ask home could not meet in full, while it counts.
    pub starving_until_ms: u64,
    /// Whether the last call home failed, so the next tick must call again.
    pub call_failed: bool,
    /// Whether the shard has heard from home at all: before it has, it
    /// knows no rules and decides nothing.
    pub joined: bool,
    /// When home last said `U` was empty: until `HOME_EMPTY_MS` later, a
    /// buyer the shard cannot serve is refused without a call home (the
    /// shard's ticks still ask, and home reclaims for it).
    #[serde(default)]
    pub home_empty_at_ms: Option<u64>,
    #[serde(default)]
    pub demand: Demand,
    #[serde(default)]
    pub calls: Calls,
    /// What the last report said of the shard's levels and outbox, so that
    /// a change is reported even when nothing else calls for a report
    /// (home's figures for the product, and the drift check, follow).
    #[serde(default)]
    pub reported: (ShardLevels, i64),
}

/// Units reserved per second, as a shard observes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    window_start_ms: u64,
    window_units: u64,
    /// Units per second measured over the last whole window.
    last_per_s: u64,
}

impl Demand {
    fn roll(&mut self, now_ms: u64) {
        let w = limits::DEMAND_WINDOW_MS;
        if now_ms >= self.window_start_ms + w {
            let elapsed = now_ms - self.window_start_ms;
            // A window with no reserves after it reads as no demand.
            self.last_per_s = if elapsed < 2 * w {
                self.window_units * 1000 / w
            } else {
                0
            };
            self.window_start_ms = now_ms - elapsed % w;
            self.window_units = 0;
        }
    }

    /// `units` were asked for at `now_ms`.
    pub fn record(&mut self, now_ms: u64, units: u64) {
        self.roll(now_ms);
        self.window_units += units;
    }

    /// Units per second: the last whole window's, or the current one's if
    /// it already shows more.
    pub fn per_s(&mut self, now_ms: u64) -> u64 {
        self.roll(now_ms);
        self.last_per_s
            .max(self.window_units * 1000 / limits::DEMAND_WINDOW_MS)
    }

    /// Units this demand takes in `ms`.
    fn over(&mut self, now_ms: u64, ms: u64) -> u64 {
        self.per_s(now_ms) * ms / 1000
    }
}

impl Ledger {
    pub fn new(index: u16, count: u16) -> Ledger {
        assert!(index >= 1 && index < count && count <= limits::SHARDS_MAX);
        Ledger {
            index,
            count,
            ..Ledger::default()
        }
    }

    /// Units the shard's gate must hold, by I1: applied grants less sent
    /// returns.
    pub fn escrowed(&self) -> u64 {
        self.grants_applied - self.returns_sent
    }

    /// How many units to ask home for now, with `available` units and
    /// `needed` wanted by a buyer who found too few (0 for a background
    /// tick): nothing while the units last `REFILL_LOW_MS` of demand and
    /// cover the buyer, else enough for `REFILL_TARGET_MS` of it, and at
    /// least what the buyer needs.
    pub fn want(&mut self, now_ms: u64, available: u64, needed: u64) -> u64 {
        let low = self.demand.over(now_ms, limits::REFILL_LOW_MS);
        if needed <= available && available >= low {
            return 0;
        }
        let target = self
            .demand
            .over(now_ms, limits::REFILL_TARGET_MS)
            .max(limits::REFILL_UNITS_MIN)
            .max(needed);
        target.saturating_sub(available)
    }

    /// Units beyond `SURPLUS_MS` of demand, to give back.
    pub fn surplus(&mut self, now_ms: u64, available: u64) -> u64 {
        let keep = self
            .demand
            .over(now_ms, limits::SURPLUS_MS)
            .max(limits::REFILL_UNITS_MIN);
        available.saturating_sub(keep)
    }

    /// Applies home's cumulative grant: returns the units credited (0 for a
    /// late or repeated reply).
    pub fn apply_grant(&mut self, granted: u64) -> u64 {
        let credit = granted.saturating_sub(self.grants_applied);
        self.grants_applied += credit;
        credit
    }

    /// Debits a return of `units` (the gate has already taken them out of
    /// its available units); home hears of it in the next report.
    pub fn send_return(&mut self, units: u64) {
        assert!(units <= self.escrowed(), "a shard returns more than it has");
        self.returns_sent += units;
        if units > 0 {
            self.unreported = true;
        }
    }

    /// Whether the shard must call home at its next tick.
    pub fn wants_tick(&self, now_ms: u64, levels: ShardLevels, backlog_units: i64) -> bool {
        !self.joined
            || self.unreported
            || self.call_failed
            || self.starving_until_ms > now_ms
            || levels.available > 0
            || self.reported != (levels, backlog_units)
    }
}
