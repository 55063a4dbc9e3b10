//! Product configuration and the hard limits that bound every input.

/// Hard limits. They bound memory and arithmetic, so that no input, however
/// hostile, can make the gate allocate without bound or overflow a counter.
pub mod limits {
    /// The largest stock a product may have. It keeps `stock_total` and every
    /// sum of units far below `u64::MAX`, so sums never overflow.
    pub const STOCK_UNITS_MAX: u64 = 1_000_000_000;
    /// The largest `quantity_max` a product may configure.
    pub const QUANTITY_MAX_MAX: u32 = 1_000;
    /// The longest hold a product may configure: one day.
    pub const HOLD_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;
    /// The shortest hold a product may configure.
    pub const HOLD_TTL_MS_MIN: u64 = 100;
    /// The longest idempotency window after a hold's expiry: one week.
    pub const IDEM_WINDOW_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
    /// Byte limits of the strings the core stores. The edge validates the
    /// charset; the core only refuses what would break its memory budget.
    pub const BUYER_ID_BYTES_MAX: usize = 64;
    pub const IDEM_KEY_BYTES_MAX: usize = 64;
    pub const PAYMENT_REF_BYTES_MAX: usize = 128;
    /// The most outbox entries one poll may hand out; the origin accepts
    /// batches of at most this size.
    pub const OUTBOX_BATCH_SIZE_MAX: usize = 500;
    /// Retries back off from this delay, doubling per attempt.
    pub const OUTBOX_BACKOFF_BASE_MS: u64 = 500;
    /// Retries never wait longer than this.
    pub const OUTBOX_BACKOFF_CAP_MS: u64 = 60_000;
    /// A handed-out batch that is neither acked nor nacked within this time
    /// is handed out again; the shell that took it is presumed dead.
    pub const OUTBOX_LEASE_MS: u64 = 30_000;
    /// The most reservation records (live holds plus tombstones kept for
    /// idempotent replay) a product may configure.
    pub const RESERVATIONS_MAX_MAX: u32 = 4_000_000;

    const _: () = assert!(OUTBOX_BACKOFF_BASE_MS <= OUTBOX_BACKOFF_CAP_MS);
    const _: () = assert!(HOLD_TTL_MS_MIN <= HOLD_TTL_MS_MAX);
    // Every hold takes at least one unit, so a product can never need more
    // records for live holds than it has units; the record cap must at least
    // allow a modest sale to be fully held.
    const _: () = assert!(RESERVATIONS_MAX_MAX as u64 <= STOCK_UNITS_MAX);
}

/// The admin-set mode of a sale. The phase a buyer sees also depends on the
/// sale window; see [`Phase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Active => "active",
            Mode::Paused => "paused",
            Mode::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "active" => Some(Mode::Active),
            "paused" => Some(Mode::Paused),
            "closed" => Some(Mode::Closed),
            _ => None,
        }
    }
}

/// What a buyer sees at an instant: the mode combined with the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Scheduled,
    Open,
    Paused,
    Closed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Scheduled => "scheduled",
            Phase::Open => "open",
            Phase::Paused => "paused",
            Phase::Closed => "closed",
        }
    }
}

/// The tunable rules of one product. Stock and mode are not here: they change
/// through their own admin operations, which check their own invariants.
#[derive(Clone, Debug, PartialEq, Eq)]
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
            reservations_max: 1_000_000,
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
    Window,
    ReservationsMax,
}

impl ConfigError {
    pub fn describe(self) -> &'static str {
        match self {
            ConfigError::PerBuyerMax => "per_buyer_max must be at least 1",
            ConfigError::QuantityMax => "quantity_max must be between 1 and 1000",
            ConfigError::HoldTtl => "hold_ttl_ms must be between 100 and 86400000",
            ConfigError::IdemWindow => "idem_window_ms must be at most 604800000",
            ConfigError::Window => "opens_at_ms must be before closes_at_ms",
            ConfigError::ReservationsMax => "reservations_max must be between 1 and 4000000",
        }
    }
}

impl Config {
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
        if let (Some(open), Some(close)) = (self.opens_at_ms, self.closes_at_ms) {
            if open >= close {
                return Err(ConfigError::Window);
            }
        }
        if self.reservations_max == 0 || self.reservations_max > limits::RESERVATIONS_MAX_MAX {
            return Err(ConfigError::ReservationsMax);
        }
        Ok(())
    }

    /// The phase a buyer sees at `now_ms` under `mode`.
    pub fn phase(&self, mode: Mode, now_ms: u64) -> Phase {
        // A sale past its window is closed whatever its mode, and a pause
        // outranks the schedule, so that an admin's pause is what buyers see.
        if mode == Mode::Closed || self.closes_at_ms.is_some_and(|c| now_ms >= c) {
            Phase::Closed
        } else if mode == Mode::Paused {
            Phase::Paused
        } else if self.opens_at_ms.is_some_and(|o| now_ms < o) {
            Phase::Scheduled
        } else {
            Phase::Open
        }
    }
}
