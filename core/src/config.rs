//! Product configuration, the patch an admin applies to it, and the hard
//! limits that bound every input.

use serde::{Deserialize, Deserializer, Serialize};

use crate::face::{Face, FaceError};
use crate::pow::Pow;

/// Hard limits. They bound memory and arithmetic, so that no input, however
/// hostile, can make the gate allocate without bound or overflow a counter.
/// Each is stated once; messages are formatted from these constants.
pub mod limits {
    /// The largest stock a product may have. It keeps `stock_total` and every
    /// sum of units far below `u64::MAX`, so sums never overflow.
    pub const STOCK_UNITS_MAX: u64 = 1_000_000_000;
    /// The largest `quantity_max` a product may configure, and so the most
    /// units one reservation (and one order) can carry.
    pub const QUANTITY_MAX_MAX: u32 = 1_000;
    /// The longest hold a product may configure: one day.
    pub const HOLD_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;
    /// The shortest hold a product may configure.
    pub const HOLD_TTL_MS_MIN: u64 = 100;
    /// The longest idempotency window after a hold's expiry: one week.
    pub const IDEM_WINDOW_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
    /// The latest instant a sale window may name, in epoch milliseconds:
    /// 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can write. It is
    /// below 2^53, so every instant is also exact as a JavaScript number.
    pub const INSTANT_MS_MAX: u64 = 253_402_300_799_999;
    /// Byte limits of the strings the core stores. The edge validates the
    /// charset; the core only refuses what would break its memory budget.
    pub const BUYER_ID_BYTES_MAX: usize = 64;
    pub const IDEM_KEY_BYTES_MAX: usize = 64;
    pub const PAYMENT_REF_BYTES_MAX: usize = 128;
    /// Retries back off from this delay, doubling per attempt.
    pub const OUTBOX_BACKOFF_BASE_MS: u64 = 500;
    /// Retries never wait longer than this.
    pub const OUTBOX_BACKOFF_CAP_MS: u64 = 60_000;
    /// A handed-out batch that is neither acked nor nacked within this time
    /// is handed out again; the shell that took it is presumed dead.
    pub const OUTBOX_LEASE_MS: u64 = 30_000;
    /// The most reservation records (live holds plus tombstones kept for
    /// idempotent replay) a product may configure, and the default.
    /// Measured (`bench/memory.mjs`): a restore streamed from SQLite peaks
    /// at about 200 bytes of wasm memory per held record; at this cap the
    /// isolate's wasm memory was 39.7 MiB, under a third of the isolate's
    /// 128 MB, and at 300,000 it was 65.7 MiB, over half
    /// (docs/memory.md, "The cap"; bench/RESULTS.md, "Memory and restore").
    pub const RESERVATIONS_MAX_MAX: u32 = 200_000;
    pub const RESERVATIONS_MAX_DEFAULT: u32 = RESERVATIONS_MAX_MAX;
    /// The fastest a waiting room may admit, in tickets per second.
    pub const ADMIT_PER_S_MAX: u32 = 100_000;
    /// The longest pre-queue before an opening: one day.
    pub const PREQUEUE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
    /// How long a waiting-room ticket may live, at least and at most.
    pub const TICKET_TTL_MS_MIN: u64 = 60 * 1000;
    pub const TICKET_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;
    /// The most reserve attempts per buyer per window a product may allow.
    pub const ATTEMPTS_PER_WINDOW_MAX_MAX: u32 = 10_000;
    /// The shortest and longest pacing window.
    pub const ATTEMPT_WINDOW_MS_MIN: u64 = 1_000;
    pub const ATTEMPT_WINDOW_MS_MAX: u64 = 60_000;
    /// The most buyers the object paces at once, within one window. Past
    /// it, further buyers are not tracked until the window turns: the
    /// edge's per-buyer rate limit still holds them.
    pub const PACED_BUYERS_MAX: usize = 100_000;
    /// The most arrival seconds a waiting room keeps counts for; older
    /// counts are folded into one total.
    pub const QUEUE_BUCKETS_MAX: usize = 86_400;
    /// The most tickets an edge's report names, so that the object counts
    /// a buyer who joins again only once (`Arrivals::forget_rejoins`);
    /// beyond it, tickets are counted without the check.
    pub const ARRIVALS_NAMED_MAX: usize = 1_024;
    /// The buyers the object's filter of those who joined is sized for:
    /// the most that fit the largest filter (`BLOOM_BYTES_MAX`) at
    /// its intended rate of false positives. Past it a new buyer is more
    /// often taken for one who joined before, and not counted, so the room
    /// admits a little faster than `admit_per_s`.
    pub const JOINED_SIZED_FOR: u64 = 131_072;
    /// The largest Bloom filter of buyers (`crate::bloom`), in bytes.
    pub const BLOOM_BYTES_MAX: usize = 256 * 1024;
    /// The most expiries and purges one event settles (bench/RESULTS.md,
    /// "The core", gives the measurement behind it). More that are due wait
    /// for the next event, and the alarm is set to fire at once.
    pub const SETTLE_PER_EVENT_MAX: u32 = 2_000;
    /// A product's face (`crate::face`): a name in one language, in bytes
    /// of UTF-8 (40 Chinese characters), and its short description.
    pub const FACE_NAME_BYTES_MAX: usize = 120;
    pub const FACE_DESCRIPTION_BYTES_MAX: usize = 600;
    /// An image URL; longer ones are tracking links, not images.
    pub const FACE_IMAGE_URL_BYTES_MAX: usize = 512;
    /// A price's digits before and after the point: below a billion, and
    /// the three decimals some currencies (KWD) have.
    pub const FACE_PRICE_INTEGER_DIGITS_MAX: usize = 9;
    pub const FACE_PRICE_FRACTION_DIGITS_MAX: usize = 3;
    /// The waiting room's odds (`odds.rs`) assume this many admitted
    /// tickets that took one unit each before the object's own count, so
    /// that the first verdicts, from a handful of tickets, are not
    /// optimistic by chance.
    pub const UPTAKE_PRIOR_TICKETS: u64 = 20;
    /// The admission record (`lottery::AdmissionRecord`): at most this many points
    /// of the watermark over time, at most one per `RECORD_STEP_MS` at
    /// first; when full, every other point goes and the step doubles. A
    /// point is about 100 bytes of JSON, so the record stays under 13 KB
    /// in the stored row and in each snapshot; an hour's sale ends with a
    /// point about every 32 s.
    pub const RECORD_POINTS_MAX: usize = 128;
    pub const RECORD_STEP_MS: u64 = 1_000;
    /// A product's history (`history::History`): at most this many time
    /// buckets, each `HISTORY_STEP_MS` wide at first; when full, each pair
    /// merges and the step doubles. A sale of up to 8 min 32 s keeps
    /// one-second buckets; a week's product ends with buckets of about 40
    /// minutes.
    pub const HISTORY_BUCKETS_MAX: usize = 512;
    pub const HISTORY_STEP_MS: u64 = 1_000;
    /// The longest a noted count waits in memory for a write: the object
    /// writes its history with every batch that writes anyway, and
    /// otherwise sets its alarm this long after the oldest unwritten note.
    /// So a crash loses at most the refusals of the last 10 s (and of the
    /// alarm's delay), and a sold-out product's refusals cost one write per
    /// 10 s, not one per click.
    pub const HISTORY_FLUSH_MS: u64 = 10_000;
    /// The proof of work at the join (`crate::pow`): the highest level a
    /// product may ask, and the level a setting that names none asks. Level
    /// 4 (16^4 PBKDF2 tries) took a median of 5.3 s in headless Chromium
    /// on 2 cores; level 5 passed the widget's 90 s timeout there
    /// (bench/RESULTS.md, "The waiting room's proof of work").
    pub const POW_LEVEL_MAX: u8 = 4;
    pub const POW_LEVEL_DEFAULT: u8 = 3;
    /// Adaptive proof of work: the join rate is taken over this window, and
    /// each fourfold of the admission rate it passes adds a level.
    pub const POW_RATE_WINDOW_S: u64 = 10;
    pub const POW_ADAPTIVE_STEP: u64 = 4;

    const _: () = assert!(OUTBOX_BACKOFF_BASE_MS <= OUTBOX_BACKOFF_CAP_MS);
    const _: () = assert!(HOLD_TTL_MS_MIN <= HOLD_TTL_MS_MAX);
    // Every hold takes at least one unit, so a product can never need more
    // records for live holds than it has units; the record cap must at least
    // allow a modest sale to be fully held.
    const _: () = assert!(RESERVATIONS_MAX_MAX as u64 <= STOCK_UNITS_MAX);
    // Sums of units and instants stay exact as JavaScript numbers.
    const _: () = assert!(STOCK_UNITS_MAX <= INSTANT_MS_MAX);
    const _: () = assert!(INSTANT_MS_MAX < 1 << 53);
    const _: () = assert!(TICKET_TTL_MS_MIN <= TICKET_TTL_MS_MAX);
    const _: () = assert!(ATTEMPT_WINDOW_MS_MIN <= ATTEMPT_WINDOW_MS_MAX);
}

/// The admin-set mode of a sale. The state a buyer sees also depends on the
/// sale window; see [`SaleState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The sale follows its window: scheduled before `opens_at_ms`, open
    /// until `closes_at_ms`, closed after.
    Active,
    /// Reserves are refused; holds can still be confirmed or cancelled.
    Paused,
    /// Terminal. Reserves are refused; holds made before the close can still
    /// be confirmed until they expire, because the buyer was promised them.
    Closed,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Active, Mode::Paused, Mode::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Active => "active",
            Mode::Paused => "paused",
            Mode::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// What a buyer sees at an instant: the mode combined with the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaleState {
    Scheduled,
    Open,
    Paused,
    Closed,
}

impl SaleState {
    pub fn as_str(self) -> &'static str {
        match self {
            SaleState::Scheduled => "scheduled",
            SaleState::Open => "open",
            SaleState::Paused => "paused",
            SaleState::Closed => "closed",
        }
    }
}

/// The tunable rules of one product. Stock and mode are not here: they change
/// through their own admin operations, which check their own invariants.
///
/// The field names are also the columns of the Durable Object's `config`
/// table and the members of an admin's product update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Units one buyer may hold plus have confirmed, over the whole sale.
    pub per_buyer_max: u32,
    /// Units one reserve request may ask for.
    pub quantity_max: u32,
    /// How long a hold waits for payment before its units return.
    pub hold_ttl_ms: u64,
    /// How long after a hold's expiry its idempotency record (and tombstone)
    /// is kept, so that a late retry still replays instead of reserving anew.
    pub idem_window_ms: u64,
    /// Reserves before this instant are refused with `NotOpen`.
    pub opens_at_ms: Option<u64>,
    /// Reserves at or after this instant are refused with `Closed`.
    pub closes_at_ms: Option<u64>,
    /// The most reservation records kept at once: live holds plus tombstones
    /// of cancelled or expired holds still inside their idempotency window.
    /// Confirmed reservations are not counted: they are bounded by the stock.
    /// At the limit a new reserve is refused with `Overloaded` until the
    /// oldest tombstone ages out; nothing already promised is forgotten.
    pub reservations_max: u32,
    /// The waiting room's admission rate, in tickets per second; 0 means
    /// no waiting room, and reserves need no ticket.
    pub admit_per_s: u32,
    /// How long before `opens_at_ms` the waiting room takes arrivals. All
    /// of them are ordered at random at the opening (a fair lottery), ahead
    /// of everyone who arrives later.
    pub prequeue_ms: u64,
    /// How long a waiting-room ticket lives from its arrival.
    pub ticket_ttl_ms: u64,
    /// At most this many reserve attempts per buyer per `attempt_window_ms`
    /// reach a decision; more are refused with `RateLimited`. Replays are free.
    pub attempts_per_window_max: u32,
    pub attempt_window_ms: u64,
    /// The proof of work the waiting room asks at the join (`crate::pow`).
    /// Not a column of the `config` table: the object keeps it in its own
    /// row, as the face.
    #[serde(default)]
    pub pow: Pow,
    /// What the pages show of the product; the gate decides nothing by it.
    /// Not a column of the `config` table: the object keeps it in its own
    /// row, so a config row read alone has the empty face. Boxed: it is
    /// read only to be shown, and unboxed it would triple the size of every
    /// `Row` and `Change`.
    #[serde(default)]
    pub face: Box<Face>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            per_buyer_max: 2,
            quantity_max: 2,
            hold_ttl_ms: 5 * 60 * 1000,
            idem_window_ms: 10 * 60 * 1000,
            opens_at_ms: None,
            closes_at_ms: None,
            reservations_max: limits::RESERVATIONS_MAX_DEFAULT,
            admit_per_s: 0,
            prequeue_ms: 0,
            ticket_ttl_ms: 60 * 60 * 1000,
            attempts_per_window_max: 20,
            attempt_window_ms: 10_000,
            pow: Pow::default(),
            face: Box::default(),
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    PerBuyerMax,
    QuantityMax,
    HoldTtl,
    IdemWindow,
    Instant,
    Window,
    ReservationsMax,
    AdmitPerS,
    Prequeue,
    TicketTtl,
    AttemptsPerWindow,
    AttemptWindow,
    Pow,
    Face(FaceError),
}

impl ConfigError {
    /// A sentence for the admin, with the bounds read from [`limits`].
    pub fn describe(self) -> String {
        use limits::*;
        match self {
            ConfigError::PerBuyerMax => "per_buyer_max must be at least 1".into(),
            ConfigError::QuantityMax => {
                format!("quantity_max must be between 1 and {QUANTITY_MAX_MAX}")
            }
            ConfigError::HoldTtl => {
                format!("hold_ttl_ms must be between {HOLD_TTL_MS_MIN} and {HOLD_TTL_MS_MAX}")
            }
            ConfigError::IdemWindow => {
                format!("idem_window_ms must be at most {IDEM_WINDOW_MS_MAX}")
            }
            ConfigError::Instant => {
                format!("opens_at_ms and closes_at_ms must be at most {INSTANT_MS_MAX}")
            }
            ConfigError::Window => "opens_at_ms must be before closes_at_ms".into(),
            ConfigError::ReservationsMax => {
                format!("reservations_max must be between 1 and {RESERVATIONS_MAX_MAX}")
            }
            ConfigError::AdmitPerS => format!("admit_per_s must be at most {ADMIT_PER_S_MAX}"),
            ConfigError::Prequeue => format!(
                "prequeue_ms must be at most {PREQUEUE_MS_MAX}, and needs opens_at_ms"
            ),
            ConfigError::TicketTtl => format!(
                "ticket_ttl_ms must be between {TICKET_TTL_MS_MIN} and {TICKET_TTL_MS_MAX}"
            ),
            ConfigError::AttemptsPerWindow => format!(
                "attempts_per_window_max must be between 1 and {ATTEMPTS_PER_WINDOW_MAX_MAX}"
            ),
            ConfigError::AttemptWindow => format!(
                "attempt_window_ms must be between {ATTEMPT_WINDOW_MS_MIN} and {ATTEMPT_WINDOW_MS_MAX}"
            ),
            ConfigError::Pow => format!(
                "pow.level must be between 1 and {POW_LEVEL_MAX}, and a proof of work needs a waiting room (admit_per_s above 0)"
            ),
            ConfigError::Face(e) => e.describe(),
        }
    }
}

impl Config {
    /// The only range check of a configuration: the edge checks types, and
    /// every bound is checked here, once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.per_buyer_max == 0 {
            return Err(ConfigError::PerBuyerMax);
        }
        if self.quantity_max == 0 || self.quantity_max > limits::QUANTITY_MAX_MAX {
            return Err(ConfigError::QuantityMax);
        }
        if !(limits::HOLD_TTL_MS_MIN..=limits::HOLD_TTL_MS_MAX).contains(&self.hold_ttl_ms) {
            return Err(ConfigError::HoldTtl);
        }
        if self.idem_window_ms > limits::IDEM_WINDOW_MS_MAX {
            return Err(ConfigError::IdemWindow);
        }
        let instants = [self.opens_at_ms, self.closes_at_ms];
        if instants
            .iter()
            .flatten()
            .any(|&t| t > limits::INSTANT_MS_MAX)
        {
            return Err(ConfigError::Instant);
        }
        if let (Some(open), Some(close)) = (self.opens_at_ms, self.closes_at_ms) {
            if open >= close {
                return Err(ConfigError::Window);
            }
        }
        if self.reservations_max == 0 || self.reservations_max > limits::RESERVATIONS_MAX_MAX {
            return Err(ConfigError::ReservationsMax);
        }
        if self.admit_per_s > limits::ADMIT_PER_S_MAX {
            return Err(ConfigError::AdmitPerS);
        }
        if self.prequeue_ms > limits::PREQUEUE_MS_MAX
            || (self.prequeue_ms > 0 && self.opens_at_ms.is_none())
        {
            return Err(ConfigError::Prequeue);
        }
        if !(limits::TICKET_TTL_MS_MIN..=limits::TICKET_TTL_MS_MAX).contains(&self.ticket_ttl_ms) {
            return Err(ConfigError::TicketTtl);
        }
        if self.attempts_per_window_max == 0
            || self.attempts_per_window_max > limits::ATTEMPTS_PER_WINDOW_MAX_MAX
        {
            return Err(ConfigError::AttemptsPerWindow);
        }
        if !(limits::ATTEMPT_WINDOW_MS_MIN..=limits::ATTEMPT_WINDOW_MS_MAX)
            .contains(&self.attempt_window_ms)
        {
            return Err(ConfigError::AttemptWindow);
        }
        if !self.pow.valid() || (self.pow.is_on() && self.admit_per_s == 0) {
            return Err(ConfigError::Pow);
        }
        self.face.validate().map_err(ConfigError::Face)?;
        Ok(())
    }

    /// The sale's state a buyer sees at `now_ms` under `mode`.
    pub fn sale_state(&self, mode: Mode, now_ms: u64) -> SaleState {
        // A sale past its window is closed whatever its mode, and a pause
        // outranks the schedule, so that an admin's pause is what buyers see.
        if mode == Mode::Closed || self.closes_at_ms.is_some_and(|c| now_ms >= c) {
            SaleState::Closed
        } else if mode == Mode::Paused {
            SaleState::Paused
        } else if self.opens_at_ms.is_some_and(|o| now_ms < o) {
            SaleState::Scheduled
        } else {
            SaleState::Open
        }
    }
}

/// An admin's change to a product: every member is optional, and an absent
/// one keeps its value (or the default, for a new product). It is the body
/// of `PUT /admin/products/{id}` as it stands: unknown members are refused,
/// types are checked by serde, and ranges only by [`Config::validate`] and
/// the gate, so that no bound is written twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stock_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// How many stock shards the product's stock lives in (`escrow.rs`):
    /// set when the product is created, 1 by default, and fixed after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_buyer_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idem_window_ms: Option<u64>,
    /// `null` clears the instant, so these are doubly optional: `None` is
    /// "unchanged" and `Some(None)` is "clear".
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub opens_at_ms: Option<Option<u64>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub closes_at_ms: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservations_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_per_s: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prequeue_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_per_window_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_window_ms: Option<u64>,
    /// Replaces the whole proof-of-work setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pow: Option<Pow>,
    /// Replaces the whole face; `{}` clears it. Boxed, as in [`Config`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub face: Option<Box<Face>>,
}

/// A member that is present, possibly as `null`. An absent member is `None`
/// through `#[serde(default)]`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

impl ConfigPatch {
    /// The rules with this patch applied. Both structs are destructured in
    /// full, so a field added to either without the other fails to compile.
    pub fn apply(&self, c: &Config) -> Config {
        let ConfigPatch {
            stock_total: _,
            mode: _,
            shards: _,
            per_buyer_max,
            quantity_max,
            hold_ttl_ms,
            idem_window_ms,
            opens_at_ms,
            closes_at_ms,
            reservations_max,
            admit_per_s,
            prequeue_ms,
            ticket_ttl_ms,
            attempts_per_window_max,
            attempt_window_ms,
            pow,
            face: _,
        } = *self;
        let Config {
            per_buyer_max: c_per_buyer_max,
            quantity_max: c_quantity_max,
            hold_ttl_ms: c_hold_ttl_ms,
            idem_window_ms: c_idem_window_ms,
            opens_at_ms: c_opens_at_ms,
            closes_at_ms: c_closes_at_ms,
            reservations_max: c_reservations_max,
            admit_per_s: c_admit_per_s,
            prequeue_ms: c_prequeue_ms,
            ticket_ttl_ms: c_ticket_ttl_ms,
            attempts_per_window_max: c_attempts_per_window_max,
            attempt_window_ms: c_attempt_window_ms,
            pow: c_pow,
            face: _,
        } = *c;
        Config {
            per_buyer_max: per_buyer_max.unwrap_or(c_per_buyer_max),
            quantity_max: quantity_max.unwrap_or(c_quantity_max),
            hold_ttl_ms: hold_ttl_ms.unwrap_or(c_hold_ttl_ms),
            idem_window_ms: idem_window_ms.unwrap_or(c_idem_window_ms),
            opens_at_ms: opens_at_ms.unwrap_or(c_opens_at_ms),
            closes_at_ms: closes_at_ms.unwrap_or(c_closes_at_ms),
            reservations_max: reservations_max.unwrap_or(c_reservations_max),
            admit_per_s: admit_per_s.unwrap_or(c_admit_per_s),
            prequeue_ms: prequeue_ms.unwrap_or(c_prequeue_ms),
            ticket_ttl_ms: ticket_ttl_ms.unwrap_or(c_ticket_ttl_ms),
            attempts_per_window_max: attempts_per_window_max.unwrap_or(c_attempts_per_window_max),
            attempt_window_ms: attempt_window_ms.unwrap_or(c_attempt_window_ms),
            pow: pow.unwrap_or(c_pow),
            // The face is the one member that is not `Copy`, so it is
            // cloned here rather than destructured above.
            face: self.face.as_ref().unwrap_or(&c.face).clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_sets_only_what_it_names() {
        let patch: ConfigPatch =
            serde_json::from_str(r#"{"hold_ttl_ms": 2000, "opens_at_ms": null}"#).unwrap();
        let base = Config {
            opens_at_ms: Some(5),
            ..Config::default()
        };
        let c = patch.apply(&base);
        assert_eq!(c.hold_ttl_ms, 2000);
        assert_eq!(c.opens_at_ms, None);
        assert_eq!(c.per_buyer_max, base.per_buyer_max);
        let stock_only: ConfigPatch = serde_json::from_str(r#"{"stock_total": 3}"#).unwrap();
        assert_eq!(stock_only.apply(&base), base);
        // A patch survives the trip from the Worker to the object as JSON.
        let trip: ConfigPatch =
            serde_json::from_str(&serde_json::to_string(&patch).unwrap()).unwrap();
        assert_eq!(trip, patch);
    }

    #[test]
    fn a_patch_refuses_unknown_members_and_bad_modes() {
        for bad in [
            r#"{"price": 1}"#,
            r#"{"mode": "open"}"#,
            r#"{"per_buyer_max": -1}"#,
        ] {
            assert!(serde_json::from_str::<ConfigPatch>(bad).is_err(), "{bad}");
        }
        let p: ConfigPatch = serde_json::from_str(r#"{"mode": "paused"}"#).unwrap();
        assert_eq!(p.mode, Some(Mode::Paused));
    }

    #[test]
    fn messages_state_the_limits() {
        assert!(ConfigError::QuantityMax
            .describe()
            .contains(&limits::QUANTITY_MAX_MAX.to_string()));
        assert!(ConfigError::ReservationsMax
            .describe()
            .contains(&limits::RESERVATIONS_MAX_MAX.to_string()));
    }
}
