//! The gate's problem codes: one table, the only place a code's string, HTTP
//! status and title are written.
//!
//! They live in the wire crate, not in the gate, because three programs
//! answer or read them: the gate, `flashgate-load` (which counts answers by
//! code) and the peers of `bench/peers` (which answer with the gate's codes).
//! The gate derives which code each of its refusals answers with from the
//! core's outcome kinds (`codes` in the gate crate); `openapi.yaml` lists the
//! same codes, and the gate's contract test checks the two against each other.

macro_rules! problem_codes {
    ($($Var:ident => $code:literal, $status:literal, $title:literal;)+) => {
        /// Every problem code the gate answers with.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProblemCode {
            $($Var,)+
        }

        impl ProblemCode {
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$Var,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ProblemCode::$Var => $code,)+
                }
            }

            pub const fn status(self) -> u16 {
                match self {
                    $(ProblemCode::$Var => $status,)+
                }
            }

            /// The fixed summary of the code (RFC 9457 section 3.1.3).
            pub const fn title(self) -> &'static str {
                match self {
                    $(ProblemCode::$Var => $title,)+
                }
            }
        }
    };
}

problem_codes! {
    // Refused at the edge, before any Durable Object.
    NotFound => "not_found", 404, "No such route";
    MethodNotAllowed => "method_not_allowed", 405, "Method not allowed";
    BodyTooLarge => "body_too_large", 413, "Request body too large";
    UnsupportedMediaType => "unsupported_media_type", 415, "Unsupported media type";
    NotAcceptable => "not_acceptable", 406, "Not acceptable";
    MalformedJson => "malformed_json", 400, "Malformed JSON";
    InvalidBody => "invalid_body", 422, "Invalid request body";
    InvalidProductId => "invalid_product_id", 400, "Invalid product id";
    InvalidQuery => "invalid_query", 400, "Invalid query";
    IdempotencyKeyMissing => "idempotency_key_missing", 400, "Idempotency-Key required";
    IdempotencyKeyInvalid => "idempotency_key_invalid", 400, "Invalid Idempotency-Key";
    TokenMissing => "token_missing", 401, "Buyer token required";
    TokenInvalid => "token_invalid", 401, "Invalid buyer token";
    TokenExpired => "token_expired", 401, "Buyer token expired";
    BadSignature => "bad_signature", 401, "Missing or bad signature";
    Unauthorized => "unauthorized", 401, "Admin token required";
    RateLimited => "rate_limited", 429, "Too many requests";
    TicketInvalid => "ticket_invalid", 403, "Invalid waiting-room ticket";
    NoWaitingRoom => "no_waiting_room", 409, "No waiting room";
    PowRequired => "pow_required", 403, "Proof of work required";
    NoPow => "no_pow", 409, "No proof of work asked";
    // Decided by the product's object.
    UnknownProduct => "unknown_product", 404, "Unknown product";
    UnknownReservation => "unknown_reservation", 404, "Unknown reservation";
    IdempotencyConflict => "idempotency_conflict", 422, "Idempotency-Key reused";
    SoldOut => "sold_out", 409, "Sold out";
    InsufficientStock => "insufficient_stock", 409, "Not enough stock";
    BuyerLimit => "buyer_limit", 403, "Buyer limit reached";
    NotOpen => "not_open", 409, "Sale not open yet";
    Closed => "closed", 409, "Sale closed";
    Paused => "paused", 409, "Sale paused";
    InvalidQuantity => "invalid_quantity", 422, "Invalid quantity";
    InvalidInput => "invalid_input", 422, "Invalid input";
    Overloaded => "overloaded", 503, "Too many open reservations";
    TicketRequired => "ticket_required", 403, "Waiting-room ticket required";
    TicketExpired => "ticket_expired", 403, "Waiting-room ticket expired";
    NotAdmitted => "not_admitted", 403, "Not admitted yet";
    Expired => "expired", 409, "Reservation expired";
    Cancelled => "cancelled", 409, "Reservation cancelled";
    AlreadyConfirmed => "already_confirmed", 409, "Reservation already confirmed";
    AlreadyExpired => "already_expired", 409, "Reservation already expired";
    Voided => "voided", 409, "Order voided";
    NotConfirmed => "not_confirmed", 409, "Not a confirmed order";
    BelowCommitted => "below_committed", 409, "Total below committed units";
    StockTooLarge => "stock_too_large", 422, "Stock too large";
    BuyerAboveLimit => "buyer_above_limit", 409, "per_buyer_max below a buyer's units";
    SaleClosed => "sale_closed", 409, "Sale closed for good";
    ShardsFixed => "shards_fixed", 409, "A product's shards are set when it is created";
    // The gate failed; retrying is safe.
    UpgradeRequired => "upgrade_required", 426, "WebSocket upgrade required";
    LiveFull => "live_full", 503, "Too many live viewers";
    CatalogFull => "catalog_full", 409, "Too many products";
    Internal => "internal", 500, "Internal error";
    Unavailable => "unavailable", 503, "Product temporarily unavailable";
    Misconfigured => "misconfigured", 500, "Gate misconfigured";
}

impl ProblemCode {
    /// The code `code` spells, if it is one. A `const fn`, so that the
    /// gate derives its refusals' codes at compile time.
    pub const fn parse(code: &str) -> Option<ProblemCode> {
        let mut i = 0;
        while i < ProblemCode::ALL.len() {
            if same(ProblemCode::ALL[i].as_str(), code) {
                return Some(ProblemCode::ALL[i]);
            }
            i += 1;
        }
        None
    }
}

/// `a == b`, in a `const fn` (`str`'s `PartialEq` is not const).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_statuses_are_errors() {
        let mut seen = HashSet::new();
        for c in ProblemCode::ALL {
            assert!(seen.insert(c.as_str()), "{} twice", c.as_str());
            assert!((400..600).contains(&c.status()), "{}", c.as_str());
            assert!(!c.title().is_empty());
        }
    }

    #[test]
    fn parse_reads_back_every_code_and_nothing_else() {
        for &c in ProblemCode::ALL {
            assert_eq!(ProblemCode::parse(c.as_str()), Some(c), "{}", c.as_str());
        }
        for text in [
            "",
            "sold_ou",
            "sold_outs",
            "Sold_out",
            "reserved",
            "sold out",
        ] {
            assert_eq!(ProblemCode::parse(text), None, "{text:?}");
        }
    }
}
