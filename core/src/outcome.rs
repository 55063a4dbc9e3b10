//! Every answer the gate gives is a value of one of these enums. A refusal is
//! an ordinary outcome, never a panic: a panic in the Durable Object resets the
//! whole wasm instance.

use crate::config::ConfigError;

/// A reservation's id, unique within its product and never reused.
pub type ReservationId = u64;

/// The answer to a reserve request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Units are held for the buyer until `expires_at_ms`.
    Reserved {
        reservation_id: ReservationId,
        expires_at_ms: u64,
        quantity: u32,
    },
    /// The same buyer sent the same key with the same request before; this
    /// is the answer it got then. Nothing changed.
    Replayed {
        reservation_id: ReservationId,
        expires_at_ms: u64,
        quantity: u32,
    },
    /// The same buyer sent the same key with a different request before.
    IdempotencyConflict {
        reservation_id: ReservationId,
    },
    SoldOut,
    InsufficientStock {
        available: u64,
    },
    BuyerLimitReached {
        remaining: u32,
    },
    NotOpen {
        opens_at_ms: u64,
    },
    Closed,
    Paused,
    /// Zero, or more than the product's `quantity_max`.
    InvalidQuantity {
        quantity_max: u32,
    },
    /// A buyer id or idempotency key that is empty or too long.
    InvalidInput(InvalidInput),
    /// The product keeps as many reservation records as it may. Retry after
    /// `retry_after_ms`, when the oldest tombstone ages out.
    Overloaded {
        retry_after_ms: u64,
    },
}

impl ReserveOutcome {
    /// A stable machine-readable code, used as the HTTP problem `code` and
    /// as the key of the per-outcome counters.
    pub fn code(&self) -> &'static str {
        match self {
            ReserveOutcome::Reserved { .. } => "reserved",
            ReserveOutcome::Replayed { .. } => "replayed",
            ReserveOutcome::IdempotencyConflict { .. } => "idempotency_conflict",
            ReserveOutcome::SoldOut => "sold_out",
            ReserveOutcome::InsufficientStock { .. } => "insufficient_stock",
            ReserveOutcome::BuyerLimitReached { .. } => "buyer_limit",
            ReserveOutcome::NotOpen { .. } => "not_open",
            ReserveOutcome::Closed => "closed",
            ReserveOutcome::Paused => "paused",
            ReserveOutcome::InvalidQuantity { .. } => "invalid_quantity",
            ReserveOutcome::InvalidInput(_) => "invalid_input",
            ReserveOutcome::Overloaded { .. } => "overloaded",
        }
    }

    /// This outcome's counter; `stats::RESERVE_CODES[slot]` is its code.
    pub(crate) fn slot(&self) -> usize {
        match self {
            ReserveOutcome::Reserved { .. } => 0,
            ReserveOutcome::Replayed { .. } => 1,
            ReserveOutcome::IdempotencyConflict { .. } => 2,
            ReserveOutcome::SoldOut => 3,
            ReserveOutcome::InsufficientStock { .. } => 4,
            ReserveOutcome::BuyerLimitReached { .. } => 5,
            ReserveOutcome::NotOpen { .. } => 6,
            ReserveOutcome::Closed => 7,
            ReserveOutcome::Paused => 8,
            ReserveOutcome::InvalidQuantity { .. } => 9,
            ReserveOutcome::InvalidInput(_) => 10,
            ReserveOutcome::Overloaded { .. } => 11,
        }
    }
}

/// Which input the core refused as malformed. The edge refuses these before
/// the Durable Object sees them; the core checks again because it must never
/// trust its caller with its memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidInput {
    BuyerId,
    IdempotencyKey,
    PaymentRef,
}

/// What a confirmed reservation records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmation {
    pub reservation_id: ReservationId,
    pub quantity: u32,
    pub payment_ref: String,
    pub confirmed_at_ms: u64,
    /// The outbox entry that forwards this confirmation to the origin.
    pub outbox_seq: u64,
}

/// The answer to a confirm request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfirmOutcome {
    /// The reservation is sold. A repeated confirm returns the same data.
    Confirmed(Confirmation),
    /// The hold expired before the confirm arrived; its units went back.
    Expired,
    Cancelled,
    /// No such reservation for this buyer (or it aged out of its window).
    Unknown,
    InvalidInput(InvalidInput),
}

impl ConfirmOutcome {
    pub fn code(&self) -> &'static str {
        match self {
            ConfirmOutcome::Confirmed(_) => "confirmed",
            ConfirmOutcome::Expired => "expired",
            ConfirmOutcome::Cancelled => "cancelled",
            ConfirmOutcome::Unknown => "unknown_reservation",
            ConfirmOutcome::InvalidInput(_) => "invalid_input",
        }
    }

    /// This outcome's counter; `stats::CONFIRM_CODES[slot]` is its code.
    pub(crate) fn slot(&self) -> usize {
        match self {
            ConfirmOutcome::Confirmed(_) => 0,
            ConfirmOutcome::Expired => 1,
            ConfirmOutcome::Cancelled => 2,
            ConfirmOutcome::Unknown => 3,
            ConfirmOutcome::InvalidInput(_) => 4,
        }
    }
}

/// The answer to a cancel request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The hold is cancelled and its units are available again. Cancelling a
    /// cancelled reservation again returns this again and changes nothing.
    Cancelled {
        quantity: u32,
    },
    AlreadyConfirmed,
    AlreadyExpired,
    Unknown,
}

impl CancelOutcome {
    pub fn code(&self) -> &'static str {
        match self {
            CancelOutcome::Cancelled { .. } => "cancelled",
            CancelOutcome::AlreadyConfirmed => "already_confirmed",
            CancelOutcome::AlreadyExpired => "already_expired",
            CancelOutcome::Unknown => "unknown_reservation",
        }
    }

    /// This outcome's counter; `stats::CANCEL_CODES[slot]` is its code.
    pub(crate) fn slot(&self) -> usize {
        match self {
            CancelOutcome::Cancelled { .. } => 0,
            CancelOutcome::AlreadyConfirmed => 1,
            CancelOutcome::AlreadyExpired => 2,
            CancelOutcome::Unknown => 3,
        }
    }
}

/// The answer to an admin operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOutcome {
    Done,
    /// The new total would be below the units already held or sold.
    BelowCommitted {
        committed: u64,
    },
    /// The new total would exceed `limits::STOCK_UNITS_MAX`.
    StockTooLarge,
    InvalidConfig(ConfigError),
    /// `per_buyer_max` would drop below the units a buyer already has.
    BuyerAboveLimit {
        units: u32,
    },
    /// A closed sale stays closed.
    SaleClosed,
}

/// The answer to an outbox acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// This many entries were removed from the outbox.
    Acked { entries: u32 },
    /// Nothing at or below that sequence was waiting; nothing changed.
    Stale,
    /// The sequence was never handed out. Acking it would drop an entry the
    /// origin never saw, so it is refused.
    NotHandedOut,
}
