//! Which problem code each refusal of the core answers with.
//!
//! `ProblemCode`, the table of every code with its status and title, lives
//! in the wire crate, because the load tool and the peers speak it too.
//! What is the gate's own is the step from an outcome to its code, and it
//! is written nowhere: the core's `outcome_kinds!` table names each kind's
//! code (its counter's key), and a refusal answers with the problem code of
//! that spelling. The tables below are computed from the kinds at compile
//! time, so a refusal whose code is no problem code stops the build.

pub use flashgate_wire::codes::ProblemCode;

use flashgate_core::{AdminRefusalKind, CancelKind, ConfirmKind, ReserveKind};

/// `$Kind`'s problem codes, indexed by kind: `None` for the kinds that
/// match `$success`, and for every other kind the problem code its own
/// `code()` spells. Evaluated in a `const`, so a missing code is a compile
/// error.
macro_rules! problems_by_kind {
    ($Kind:ident $(, success: $success:pat)?) => {{
        let mut table = [None; $Kind::ALL.len()];
        let mut i = 0;
        while i < table.len() {
            let kind = $Kind::ALL[i];
            // The lookups index by `kind as usize`.
            assert!(kind as usize == i, "ALL is in declaration order");
            let success = false $(|| matches!(kind, $success))?;
            if !success {
                let code = ProblemCode::parse(kind.code());
                table[i] = Some(code.expect("a refusal's code is a problem code"));
            }
            i += 1;
        }
        table
    }};
}

const RESERVE: [Option<ProblemCode>; ReserveKind::ALL.len()] = problems_by_kind!(
    ReserveKind,
    success: ReserveKind::Reserved | ReserveKind::Replayed
);
const CONFIRM: [Option<ProblemCode>; ConfirmKind::ALL.len()] =
    problems_by_kind!(ConfirmKind, success: ConfirmKind::Confirmed);
const CANCEL: [Option<ProblemCode>; CancelKind::ALL.len()] =
    problems_by_kind!(CancelKind, success: CancelKind::Cancelled);
const ADMIN: [Option<ProblemCode>; AdminRefusalKind::ALL.len()] =
    problems_by_kind!(AdminRefusalKind);

/// The problem of a refused reserve; `None` for the two successes.
pub const fn of_reserve(kind: ReserveKind) -> Option<ProblemCode> {
    RESERVE[kind as usize]
}

/// The problem of a refused confirm; `None` for the success.
pub const fn of_confirm(kind: ConfirmKind) -> Option<ProblemCode> {
    CONFIRM[kind as usize]
}

/// The problem of a refused cancel; `None` for the success.
pub const fn of_cancel(kind: CancelKind) -> Option<ProblemCode> {
    CANCEL[kind as usize]
}

/// The problem of a refused admin operation.
pub const fn of_admin(kind: AdminRefusalKind) -> ProblemCode {
    match ADMIN[kind as usize] {
        Some(code) => code,
        // `ADMIN` names a code for every kind; this arm is never taken.
        None => ProblemCode::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes of the kinds for which `of` names no problem.
    fn successes<K: Copy>(
        all: &[K],
        of: impl Fn(K) -> Option<ProblemCode>,
        code: impl Fn(K) -> &'static str,
    ) -> Vec<&'static str> {
        all.iter()
            .filter(|k| of(**k).is_none())
            .map(|k| code(*k))
            .collect()
    }

    /// Which outcomes succeed is the one thing written here by hand: pin
    /// it. A success of one operation (a cancel's `cancelled`) can be a
    /// refusal of another (a confirm's), so it is not read from the codes.
    #[test]
    fn the_successes_are_the_outcomes_without_a_problem() {
        assert_eq!(
            successes(ReserveKind::ALL, of_reserve, ReserveKind::code),
            ["reserved", "replayed"]
        );
        assert_eq!(
            successes(ConfirmKind::ALL, of_confirm, ConfirmKind::code),
            ["confirmed"]
        );
        assert_eq!(
            successes(CancelKind::ALL, of_cancel, CancelKind::code),
            ["cancelled"]
        );
        assert!(ADMIN.iter().all(Option::is_some), "{ADMIN:?}");
        assert_eq!(
            of_confirm(ConfirmKind::Cancelled),
            Some(ProblemCode::Cancelled)
        );
    }

    /// Each refusal answers with the problem code of its own spelling, and
    /// so with that code's status: a sample that a reader can check by eye.
    #[test]
    fn refusals_answer_with_the_code_of_their_spelling() {
        let sold_out = of_reserve(ReserveKind::SoldOut).expect("a refusal");
        assert_eq!((sold_out.as_str(), sold_out.status()), ("sold_out", 409));
        let paced = of_reserve(ReserveKind::RateLimited).expect("a refusal");
        assert_eq!((paced.as_str(), paced.status()), ("rate_limited", 429));
        // Two admin kinds share one code: a body the core refuses is as
        // invalid as one that does not parse.
        assert_eq!(
            of_admin(AdminRefusalKind::StockRequired),
            ProblemCode::InvalidBody
        );
        assert_eq!(
            of_admin(AdminRefusalKind::InvalidConfig),
            ProblemCode::InvalidBody
        );
    }
}
