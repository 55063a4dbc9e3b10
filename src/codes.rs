//! Which problem code each refusal of the core answers with.
//!
//! `ProblemCode`, the table of every code with its status and title, lives
//! in the wire crate, because the load tool and the peers speak it too.
//! The core's outcome kinds carry their own codes (`flashgate_core::outcome`)
//! because the core counts outcomes by code; each refusal kind maps here to
//! the problem code of the same spelling, and a test checks every one.

pub use flashgate_wire::codes::ProblemCode;

use flashgate_core::{AdminRefusalKind, CancelKind, ConfirmKind, ReserveKind};

/// The problem of a refused reserve; `None` for the two successes.
pub fn of_reserve(kind: ReserveKind) -> Option<ProblemCode> {
    Some(match kind {
        ReserveKind::Reserved | ReserveKind::Replayed => return None,
        ReserveKind::IdempotencyConflict => ProblemCode::IdempotencyConflict,
        ReserveKind::SoldOut => ProblemCode::SoldOut,
        ReserveKind::InsufficientStock => ProblemCode::InsufficientStock,
        ReserveKind::BuyerLimitReached => ProblemCode::BuyerLimit,
        ReserveKind::NotOpen => ProblemCode::NotOpen,
        ReserveKind::Closed => ProblemCode::Closed,
        ReserveKind::Paused => ProblemCode::Paused,
        ReserveKind::InvalidQuantity => ProblemCode::InvalidQuantity,
        ReserveKind::InvalidInput => ProblemCode::InvalidInput,
        ReserveKind::Overloaded => ProblemCode::Overloaded,
        ReserveKind::Paced => ProblemCode::RateLimited,
        ReserveKind::TicketRequired => ProblemCode::TicketRequired,
        ReserveKind::TicketExpired => ProblemCode::TicketExpired,
        ReserveKind::NotAdmitted => ProblemCode::NotAdmitted,
    })
}

pub fn of_confirm(kind: ConfirmKind) -> Option<ProblemCode> {
    Some(match kind {
        ConfirmKind::Confirmed => return None,
        ConfirmKind::Expired => ProblemCode::Expired,
        ConfirmKind::Cancelled => ProblemCode::Cancelled,
        ConfirmKind::Voided => ProblemCode::Voided,
        ConfirmKind::Unknown => ProblemCode::UnknownReservation,
        ConfirmKind::InvalidInput => ProblemCode::InvalidInput,
    })
}

pub fn of_cancel(kind: CancelKind) -> Option<ProblemCode> {
    Some(match kind {
        CancelKind::Cancelled => return None,
        CancelKind::AlreadyConfirmed => ProblemCode::AlreadyConfirmed,
        CancelKind::AlreadyExpired => ProblemCode::AlreadyExpired,
        CancelKind::Voided => ProblemCode::Voided,
        CancelKind::Unknown => ProblemCode::UnknownReservation,
    })
}

pub fn of_admin(kind: AdminRefusalKind) -> ProblemCode {
    match kind {
        AdminRefusalKind::StockRequired | AdminRefusalKind::InvalidConfig => {
            ProblemCode::InvalidBody
        }
        AdminRefusalKind::BelowCommitted => ProblemCode::BelowCommitted,
        AdminRefusalKind::StockTooLarge => ProblemCode::StockTooLarge,
        AdminRefusalKind::BuyerAboveLimit => ProblemCode::BuyerAboveLimit,
        AdminRefusalKind::SaleClosed => ProblemCode::SaleClosed,
        AdminRefusalKind::UnknownReservation => ProblemCode::UnknownReservation,
        AdminRefusalKind::NotConfirmed => ProblemCode::NotConfirmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's codes and the HTTP codes are one list: every refusal of
    /// the core answers with the problem code of the same spelling.
    #[test]
    fn core_refusals_answer_with_their_own_code() {
        for &k in ReserveKind::ALL {
            if let Some(p) = of_reserve(k) {
                assert_eq!(p.as_str(), k.code());
            }
        }
        for &k in ConfirmKind::ALL {
            if let Some(p) = of_confirm(k) {
                assert_eq!(p.as_str(), k.code());
            }
        }
        for &k in CancelKind::ALL {
            if let Some(p) = of_cancel(k) {
                assert_eq!(p.as_str(), k.code());
            }
        }
        for &k in AdminRefusalKind::ALL {
            assert_eq!(of_admin(k).as_str(), k.code());
        }
        // The successes are exactly the outcomes with no problem.
        let ok: Vec<_> = ReserveKind::ALL
            .iter()
            .filter(|k| of_reserve(**k).is_none())
            .collect();
        assert_eq!(ok, [&ReserveKind::Reserved, &ReserveKind::Replayed]);
    }
}
