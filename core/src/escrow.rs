//! Escrow: one product's stock split over K stock shards, never oversold,
//! and never answered `sold_out` while a unit is available anywhere.
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
//! The words, used the same way in the code, the docs and the stats:
//! - a **report** is a shard's message to home (numbered by its `seq`): its
//!   counters, its levels, and its **ask**: the units its waiting buyers
//!   **need**, and a **refill** beyond them;
//! - a **reply** is home's answer to a report: the cumulative **grant**,
//!   what home knows of units **elsewhere**, and home's **rules**;
//! - a **return** is units a shard gives back to `U`;
//! - a **push** is home's message to a shard: its rules, and when home
//!   needs the shard's units, a **drain** (return every available unit);
//!   the shard answers a push with a report;
//! - a **proof** is a drain's answer that left the shard with no unit
//!   available: `sold_out` rests on proofs younger than the lag;
//! - a **lease** is how long a shard may decide reserves under the rules
//!   home last gave it;
//! - a **wait** is a reserve that waited for a call home.
//!
//! Home is shard 0 of its own product: its gate draws from `U` in the same
//! synchronous turn as the reserve that needs it, and gives back to `U`
//! every unit it does not hold or sell at the end of each decision, so home
//! never keeps a surplus and its own turns need no message. Only home
//! decides a grant and a drain; only a shard decides a surplus return.
//! `docs/sharding.md` walks through a whole sequence of messages.

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
    /// The window over which a shard measures its demand.
    pub const DEMAND_WINDOW_MS: u64 = 1_000;
    /// A shard reports a change of its levels at most this often.
    pub const REPORT_INTERVAL_MS: u64 = 250;
    /// After failed reports a shard waits twice as long each time, up to
    /// this, before the next.
    pub const REPORT_BACKOFF_MAX_MS: u64 = 8_000;
    /// The promise of `sold_out`: no unit was available anywhere when it
    /// was given, except units that came back (a cancel, an expiry, a
    /// void, a restock) at most this long before. The edge's snapshot
    /// answers within the same lag.
    pub const SOLD_OUT_LAG_MS: u64 = 1_000;
    /// How old a shard's proof may be when home says no unit is available
    /// anywhere: an older one is drained again first, so that the answer
    /// stays usable for most of `SOLD_OUT_LAG_MS` after it leaves.
    pub const PROOF_FRESH_MS: u64 = 250;
    /// A shard decides reserves under the rules home last gave it for this
    /// long after it sent the report home answered; then it asks again.
    /// Home's change of rules is done once every shard took it, or once
    /// this long has passed since home last answered a shard that did not.
    pub const RULES_LEASE_MS: u64 = 3_000;

    /// A shard that answered a push reports once more after this long,
    /// unless a message from home meanwhile said the answer arrived: an
    /// answer lost on its way would otherwise leave its returns in transit
    /// and home's view of the shard stale.
    pub const PUSH_ACK_GRACE_MS: u64 = 5_000;
    /// How long one ask owns home's endgame: while an ask waits for the
    /// drains it sent, every other ask beyond `U` waits for it, so that the
    /// units its drains bring into `U` go to it, and two asks cannot take
    /// one unit from each other for ever. Past this (its shell gave up, or
    /// home restarted), another may take it.
    pub const ENDGAME_OWNER_MS: u64 = 1_500;
    /// How long units just granted to a shard are left to the buyers
    /// waiting there before home may drain them back: about the time a
    /// shard takes to decide its buyers after a reply. Shorter, and two
    /// asking shards pass units back and forth; longer, and an ask waits
    /// for nothing when the reply was lost.
    pub const GRANT_IN_USE_MS: u64 = 50;
    /// A reserve that could not be decided (a shard did not answer home's
    /// drain, or home did not answer the shard) is retried after this.
    pub const UNDECIDED_RETRY_MS: u64 = 1_000;

    const _: () = assert!(REFILL_LOW_MS < REFILL_TARGET_MS);
    const _: () = assert!(REFILL_TARGET_MS < SURPLUS_MS);
    const _: () = assert!(PROOF_FRESH_MS < SOLD_OUT_LAG_MS);
}

/// A shard's levels as it last reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLevels {
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// A shard's reports, counted since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportCounts {
    /// Every report sent, answers to pushes included.
    pub reports: u64,
    /// Reports a buyer waited for (the shard could not decide a reserve on
    /// what it had).
    #[serde(alias = "sync")]
    pub waits: u64,
}

/// What a shard tells home: its cumulative counters, its levels, and its
/// ask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReport {
    pub index: u16,
    /// The report's number, one more than the shard's last: levels are a
    /// state, and home takes them only from a report at least as new as
    /// the last it took.
    pub seq: u64,
    /// Units of grants the shard has applied, ever.
    pub grants_applied: u64,
    /// Units the shard has given back, ever (already debited there).
    pub returns_sent: u64,
    pub levels: ShardLevels,
    /// Units of orders and voids in the shard's outbox, not yet at the
    /// origin: the drift check counts them as on their way.
    pub backlog_units: i64,
    /// Units the reserves waiting at the shard need in all (0: no buyer
    /// waits).
    pub need: u64,
    /// Units asked beyond `need`, so that the shard's units last
    /// `REFILL_TARGET_MS` of its demand.
    pub refill: u64,
    /// The version of home's rules the shard holds.
    pub rules_version: u64,
    pub counts: ReportCounts,
}

/// Home's rules as a shard takes them: the product's config, its mode and
/// its waiting room, numbered by `version` (bumped by every change of the
/// config or the mode, so that a late message never puts older rules back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeRules {
    pub version: u64,
    pub config: Config,
    pub mode: Mode,
    pub admission: Admission,
}

/// What home knew, as its reply left, of the units outside the asking
/// shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Elsewhere {
    /// `U` held these units after the grant (and home looked no further).
    Unallocated { units: u64 },
    /// No unit was available anywhere but at the asking shard: proven by
    /// drains at most `age_ms` before the reply left, with `U` empty.
    None { age_ms: u64 },
    /// Home could not tell within its bounded wait: a shard it had to
    /// drain did not answer. The shard's buyers who found too few units
    /// get `unavailable`, never `sold_out`.
    Unknown,
}

/// Home's answer to a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReply {
    /// The report this answers (`ShardReport::seq`).
    pub seq: u64,
    /// Units home has granted this shard, ever.
    pub granted: u64,
    /// The newest report of the shard home has applied.
    pub seen: u64,
    pub elsewhere: Elsewhere,
    /// Rounds of drains home sent before it could answer.
    pub drains: u32,
    pub rules: HomeRules,
}

/// Home's message to a shard: its rules, the shard's cumulative grant, and
/// whether to drain. The shard answers with a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomePush {
    pub granted: u64,
    /// The newest report of the shard home has applied.
    pub seen: u64,
    /// Return every available unit before answering.
    pub drain: bool,
    pub rules: HomeRules,
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

/// Where home stands with draining one shard. Memory only: after a restart
/// home knows no proof, and drains again before it says `sold_out`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drain {
    /// A drain sent at this instant has not answered.
    pub out_since_ms: Option<u64>,
    /// The drain sent at this instant left the shard with no unit
    /// available, and home has granted it nothing since: any unit the
    /// shard has now came back after this instant.
    pub proven_at_ms: Option<u64>,
    /// The last drain, sent at this instant, got no answer.
    pub failed_at_ms: Option<u64>,
    /// When an ask last granted the shard units (`GRANT_IN_USE_MS`).
    pub granted_at_ms: Option<u64>,
}

/// What home keeps about one shard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardAccount {
    pub granted: u64,
    pub returned: u64,
    /// What the shard said in its last report.
    pub grants_seen: u64,
    pub levels: ShardLevels,
    #[serde(default)]
    pub backlog_units: i64,
    /// The newest report whose levels home took.
    #[serde(default)]
    pub seq: u64,
    #[serde(default, alias = "calls")]
    pub counts: ReportCounts,
    /// The version of the rules the shard last said it holds.
    #[serde(default)]
    pub rules_version: u64,
    /// Until when the shard may decide under rules home gave it, by home's
    /// clock: `RULES_LEASE_MS` after home last replied to it.
    #[serde(default)]
    pub lease_until_ms: u64,
    #[serde(skip)]
    pub drain: Drain,
}

impl ShardAccount {
    /// Units granted and not taken back: the most the shard can hold.
    pub fn escrowed(&self) -> u64 {
        self.granted - self.returned
    }

    /// Units granted that the shard has not said it applied.
    pub fn in_transit(&self) -> u64 {
        self.granted.saturating_sub(self.grants_seen)
    }

    /// Units the shard can still sell, as home knows it: its reported
    /// available units, and grants it has not yet applied.
    pub fn available(&self) -> u64 {
        self.levels.available + self.in_transit()
    }

    /// Whether the shard's object exists: it reported, or was granted
    /// units. A shard is created by its first reserve, which reports
    /// before anything is decided there.
    pub fn exists(&self) -> bool {
        self.seq > 0 || self.granted > 0
    }

    /// Whether a proof of this shard is at most `PROOF_FRESH_MS` old.
    fn proven_fresh(&self, now_ms: u64) -> bool {
        self.drain
            .proven_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) <= limits::PROOF_FRESH_MS)
    }

    /// Whether a drain of this shard failed too recently to try again.
    fn failed_recently(&self, now_ms: u64) -> bool {
        self.drain
            .failed_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) <= limits::PROOF_FRESH_MS)
    }
}

/// Home's answer to an ask, from its pool (`Pool::ask`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// The reply may leave now (its grant is made).
    Answer(Elsewhere),
    /// Drain these shards first (their drains are marked out), then ask
    /// again.
    Drain(Vec<u16>),
    /// Drains this answer waits for are out (another ask's); ask again
    /// shortly.
    Wait,
}

/// Home's side: the product's total, and every shard's account. Shard 0 is
/// home itself, whose account its own gate keeps in step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub stock_total: u64,
    pub shards: Vec<ShardAccount>,
    /// The version of home's rules (`HomeRules`); a shard that holds none
    /// has version 0.
    #[serde(default = "first_rules")]
    pub rules_version: u64,
    /// The ask that owns the endgame now (`ENDGAME_OWNER_MS`): its shard,
    /// and since when. Memory only.
    #[serde(skip)]
    pub endgame: Option<(u16, u64)>,
}

fn first_rules() -> u64 {
    1
}

impl Pool {
    /// A product of `stock_total` units over `count` shards, all unallocated.
    pub fn new(stock_total: u64, count: u16) -> Pool {
        assert!((2..=limits::SHARDS_MAX).contains(&count));
        Pool {
            stock_total,
            shards: vec![ShardAccount::default(); usize::from(count)],
            rules_version: 1,
            endgame: None,
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
    /// many it took. A shard granted units has units: its proof ends.
    pub fn grant(&mut self, index: u16, units: u64) -> u64 {
        let g = units.min(self.unallocated());
        let account = &mut self.shards[usize::from(index)];
        account.granted += g;
        if g > 0 {
            account.drain.proven_at_ms = None;
        }
        self.assert_escrow();
        g
    }

    /// Home's own shard gives `units` back to `U`.
    pub fn give_back_home(&mut self, units: u64) {
        let home = &mut self.shards[0];
        assert!(units <= home.escrowed(), "home gives back more than it has");
        home.returned += units;
    }

    /// The shards 1..K that exist, as home knows them: a bit each.
    pub fn existing(&self) -> u64 {
        self.shards
            .iter()
            .enumerate()
            .filter(|(i, s)| *i == 0 || s.exists())
            .fold(0u64, |bits, (i, _)| bits | (1 << i))
    }

    /// A report, or a push's answer: its returns land in `U`, and its
    /// levels replace home's if it is the newest report home has had.
    /// Returns whether it was the newest.
    pub fn apply_report(&mut self, report: &ShardReport) -> Result<bool, ReportRefusal> {
        let i = usize::from(report.index);
        if i == 0 || i >= self.shards.len() {
            return Err(ReportRefusal::NoSuchShard);
        }
        let account = &self.shards[i];
        if report.grants_applied > account.granted || report.returns_sent > report.grants_applied {
            return Err(ReportRefusal::BeyondGranted);
        }
        // Every refusal is above this line. From here the report applies.
        let account = &mut self.shards[i];
        account.returned = account.returned.max(report.returns_sent);
        account.grants_seen = account.grants_seen.max(report.grants_applied);
        account.rules_version = account.rules_version.max(report.rules_version);
        let newest = report.seq >= account.seq;
        if newest {
            account.levels = report.levels;
            account.backlog_units = report.backlog_units;
            account.counts = report.counts;
            account.seq = report.seq;
        }
        if account.available() > 0 {
            account.drain.proven_at_ms = None;
        }
        self.assert_escrow();
        Ok(newest)
    }

    /// Home's answer to an ask of shard `index` (0: home's own reserves) for
    /// `need` units in all, `refill` more if `U` allows it. Decided anew at
    /// every call, from the accounts as they are: the shell calls it again
    /// after the drains it asks for, so that nothing is decided across an
    /// await.
    ///
    /// - What the shard has (its reported available units, and grants on
    ///   their way to it) counts toward its need. What `U` holds covers
    ///   the rest: home grants it, with a refill of at most a fair share of
    ///   what is left, so that near sell-out the first shards to ask do
    ///   not take the units other shards' buyers will want.
    /// - Beyond `U`, only other shards can have units: every one not proven
    ///   empty in the last `PROOF_FRESH_MS` is drained first.
    /// - Once every other shard is proven empty, home grants all of `U`
    ///   and answers `None`; with `give_up`, or when a shard to drain
    ///   failed to answer just now, it grants `U` and answers `Unknown`.
    ///
    /// For home's own reserves (`index` 0) nothing is granted here: its
    /// gate draws from `U` in the reserve's own turn.
    pub fn ask(&mut self, now_ms: u64, index: u16, need: u64, refill: u64, give_up: bool) -> Ask {
        let i = usize::from(index);
        let has = if i == 0 {
            0
        } else {
            self.shards[i].available()
        };
        let short = need.saturating_sub(has);
        let grant_to = |pool: &mut Pool, units: u64| {
            if i > 0 && pool.grant(index, units) > 0 {
                pool.shards[i].drain.granted_at_ms = Some(now_ms);
            }
        };
        // One ask at a time goes beyond `U`: another's waits for it, and an
        // owner that did not come back in time lets go.
        if let Some((_, since)) = self.endgame.filter(|&(owner, _)| owner != index) {
            let owned = now_ms.saturating_sub(since) <= limits::ENDGAME_OWNER_MS;
            if owned && short > 0 {
                return Ask::Wait;
            }
            if !owned {
                self.endgame = None;
            }
        }
        let answer = |pool: &mut Pool, elsewhere: Elsewhere| {
            if pool.endgame.is_some_and(|(owner, _)| owner == index) {
                pool.endgame = None;
            }
            Ask::Answer(elsewhere)
        };
        if short <= self.unallocated() {
            let fair = (self.unallocated() - short).div_ceil(u64::from(self.count()));
            grant_to(self, short + refill.min(fair));
            let units = self.unallocated();
            return answer(self, Elsewhere::Unallocated { units });
        }
        let others: Vec<usize> = (1..self.shards.len())
            .filter(|&j| j != i && self.shards[j].exists())
            .collect();
        let stale: Vec<usize> = others
            .iter()
            .copied()
            .filter(|&j| !self.shards[j].proven_fresh(now_ms))
            .collect();
        if stale.is_empty() {
            let oldest = others
                .iter()
                .filter_map(|&j| self.shards[j].drain.proven_at_ms)
                .min()
                .unwrap_or(now_ms);
            let all = self.unallocated();
            grant_to(self, all);
            return answer(
                self,
                Elsewhere::None {
                    age_ms: now_ms.saturating_sub(oldest),
                },
            );
        }
        let unreachable = stale.iter().all(|&j| {
            self.shards[j].drain.out_since_ms.is_none() && self.shards[j].failed_recently(now_ms)
        });
        if give_up || unreachable {
            let all = self.unallocated();
            grant_to(self, all);
            return answer(self, Elsewhere::Unknown);
        }
        // This ask owns the endgame until it answers.
        if self.endgame.is_none() {
            self.endgame = Some((index, now_ms));
        }
        // A shard granted units just now holds them for buyers who wait
        // there: draining them back would only send them round again. Past
        // `GRANT_IN_USE_MS` (its buyers are decided, or the reply was
        // lost) it is drained like any other.
        let send: Vec<u16> = stale
            .iter()
            .copied()
            .filter(|&j| {
                let s = &self.shards[j];
                let in_use = s.in_transit() > 0
                    && s.drain
                        .granted_at_ms
                        .is_some_and(|at| now_ms.saturating_sub(at) < limits::GRANT_IN_USE_MS);
                s.drain.out_since_ms.is_none() && !s.failed_recently(now_ms) && !in_use
            })
            .map(|j| j as u16)
            .collect();
        if send.is_empty() {
            return Ask::Wait;
        }
        for &j in &send {
            self.shards[usize::from(j)].drain.out_since_ms = Some(now_ms);
        }
        Ask::Drain(send)
    }

    /// The shards to drain so that home can say whether any unit is left
    /// anywhere: when `U` is empty and no shard is known to have a unit,
    /// those whose proof is missing or older than `PROOF_FRESH_MS` (their
    /// drains are marked out). Empty when the product visibly has units,
    /// or when every proof is fresh.
    pub fn proofs_wanted(&mut self, now_ms: u64) -> Vec<u16> {
        let looks_empty =
            self.unallocated() == 0 && self.shards[1..].iter().all(|s| s.available() == 0);
        if !looks_empty {
            return Vec::new();
        }
        let send: Vec<u16> = (1..self.shards.len())
            .filter(|&j| {
                let s = &self.shards[j];
                s.exists()
                    && !s.proven_fresh(now_ms)
                    && s.drain.out_since_ms.is_none()
                    && !s.failed_recently(now_ms)
            })
            .map(|j| j as u16)
            .collect();
        for &j in &send {
            self.shards[usize::from(j)].drain.out_since_ms = Some(now_ms);
        }
        send
    }

    /// A drain sent to shard `index` at `sent_at_ms` was answered with
    /// `report`: its returns land in `U`, and if it was the newest report
    /// and left the shard nothing, the shard is proven empty as of
    /// `sent_at_ms` (the shard drained after that instant).
    pub fn drain_answered(
        &mut self,
        sent_at_ms: u64,
        report: &ShardReport,
    ) -> Result<(), ReportRefusal> {
        let newest = self.apply_report(report)?;
        let account = &mut self.shards[usize::from(report.index)];
        account.drain.out_since_ms = None;
        account.drain.failed_at_ms = None;
        if newest && account.available() == 0 {
            account.drain.proven_at_ms = Some(sent_at_ms);
        }
        Ok(())
    }

    /// A drain sent to shard `index` at `sent_at_ms` got no answer.
    pub fn drain_failed(&mut self, index: u16, sent_at_ms: u64) {
        if let Some(account) = self.shards.get_mut(usize::from(index)) {
            account.drain.out_since_ms = None;
            account.drain.failed_at_ms = Some(sent_at_ms);
        }
    }

    /// How long ago no unit was available anywhere, if home can say so
    /// now: `U` empty and every shard that exists proven empty. The age is
    /// that of the oldest proof.
    pub fn sold_out_age(&self, now_ms: u64) -> Option<u64> {
        if self.unallocated() > 0 {
            return None;
        }
        let mut oldest = now_ms;
        for s in &self.shards[1..] {
            if !s.exists() {
                continue;
            }
            oldest = oldest.min(s.drain.proven_at_ms?);
        }
        Some(now_ms.saturating_sub(oldest))
    }

    /// Whether home may tell its own buyer, who found too few units here
    /// and in `U`, that none is available elsewhere: every shard that
    /// exists was proven empty less than `SOLD_OUT_LAG_MS` ago.
    pub fn none_elsewhere(&self, now_ms: u64) -> bool {
        self.shards[1..].iter().filter(|s| s.exists()).all(|s| {
            s.drain
                .proven_at_ms
                .is_some_and(|at| now_ms.saturating_sub(at) < limits::SOLD_OUT_LAG_MS)
        })
    }

    /// The rules changed (config or mode): a new version, for every shard
    /// to take before the change is done.
    pub fn rules_changed(&mut self) {
        self.rules_version += 1;
    }

    /// Home replies to shard `index` now: the shard may decide under these
    /// rules for `RULES_LEASE_MS`, by its clock from before this instant.
    pub fn leased(&mut self, index: u16, now_ms: u64) {
        if let Some(account) = self.shards.get_mut(usize::from(index)) {
            account.lease_until_ms = now_ms + limits::RULES_LEASE_MS;
        }
    }

    /// The shards not made yet (home makes them at the product's creation,
    /// so that they live where home does).
    pub fn unmade(&self) -> Vec<u16> {
        (1..self.shards.len())
            .filter(|&j| !self.shards[j].exists())
            .map(|j| j as u16)
            .collect()
    }

    /// The shards that exist and have not said they hold the current rules.
    pub fn behind_rules(&self) -> Vec<u16> {
        (1..self.shards.len())
            .filter(|&j| {
                let s = &self.shards[j];
                s.exists() && s.rules_version < self.rules_version
            })
            .map(|j| j as u16)
            .collect()
    }

    /// When the current rules bind every shard: now (`None`) if every shard
    /// that exists took them or its lease has ended, else the instant the
    /// last lease of an older version ends.
    pub fn rules_bind_at(&self, now_ms: u64) -> Option<u64> {
        self.behind_rules()
            .into_iter()
            .map(|j| self.shards[usize::from(j)].lease_until_ms)
            .filter(|&until| until > now_ms)
            .max()
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
    pub fn stats(&self) -> Overview {
        let shards = &self.shards[1..];
        Overview {
            shards: self.count(),
            unallocated: self.unallocated(),
            reports: shards.iter().map(|s| s.counts.reports).sum(),
            waits: shards.iter().map(|s| s.counts.waits).sum(),
            backlog_units: shards.iter().map(|s| s.backlog_units).sum(),
            per_shard: self
                .shards
                .iter()
                .map(|s| ShardOverview {
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

/// The escrow as home sees it, summed over the shards 1..K as each last
/// reported (home's own figures are the gate's). The stats' JSON shape of
/// it is the wire's `EscrowStats`, which `src/http/views.rs` builds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    pub shards: u16,
    /// `U`.
    pub unallocated: u64,
    pub reports: u64,
    pub waits: u64,
    /// Units in the shards' outboxes on their way to the origin.
    pub backlog_units: i64,
    /// Each shard's escrow and levels, home's (0) as home last kept them.
    pub per_shard: Vec<ShardOverview>,
}

/// One shard's line of the `Overview`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardOverview {
    pub escrowed: u64,
    pub levels: ShardLevels,
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

/// A shard's call home: the report it sent last, or why it must wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Call {
    /// No report is out.
    #[default]
    Idle,
    /// Report `seq` left at `sent_at_ms`, when the shard had returned
    /// `returns_sent` units in all.
    Out {
        seq: u64,
        sent_at_ms: u64,
        returns_sent: u64,
    },
    /// The last `failures` reports got no answer.
    Failed { failures: u32 },
}

/// What a report said of the shard's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Said {
    pub levels: ShardLevels,
    pub backlog_units: i64,
    pub returns_sent: u64,
}

/// A shard's side: what it has applied and sent, what home last said, and
/// its demand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub index: u16,
    pub count: u16,
    pub grants_applied: u64,
    pub returns_sent: u64,
    /// The number of the shard's last report (`ShardReport::seq`).
    #[serde(default)]
    pub seq: u64,
    #[serde(default, alias = "calls")]
    pub counts: ReportCounts,
    /// The version of home's rules the shard holds; 0 before it has heard
    /// from home, when it knows no rules and decides nothing.
    #[serde(default)]
    pub rules_version: u64,
    /// Until when the shard may decide reserves under its rules (its own
    /// clock): `RULES_LEASE_MS` after it sent the report home last
    /// answered.
    #[serde(default)]
    pub lease_until_ms: u64,
    /// Home's word that no unit was available elsewhere, as of this
    /// instant (its own clock, the send time of the report less the proof's
    /// age): until `SOLD_OUT_LAG_MS` later, a buyer the shard cannot serve
    /// is told `sold_out` without a call home.
    #[serde(default)]
    pub none_elsewhere_at_ms: Option<u64>,
    /// `U` as home last said: a background refill asks only while it is
    /// not empty.
    #[serde(default)]
    pub unallocated: u64,
    /// What the shard's last report (or answer to a push) said.
    #[serde(default)]
    pub said: Said,
    /// The newest of the shard's reports home says it applied (`seen`):
    /// while it is older than `seq`, home may not know what the shard
    /// said last, and the shard says it again.
    #[serde(default)]
    pub acked_seq: u64,
    /// When the shard's last message was an answer to a push: its time.
    /// Home's next message normally says it arrived; without one, the
    /// shard reports again `PUSH_ACK_GRACE_MS` later.
    #[serde(default)]
    pub answered_at_ms: Option<u64>,
    /// The next report waits until this instant (the report interval, or
    /// the backoff after failures).
    #[serde(default)]
    pub next_report_at_ms: u64,
    #[serde(default)]
    pub demand: Demand,
    /// Memory only: after a restart no report is out, and what home has
    /// not said it applied is reported again.
    #[serde(skip)]
    pub call: Call,
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

    /// Whether the shard has heard from home (it knows the rules).
    pub fn joined(&self) -> bool {
        self.rules_version > 0
    }

    /// Whether the shard may decide reserves now: it holds rules whose
    /// lease has not ended.
    pub fn leased(&self, now_ms: u64) -> bool {
        self.joined() && now_ms < self.lease_until_ms
    }

    /// Whether home's word that no unit is available elsewhere still
    /// holds, within the lag.
    pub fn none_elsewhere(&self, now_ms: u64) -> bool {
        self.none_elsewhere_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < limits::SOLD_OUT_LAG_MS)
    }

    /// Units to ask beyond what buyers need, with `available` units: none
    /// while they last `REFILL_LOW_MS` of demand or home has none to give,
    /// else enough for `REFILL_TARGET_MS` of it.
    pub fn refill(&mut self, now_ms: u64, available: u64) -> u64 {
        if self.unallocated == 0 {
            return 0;
        }
        let per_s = self.demand.per_s(now_ms);
        if per_s == 0 || available >= self.demand.over(now_ms, limits::REFILL_LOW_MS) {
            return 0;
        }
        self.demand
            .over(now_ms, limits::REFILL_TARGET_MS)
            .max(limits::REFILL_UNITS_MIN)
            .saturating_sub(available)
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
    /// late or repeated message).
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
        // The units are elsewhere now: home's word that none is left
        // elsewhere did not count them.
        if units > 0 {
            self.none_elsewhere_at_ms = None;
        }
    }

    /// When the shard must next report in the background, if it has
    /// reason to: its state is not what it last said, or home has not
    /// said it applied the last thing said, or a refill is wanted; never
    /// while a report is out, and not before the report interval or the
    /// backoff has passed. A shard whose state does not move, and whose
    /// last word home has, reports nothing and sleeps.
    pub fn report_at(
        &self,
        levels: ShardLevels,
        backlog_units: i64,
        refill_wanted: bool,
    ) -> Option<u64> {
        if matches!(self.call, Call::Out { .. }) || !self.joined() {
            return None;
        }
        let now = Said {
            levels,
            backlog_units,
            returns_sent: self.returns_sent,
        };
        if now != self.said || refill_wanted {
            return Some(self.next_report_at_ms);
        }
        if self.seq > self.acked_seq {
            return Some(match self.answered_at_ms {
                Some(at) => (at + limits::PUSH_ACK_GRACE_MS).max(self.next_report_at_ms),
                None => self.next_report_at_ms,
            });
        }
        None
    }

    /// Home says it applied the shard's reports up to `seen`.
    pub fn seen(&mut self, seen: u64) {
        self.acked_seq = self.acked_seq.max(seen);
    }

    /// A report leaves now.
    pub fn sent(&mut self, now_ms: u64, said: Said, need: u64) -> u64 {
        self.seq += 1;
        self.counts.reports += 1;
        if need > 0 {
            self.counts.waits += 1;
        }
        self.said = said;
        self.answered_at_ms = None;
        self.call = Call::Out {
            seq: self.seq,
            sent_at_ms: now_ms,
            returns_sent: self.returns_sent,
        };
        self.next_report_at_ms = now_ms + limits::REPORT_INTERVAL_MS;
        self.seq
    }

    /// The shard answers a push now, saying `said`: its number.
    pub fn answered(&mut self, now_ms: u64, said: Said) -> u64 {
        self.seq += 1;
        self.counts.reports += 1;
        self.said = said;
        self.answered_at_ms = Some(now_ms);
        self.seq
    }

    /// The report out got no answer (the call failed, or its answer was
    /// lost): the next waits for a backoff, doubling with each failure.
    pub fn call_failed(&mut self, now_ms: u64) {
        let failures = match self.call {
            Call::Failed { failures } => failures + 1,
            Call::Idle | Call::Out { .. } => 1,
        };
        self.call = Call::Failed { failures };
        let backoff =
            (limits::REPORT_INTERVAL_MS << failures.min(8)).min(limits::REPORT_BACKOFF_MAX_MS);
        self.next_report_at_ms = now_ms + backoff;
    }

    /// Takes home's rules if they are at least as new as the shard's.
    /// Returns them, for the gate to take.
    pub fn newer_rules<'r>(&mut self, rules: &'r HomeRules) -> Option<&'r HomeRules> {
        (rules.version >= self.rules_version).then(|| {
            self.rules_version = rules.version;
            rules
        })
    }

    /// Home's reply: whether it answers the report out. Only that reply
    /// settles the call, renews the lease (from the
    /// report's send time, so that the shard's lease never outlasts the
    /// one home counts) and says what is left elsewhere; a late reply to
    /// an earlier report credits its grant and its newer rules only.
    pub fn replied(&mut self, reply: &ShardReply) -> bool {
        let Call::Out {
            seq,
            sent_at_ms,
            returns_sent,
            ..
        } = self.call
        else {
            return false;
        };
        if reply.seq != seq {
            return false;
        }
        self.call = Call::Idle;
        self.lease_until_ms = sent_at_ms + limits::RULES_LEASE_MS;
        match reply.elsewhere {
            Elsewhere::Unallocated { units } => {
                self.unallocated = units;
                self.none_elsewhere_at_ms = None;
            }
            // Units the shard gave back since the report (a drain took
            // them while the report was on its way) are elsewhere now. If
            // home had not applied the message that gave them back when it
            // answered, its word counted them as the shard's and says
            // nothing of them: the shard asks again.
            Elsewhere::None { .. } if self.returns_sent > returns_sent && reply.seen < self.seq => {
                self.unallocated = 0;
                self.none_elsewhere_at_ms = None;
            }
            Elsewhere::None { age_ms } => {
                self.unallocated = 0;
                self.none_elsewhere_at_ms = Some(sent_at_ms.saturating_sub(age_ms));
            }
            Elsewhere::Unknown => {
                self.unallocated = 0;
                self.none_elsewhere_at_ms = None;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(index: u16, seq: u64, applied: u64, returned: u64, available: u64) -> ShardReport {
        ShardReport {
            index,
            seq,
            grants_applied: applied,
            returns_sent: returned,
            levels: ShardLevels {
                available,
                held: applied - returned - available,
                sold: 0,
            },
            backlog_units: 0,
            need: 0,
            refill: 0,
            rules_version: 1,
            counts: ReportCounts::default(),
        }
    }

    #[test]
    fn an_ask_within_u_is_granted_with_a_fair_refill() {
        let mut pool = Pool::new(100, 4);
        let mut r = report(1, 1, 0, 0, 0);
        r.need = 10;
        pool.apply_report(&r).unwrap();
        // Need 10, refill 200: 10, and a quarter of the 90 left (23).
        assert_eq!(
            pool.ask(0, 1, 10, 200, false),
            Ask::Answer(Elsewhere::Unallocated { units: 67 })
        );
        assert_eq!(pool.shards[1].granted, 33);
        // Asked again (the reply was lost): the grant on its way counts.
        assert_eq!(
            pool.ask(1, 1, 10, 0, false),
            Ask::Answer(Elsewhere::Unallocated { units: 67 })
        );
        assert_eq!(pool.shards[1].granted, 33);
        pool.assert_escrow();
    }

    #[test]
    fn beyond_u_home_drains_the_other_shards_and_proves_them_empty() {
        let mut pool = Pool::new(10, 3);
        pool.apply_report(&report(1, 1, 0, 0, 0)).unwrap();
        pool.apply_report(&report(2, 1, 0, 0, 0)).unwrap();
        assert_eq!(
            pool.ask(0, 2, 10, 0, false),
            Ask::Answer(Elsewhere::Unallocated { units: 0 })
        );
        // Shard 2 sold 4 and has 6; shard 1 needs 3, U is empty.
        pool.apply_report(&report(2, 2, 10, 0, 6)).unwrap();
        assert_eq!(pool.ask(100, 1, 3, 0, false), Ask::Drain(vec![2]));
        // A second ask meanwhile waits for the same drain.
        assert_eq!(pool.ask(101, 1, 3, 0, false), Ask::Wait);
        // The drain returns shard 2's 6 units.
        pool.drain_answered(100, &report(2, 3, 10, 6, 0)).unwrap();
        assert_eq!(pool.shards[2].drain.proven_at_ms, Some(100));
        assert_eq!(
            pool.ask(102, 1, 3, 0, false),
            Ask::Answer(Elsewhere::Unallocated { units: 3 })
        );
        assert_eq!(pool.shards[1].granted, 3);
        // Shard 1 now wants 5 more: only 3 are left, shard 2 is proven
        // empty, so it gets them and the word that there are none beyond.
        pool.apply_report(&report(1, 2, 3, 0, 0)).unwrap();
        assert_eq!(
            pool.ask(150, 1, 5, 0, false),
            Ask::Answer(Elsewhere::None { age_ms: 50 })
        );
        assert_eq!((pool.shards[1].granted, pool.unallocated()), (6, 0));
        pool.apply_report(&report(1, 3, 6, 0, 0)).unwrap();
        // Once the proof is older than PROOF_FRESH_MS it is drained again.
        let later = 100 + limits::PROOF_FRESH_MS + 1;
        assert_eq!(pool.ask(later, 1, 1, 0, false), Ask::Drain(vec![2]));
        pool.drain_failed(2, later);
        // A shard that did not answer: unknown, never none.
        assert_eq!(
            pool.ask(later + 1, 1, 1, 0, false),
            Ask::Answer(Elsewhere::Unknown)
        );
        pool.assert_escrow();
    }

    #[test]
    fn a_report_with_units_or_a_grant_ends_a_proof() {
        let mut pool = Pool::new(4, 3);
        pool.apply_report(&report(1, 1, 0, 0, 0)).unwrap();
        assert!(pool.proofs_wanted(5).is_empty(), "U holds 4");
        assert_eq!(pool.sold_out_age(5), None);
        // Home's own gate drew all 4; shard 2 was never created.
        pool.shards[0].granted = 4;
        assert_eq!(pool.proofs_wanted(10), vec![1]);
        assert!(pool.proofs_wanted(11).is_empty(), "its drain is out");
        pool.drain_answered(10, &report(1, 2, 0, 0, 0)).unwrap();
        assert_eq!(pool.sold_out_age(30), Some(20));
        // An older report arriving late changes nothing.
        pool.apply_report(&report(1, 1, 0, 0, 0)).unwrap();
        assert_eq!(pool.sold_out_age(30), Some(20));
        // A unit back in `U`, then granted to shard 1: no proof.
        pool.shards[0].returned = 1;
        assert_eq!(pool.sold_out_age(30), None);
        pool.grant(1, 1);
        assert_eq!(pool.sold_out_age(30), None);
        pool.apply_report(&report(1, 3, 1, 0, 1)).unwrap();
        assert_eq!(pool.sold_out_age(40), None);
        assert!(pool.proofs_wanted(40).is_empty(), "it visibly has a unit");
    }

    #[test]
    fn a_report_beyond_its_grant_is_refused_and_changes_nothing() {
        let mut pool = Pool::new(10, 2);
        let before = pool.clone();
        assert_eq!(
            pool.apply_report(&report(1, 1, 5, 0, 5)),
            Err(ReportRefusal::BeyondGranted)
        );
        assert_eq!(
            pool.apply_report(&report(0, 1, 0, 0, 0)),
            Err(ReportRefusal::NoSuchShard)
        );
        assert_eq!(pool, before);
    }

    #[test]
    fn rules_bind_once_every_shard_took_them_or_its_lease_ended() {
        let mut pool = Pool::new(10, 3);
        pool.apply_report(&report(1, 1, 0, 0, 0)).unwrap();
        pool.leased(1, 1_000);
        pool.apply_report(&report(2, 1, 0, 0, 0)).unwrap();
        pool.leased(2, 1_500);
        pool.rules_changed();
        assert_eq!(pool.behind_rules(), vec![1, 2]);
        let mut ack = report(1, 2, 0, 0, 0);
        ack.rules_version = 2;
        pool.apply_report(&ack).unwrap();
        assert_eq!(pool.behind_rules(), vec![2]);
        assert_eq!(
            pool.rules_bind_at(2_000),
            Some(1_500 + limits::RULES_LEASE_MS)
        );
        assert_eq!(pool.rules_bind_at(1_500 + limits::RULES_LEASE_MS), None);
    }

    #[test]
    fn a_ledger_reports_what_home_has_not_acknowledged_and_then_rests() {
        let mut l = Ledger::new(1, 2);
        let levels = ShardLevels {
            available: 3,
            held: 1,
            sold: 0,
        };
        assert_eq!(l.report_at(levels, 0, false), None, "not joined");
        l.rules_version = 1;
        assert_eq!(l.report_at(levels, 0, false), Some(0));
        let said = Said {
            levels,
            backlog_units: 0,
            returns_sent: 0,
        };
        let seq = l.sent(10, said, 0);
        assert_eq!(l.report_at(levels, 0, false), None, "one report out");
        let reply = ShardReply {
            seq,
            granted: 0,
            seen: seq,
            elsewhere: Elsewhere::None { age_ms: 4 },
            drains: 1,
            rules: HomeRules {
                version: 1,
                config: Config::default(),
                mode: Mode::Active,
                admission: Admission::default(),
            },
        };
        assert!(l.replied(&reply));
        l.seen(reply.seen);
        assert_eq!(l.lease_until_ms, 10 + limits::RULES_LEASE_MS);
        assert_eq!(l.none_elsewhere_at_ms, Some(6));
        assert!(l.none_elsewhere(6 + limits::SOLD_OUT_LAG_MS - 1));
        assert!(!l.none_elsewhere(6 + limits::SOLD_OUT_LAG_MS));
        // Nothing changed since: no report, however long it waits.
        assert_eq!(l.report_at(levels, 0, false), None);
        // A late copy of the reply acknowledges nothing more.
        assert!(!l.replied(&reply));
        // A change is reported, after the interval.
        let moved = ShardLevels {
            available: 2,
            held: 2,
            sold: 0,
        };
        assert_eq!(
            l.report_at(moved, 0, false),
            Some(10 + limits::REPORT_INTERVAL_MS)
        );
        // Failures back off, doubling, to a bound.
        l.sent(300, said, 0);
        l.call_failed(300);
        assert_eq!(l.next_report_at_ms, 300 + 2 * limits::REPORT_INTERVAL_MS);
        for _ in 0..20 {
            l.call_failed(300);
        }
        assert_eq!(l.next_report_at_ms, 300 + limits::REPORT_BACKOFF_MAX_MS);
    }

    #[test]
    fn a_stored_pool_of_the_earlier_names_still_loads() {
        let old = r#"{"stock_total":10,"shards":[
            {"granted":2,"returned":0,"grants_seen":2,"levels":{"available":0,"held":2,"sold":0},
             "reported_at_ms":5,"starving_until_ms":0,"backlog_units":0,"calls":{"reports":3,"sync":1}},
            {"granted":4,"returned":1,"grants_seen":4,"levels":{"available":3,"held":0,"sold":0},
             "reported_at_ms":5,"starving_until_ms":0,"calls":{"reports":7,"sync":2}}]}"#;
        let pool: Pool = serde_json::from_str(old).unwrap();
        assert_eq!(pool.rules_version, 1);
        assert_eq!(
            pool.shards[1].counts,
            ReportCounts {
                reports: 7,
                waits: 2
            }
        );
        assert_eq!(pool.unallocated(), 10 - 2 - 3);
        let old_ledger = r#"{"index":1,"count":2,"grants_applied":4,"returns_sent":1,
            "unreported":false,"asked":0,"starving_until_ms":0,"call_failed":false,"joined":true,
            "calls":{"reports":7,"sync":2},"reported":[{"available":3,"held":0,"sold":0},0]}"#;
        let ledger: Ledger = serde_json::from_str(old_ledger).unwrap();
        assert_eq!(ledger.escrowed(), 3);
        assert!(!ledger.joined(), "it asks home for the rules again");
    }
}
