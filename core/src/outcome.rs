//! Every answer the gate gives is a value of one of these enums. A refusal is
//! an ordinary outcome, never a panic: a panic in the Durable Object resets the
//! whole wasm instance.
//!
//! Each outcome enum has a `Kind`: its variants without their data, declared
//! by [`outcome_kinds!`] from one table that names each variant's stable code.
//! The kind is the index of the outcome's counter and `code()` is read from
//! the same table, so the codes, the counter slots and the code lists cannot
//! drift apart. The HTTP layer maps each kind to a problem code and a test
//! checks that the two spell every code the same.

use crate::config::ConfigError;

/// A reservation's id, unique within its product and never reused.
pub type ReservationId = u64;

/// Declares `$Kind`, the data-less twin of `$Outcome`, from one table of
/// `Variant => "code"` lines, with `ALL`, `code()` and `$Outcome::kind()`.
macro_rules! outcome_kinds {
    ($(#[$meta:meta])* $Outcome:ident => $Kind:ident { $($Var:ident => $code:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $Kind {
            $($Var,)+
        }

        impl $Kind {
            /// Every kind, in counter-slot order.
            pub const ALL: &'static [$Kind] = &[$($Kind::$Var,)+];

            /// The stable machine-readable code: the HTTP problem `code` of
            /// a refusal, and the key of its counter.
            pub const fn code(self) -> &'static str {
                match self {
                    $($Kind::$Var => $code,)+
                }
            }
        }

        impl $Outcome {
            pub fn kind(&self) -> $Kind {
                match self {
                    $($Outcome::$Var { .. } => $Kind::$Var,)+
                }
            }

            pub fn code(&self) -> &'static str {
                self.kind().code()
            }
        }
    };
}

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
    /// The buyer made `attempts_per_window_max` attempts in this window;
    /// the next is allowed after `retry_after_ms`.
    RateLimited {
        retry_after_ms: u64,
    },
    /// The product has a waiting room and the request carried no ticket.
    TicketRequired,
    /// The ticket is older than the product's `ticket_ttl_ms`.
    TicketExpired,
    /// The ticket's turn has not come; about `position` tickets are ahead.
    NotAdmitted {
        position: u64,
    },
    /// A stock shard could not decide within its bounded wait: it has too
    /// few units, and home could not say whether any is left elsewhere (a
    /// shard did not answer its drain, or home did not answer the call).
    /// Never `SoldOut`, which would be a guess. Retry after
    /// `retry_after_ms`.
    Unavailable {
        retry_after_ms: u64,
    },
}

outcome_kinds! {
    /// The kinds of [`ReserveOutcome`].
    ReserveOutcome => ReserveKind {
        Reserved => "reserved",
        Replayed => "replayed",
        IdempotencyConflict => "idempotency_conflict",
        SoldOut => "sold_out",
        InsufficientStock => "insufficient_stock",
        BuyerLimitReached => "buyer_limit",
        NotOpen => "not_open",
        Closed => "closed",
        Paused => "paused",
        InvalidQuantity => "invalid_quantity",
        InvalidInput => "invalid_input",
        Overloaded => "overloaded",
        RateLimited => "rate_limited",
        TicketRequired => "ticket_required",
        TicketExpired => "ticket_expired",
        NotAdmitted => "not_admitted",
        Unavailable => "unavailable",
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
    /// The order was confirmed, then voided by the admin.
    Voided,
    /// No such reservation for this buyer (or it aged out of its window).
    Unknown,
    InvalidInput(InvalidInput),
}

outcome_kinds! {
    /// The kinds of [`ConfirmOutcome`].
    ConfirmOutcome => ConfirmKind {
        Confirmed => "confirmed",
        Expired => "expired",
        Cancelled => "cancelled",
        Voided => "voided",
        Unknown => "unknown_reservation",
        InvalidInput => "invalid_input",
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
    /// The order was confirmed, then voided by the admin.
    Voided,
    Unknown,
}

outcome_kinds! {
    /// The kinds of [`CancelOutcome`].
    CancelOutcome => CancelKind {
        Cancelled => "cancelled",
        AlreadyConfirmed => "already_confirmed",
        AlreadyExpired => "already_expired",
        Voided => "voided",
        Unknown => "unknown_reservation",
    }
}

/// Why an admin operation was refused. Admin operations return
/// `Result<_, AdminRefusal>`: a refused one changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminRefusal {
    /// A product is created with a `stock_total`.
    StockRequired,
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
    /// A void names no reservation the gate still knows.
    UnknownReservation,
    /// A void of a reservation that is not a confirmed order.
    NotConfirmed,
    /// `shards` must be from 1 to `escrow::limits::SHARDS_MAX`.
    InvalidShards,
    /// A product's shards are set when it is created.
    ShardsFixed,
    /// A stock shard takes its rules and stock from home only: an admin's
    /// change sent to it is a bug of the Worker, and changes nothing.
    NotHome,
}

outcome_kinds! {
    /// The kinds of [`AdminRefusal`]. A configuration out of range is an
    /// invalid body, as a type error in the same body is.
    AdminRefusal => AdminRefusalKind {
        StockRequired => "invalid_body",
        BelowCommitted => "below_committed",
        StockTooLarge => "stock_too_large",
        InvalidConfig => "invalid_body",
        BuyerAboveLimit => "buyer_above_limit",
        SaleClosed => "sale_closed",
        UnknownReservation => "unknown_reservation",
        NotConfirmed => "not_confirmed",
        InvalidShards => "invalid_body",
        ShardsFixed => "shards_fixed",
        NotHome => "internal",
    }
}

/// A voided order: its units are back in stock, and the void is on its way
/// to the origin. Voiding it again returns the same answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Voided {
    pub reservation_id: ReservationId,
    pub quantity: u32,
    pub voided_at_ms: u64,
}

/// The answer to an outbox acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// This many entries were removed from the outbox.
    Acked { entries: u64 },
    /// Nothing at or below that sequence was waiting; nothing changed.
    Stale,
    /// The sequence was never handed out. Acking it would drop an entry the
    /// origin never saw, so it is refused.
    NotHandedOut,
}
