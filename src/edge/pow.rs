//! The proof of work at the join, as the edge runs it: the challenge it
//! hands a buyer, and what a join gets for the payload it carries.
//!
//! The protocol is ALTCHA's (`flashgate_wire::altcha`); the level comes
//! with the object's snapshot (`PowNow`), which follows the product's
//! setting and the join rate every edge reports (`flashgate_core::pow`).
//! A challenge is stateless: signed under a key derived from `ID_SECRET`,
//! bound to the buyer and the product, and valid for `POW_CHALLENGE_TTL_MS`.
//! A join pays the level asked when it arrives: a payload solved at a lower
//! level, before the level rose, gets a fresh challenge at the level now
//! (docs/proof-of-work.md, "When the level rises"). A replayed payload only
//! repeats its buyer's join, which counts the buyer once
//! (`Arrivals::forget_rejoins`).

use flashgate_wire::altcha::{self, Binding, Challenge, PowError};

use crate::http::problem::Problem;
use crate::limits::{POW_CHALLENGE_TTL_MS, POW_COST_ROUNDS};
use crate::protocol::snapshot::PowNow;
use flashgate_wire::ProblemCode;

/// The request header a join's payload travels in (the widget's
/// `payload`, base64).
pub const POW_HEADER: &str = "flashgate-pow";

pub use crate::ids::PowKey;

/// What a join gets.
#[derive(Clone, Debug, PartialEq)]
pub enum JoinAnswer {
    /// A ticket: no proof of work asked, or a valid one given.
    Ticket,
    /// A ticket of the infinite queue: the product chose it for joins
    /// without a valid solution.
    InfiniteQueue,
    /// No ticket: `pow_required` with a fresh challenge, and why (`None`:
    /// no payload). The stats count these as `pow_required`.
    PowRequired(Option<PowError>),
}

impl PowKey {
    /// A challenge for `buyer`'s join of `product` at `level`, from 32
    /// random bytes.
    pub fn challenge(
        &self,
        product: &str,
        buyer: &str,
        level: u8,
        random: &[u8; 32],
        now_ms: u64,
    ) -> Challenge {
        self.0.issue(
            Binding {
                buyer: buyer.into(),
                level,
                product: product.into(),
            },
            POW_COST_ROUNDS,
            random,
            now_ms.saturating_add(POW_CHALLENGE_TTL_MS) / 1000,
        )
    }

    /// What a join carrying `payload` gets, under the room's `pow`.
    ///
    /// A payload below the level asked now answers a challenge this gate
    /// issued to this buyer for this product before the level rose. It gets
    /// a fresh challenge at the level now, in the infinite queue too: an
    /// honest buyer caught mid-solve by a raise loses that solve and no
    /// more, where a ticket of the infinite queue would lose it the sale.
    /// It tells a script nothing: the level asked is public (the product's
    /// `pow.asking`), and the check comes before the solution's.
    pub fn join(
        &self,
        pow: Option<PowNow>,
        payload: Option<&str>,
        product: &str,
        buyer: &str,
        now_ms: u64,
    ) -> JoinAnswer {
        let Some(pow) = pow else {
            return JoinAnswer::Ticket;
        };
        let refused = match payload {
            None => None,
            Some(text) => {
                let asked = Binding {
                    buyer: buyer.into(),
                    level: pow.level,
                    product: product.into(),
                };
                match self.0.verify(text, &asked, POW_COST_ROUNDS, now_ms) {
                    Ok(_) => return JoinAnswer::Ticket,
                    Err(PowError::LevelRaised) => {
                        return JoinAnswer::PowRequired(Some(PowError::LevelRaised))
                    }
                    Err(e) => Some(e),
                }
            }
        };
        if pow.infinite_queue {
            JoinAnswer::InfiniteQueue
        } else {
            JoinAnswer::PowRequired(refused)
        }
    }
}

/// The answer to a join that must solve `challenge` first.
pub fn required(challenge: &Challenge, why: Option<PowError>) -> Problem {
    let detail = match why {
        None => "this waiting room asks a proof of work: solve the challenge and send its payload as Flashgate-Pow".to_string(),
        Some(e) => format!("{}: solve this fresh challenge", e.describe()),
    };
    let mut p = Problem::new(ProblemCode::PowRequired, detail)
        .with("challenge", challenge_json(challenge))
        .with(
            "expected_tries",
            altcha::expected_tries(challenge.parameters.data.level),
        );
    if let Some(e) = why {
        p = p.with("reason", e.as_str());
    }
    p
}

/// The challenge as the widget takes it, with what it asks in plain
/// numbers beside it.
pub fn challenge_json(challenge: &Challenge) -> serde_json::Value {
    // A struct of strings and numbers always serializes.
    serde_json::to_value(challenge).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_wire::altcha::{payload, solve};

    const NOW: u64 = 1_800_000_000_000;
    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn solved(k: &PowKey, product: &str, buyer: &str, now_ms: u64) -> String {
        solved_at(k, product, buyer, 1, now_ms)
    }

    fn solved_at(k: &PowKey, product: &str, buyer: &str, level: u8, now_ms: u64) -> String {
        let c = k.challenge(product, buyer, level, &[3; 32], now_ms);
        payload(&c, &solve(&c, 1 << 20).unwrap())
    }

    const ON: PowNow = PowNow {
        level: 1,
        infinite_queue: false,
    };

    #[test]
    fn a_join_needs_a_valid_solution_when_the_room_asks_one() {
        let k = PowKey::new(SECRET);
        let good = solved(&k, "p1", "alice", NOW);
        assert_eq!(k.join(None, None, "p1", "alice", NOW), JoinAnswer::Ticket);
        assert_eq!(
            k.join(Some(ON), Some(&good), "p1", "alice", NOW),
            JoinAnswer::Ticket
        );
        // A replay is the same join again.
        assert_eq!(
            k.join(Some(ON), Some(&good), "p1", "alice", NOW + 1),
            JoinAnswer::Ticket
        );
        assert_eq!(
            k.join(Some(ON), None, "p1", "alice", NOW),
            JoinAnswer::PowRequired(None)
        );
        for (payload, product, buyer, now, why) in [
            (good.as_str(), "p1", "bob", NOW, PowError::OtherBuyer),
            (&good, "p2", "alice", NOW, PowError::OtherProduct),
            (
                &good,
                "p1",
                "alice",
                NOW + POW_CHALLENGE_TTL_MS,
                PowError::Expired,
            ),
            ("junk", "p1", "alice", NOW, PowError::Malformed),
        ] {
            assert_eq!(
                k.join(Some(ON), Some(payload), product, buyer, now),
                JoinAnswer::PowRequired(Some(why))
            );
        }
        // Another gate's challenge.
        let other = solved(
            &PowKey::new(b"another-secret-of-thirty-two-byte"),
            "p1",
            "alice",
            NOW,
        );
        assert_eq!(
            k.join(Some(ON), Some(&other), "p1", "alice", NOW),
            JoinAnswer::PowRequired(Some(PowError::Forged))
        );
    }

    #[test]
    fn the_infinite_queue_answers_every_failed_join_with_a_ticket() {
        let k = PowKey::new(SECRET);
        let inf = PowNow {
            infinite_queue: true,
            ..ON
        };
        let good = solved(&k, "p1", "alice", NOW);
        assert_eq!(
            k.join(Some(inf), Some(&good), "p1", "alice", NOW),
            JoinAnswer::Ticket
        );
        assert_eq!(
            k.join(Some(inf), None, "p1", "alice", NOW),
            JoinAnswer::InfiniteQueue
        );
        assert_eq!(
            k.join(Some(inf), Some(&good), "p1", "bob", NOW),
            JoinAnswer::InfiniteQueue
        );
    }

    /// A payload solved before the level rose (a farm's stock, or an honest
    /// buyer's solve the raise overtook) gets a fresh challenge at the level
    /// now, in the infinite queue too; one solved at or above it is taken.
    #[test]
    fn a_join_pays_the_level_asked_when_it_arrives() {
        let k = PowKey::new(SECRET);
        let level_1 = solved_at(&k, "p1", "alice", 1, NOW);
        let level_2 = solved_at(&k, "p1", "alice", 2, NOW);
        for infinite_queue in [false, true] {
            let at = |level| {
                Some(PowNow {
                    level,
                    infinite_queue,
                })
            };
            for asked in [2, 3, 4] {
                assert_eq!(
                    k.join(at(asked), Some(&level_1), "p1", "alice", NOW),
                    JoinAnswer::PowRequired(Some(PowError::LevelRaised)),
                    "level 1 when {asked} is asked"
                );
            }
            assert_eq!(
                k.join(at(3), Some(&level_2), "p1", "alice", NOW),
                JoinAnswer::PowRequired(Some(PowError::LevelRaised))
            );
            for asked in [1, 2] {
                assert_eq!(
                    k.join(at(asked), Some(&level_2), "p1", "alice", NOW),
                    JoinAnswer::Ticket
                );
            }
            // Another buyer's payload below the level is still a cheat:
            // the infinite queue takes it as it takes any other.
            let bobs = solved_at(&k, "p1", "bob", 1, NOW);
            assert_eq!(
                k.join(at(2), Some(&bobs), "p1", "alice", NOW),
                if infinite_queue {
                    JoinAnswer::InfiniteQueue
                } else {
                    JoinAnswer::PowRequired(Some(PowError::OtherBuyer))
                }
            );
        }
        let fresh = k.challenge("p1", "alice", 3, &[4; 32], NOW);
        let p = required(&fresh, Some(PowError::LevelRaised)).document();
        assert_eq!(p.status, 403);
        assert_eq!(p.extra["reason"], "level_raised");
        assert_eq!(p.extra["expected_tries"], 4_096);
    }

    #[test]
    fn a_challenge_states_its_level_binding_and_expiry() {
        let k = PowKey::new(SECRET);
        let c = k.challenge("p1", "alice", 3, &[5; 32], NOW);
        assert_eq!(c.parameters.key_prefix, "000");
        assert_eq!(c.parameters.data.level, 3);
        assert_eq!(c.parameters.cost, POW_COST_ROUNDS);
        assert_eq!(c.parameters.expires_at, (NOW + POW_CHALLENGE_TTL_MS) / 1000);
        let p = required(&c, Some(PowError::Expired)).document();
        assert_eq!(p.status, 403);
        assert_eq!(p.code, "pow_required");
    }
}
