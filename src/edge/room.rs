//! The waiting room's answers at the edge, each decided from the product's
//! snapshot, the isolate's `EdgeCache` and the request: a join (its proof
//! of work, its ticket, its first standing), a poll of a ticket's standing,
//! a proof-of-work challenge, and the admission record with the ticket's
//! place (`edge::record`). Tickets are signed here and standings read from
//! the snapshot, so a crowd in the room costs its object about one request
//! per isolate per second.
//!
//! Pure: `edge::pipeline` proves the buyer, counts it against its limit and
//! checks the product exists before any of these, then fetches the
//! snapshot; `crate::wasm::edge` executes the steps.

use flashgate_wire::altcha::PowError;
use serde_json::json;

use crate::edge::cache::EdgeCache;
use crate::edge::pow::{self, JoinAnswer};
use crate::edge::ticket::TicketClaims;
use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::http::time::rfc3339;
use crate::protocol::snapshot::Snapshot;
use crate::settings::Settings;

/// Which of the room's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomRoute {
    /// `POST /api/products/{id}/queue`: a ticket.
    Join,
    /// `GET /api/products/{id}/queue`: the ticket's standing.
    Standing,
    /// `GET /api/products/{id}/queue/challenge`: a proof-of-work challenge.
    Challenge,
    /// `GET /api/products/{id}/queue/record`: the admission record.
    Record,
}

/// What a request to the room comes to.
#[derive(Debug)]
pub enum Decided {
    Answer(Reply),
    Refuse(Problem),
    /// 503 `unavailable`: the snapshot has a room but not yet its lottery
    /// key.
    Unavailable,
    /// A proof-of-work challenge is to be signed: draw 32 random bytes, and
    /// give them to `challenge`.
    Challenge(Challenging),
}

/// A challenge to sign, and what it answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Challenging {
    pub level: u8,
    /// The time of the decision, which the challenge's expiry counts from.
    pub now_ms: u64,
    pub why: Asked,
}

/// Why a challenge is signed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Asked {
    /// A join without a valid solution is refused with a fresh one
    /// (`None`: it carried no payload).
    JoinRefused(Option<PowError>),
    /// The buyer asked for one.
    Asked,
}

/// The problem of a poll or record that sent no ticket.
fn ticket_required() -> Problem {
    Problem::new(
        ProblemCode::TicketRequired,
        "send the ticket from joining the waiting room as Flashgate-Ticket",
    )
}

/// The problem of a poll or record of a product without a room.
fn no_room() -> Problem {
    Problem::new(
        ProblemCode::NoWaitingRoom,
        "this product has no waiting room: reserve directly",
    )
}

/// A join of `buyer` (proven) carrying `pow_payload`: a ticket (of the
/// infinite queue when the product chose it for a join without a valid
/// solution), or the challenge it must solve first. Counts the ticket, or
/// the refused proof, in `cache`.
pub fn join(
    settings: &Settings,
    product_id: &str,
    buyer: &str,
    pow_payload: Option<&str>,
    snapshot: &Snapshot,
    cache: &mut EdgeCache,
    now_ms: u64,
) -> Decided {
    let q = match snapshot.may_join(now_ms) {
        Ok(q) => q,
        Err(p) => return Decided::Refuse(p),
    };
    // The object draws the key in the event that sets the room up, so a
    // snapshot with a room and no key is one from before it did.
    let Some(lottery) = q.admission.lottery.key else {
        return Decided::Unavailable;
    };
    // The proof of work, when the room asks one: a join without a valid
    // solution gets a fresh challenge, or, in the infinite queue, a ticket
    // never admitted and never reported.
    let infinite_queue = match settings
        .pow_key
        .join(q.pow, pow_payload, product_id, buyer, now_ms)
    {
        JoinAnswer::Ticket => false,
        JoinAnswer::InfiniteQueue => true,
        JoinAnswer::PowRequired(why) => {
            cache.pow_required(product_id);
            return Decided::Challenge(Challenging {
                level: q.pow.map_or(1, |p| p.level),
                now_ms,
                why: Asked::JoinRefused(why),
            });
        }
    };
    let (text, claims) = settings.ticket_key.issue(
        product_id,
        buyer,
        &lottery.0,
        now_ms,
        q.ticket_ttl_ms,
        infinite_queue,
    );
    let ticket = claims.ticket();
    if infinite_queue {
        cache.pow_infinite_queued(product_id);
    } else {
        cache.issued(product_id, &ticket, q.opens_at_ms);
    }
    let standing = snapshot.standing(q, &ticket, cache.unreported(product_id).as_ref(), now_ms);
    Decided::Answer(Reply::ok(
        201,
        json!({
            "ticket": text,
            "buyer_id": buyer,
            "arrived_at_ms": claims.t,
            "expires_at": rfc3339(claims.e),
            "expires_at_ms": claims.e,
            "admitted": standing.admitted,
            "position": standing.position,
            "eta_s": standing.eta_s,
            "available": standing.odds.available,
            "held": standing.odds.held,
            "ahead": standing.odds.ahead,
            "verdict": standing.odds.verdict.as_str(),
            "waiting_for_returns": standing.odds.waiting_for_returns,
        }),
    ))
}

/// A poll of the standing of the ticket `ticket_text`, which must be
/// `buyer`'s for this product.
pub fn standing(
    settings: &Settings,
    product_id: &str,
    buyer: &str,
    ticket_text: Option<&str>,
    snapshot: &Snapshot,
    cache: &EdgeCache,
    now_ms: u64,
) -> Decided {
    let claims = match ticket(settings, product_id, buyer, ticket_text, now_ms) {
        Ok(c) => c,
        Err(p) => return Decided::Refuse(p),
    };
    let Some(q) = &snapshot.room else {
        return Decided::Refuse(no_room());
    };
    let standing = snapshot.standing(
        q,
        &claims.ticket(),
        cache.unreported(product_id).as_ref(),
        now_ms,
    );
    Decided::Answer(Reply::ok(
        200,
        json!({
            "admitted": standing.admitted,
            "position": standing.position,
            "eta_s": standing.eta_s,
            "state": snapshot.state,
            "available": standing.odds.available,
            "held": standing.odds.held,
            "ahead": standing.odds.ahead,
            "verdict": standing.odds.verdict.as_str(),
            "waiting_for_returns": standing.odds.waiting_for_returns,
            "expires_at": rfc3339(claims.e),
            "expires_at_ms": claims.e,
        }),
    ))
}

/// The ticket a poll or a record sends, verified: this gate's, for this
/// product and buyer, and not expired.
pub fn ticket(
    settings: &Settings,
    product_id: &str,
    buyer: &str,
    ticket_text: Option<&str>,
    now_ms: u64,
) -> Result<TicketClaims, Problem> {
    let text = ticket_text.ok_or_else(ticket_required)?;
    settings
        .ticket_key
        .verify(text, product_id, buyer, now_ms)
        .map_err(|e| e.problem())
}

/// A buyer's request for a challenge: checked as a join is (the room's
/// state), at the level the snapshot asks; nothing is kept of it.
pub fn ask_challenge(snapshot: &Snapshot, now_ms: u64) -> Decided {
    let q = match snapshot.may_join(now_ms) {
        Ok(q) => q,
        Err(p) => return Decided::Refuse(p),
    };
    let Some(pow) = q.pow else {
        return Decided::Refuse(Problem::new(
            ProblemCode::NoPow,
            "this waiting room asks no proof of work: join directly",
        ));
    };
    Decided::Challenge(Challenging {
        level: pow.level,
        now_ms,
        why: Asked::Asked,
    })
}

/// The challenge `c` signed with 32 random bytes: a join's refusal, or the
/// challenge asked for.
pub fn challenge(
    settings: &Settings,
    product_id: &str,
    buyer: &str,
    c: Challenging,
    random: &[u8; 32],
) -> Decided {
    let challenge = settings
        .pow_key
        .challenge(product_id, buyer, c.level, random, c.now_ms);
    match c.why {
        Asked::JoinRefused(why) => Decided::Refuse(pow::required(&challenge, why)),
        Asked::Asked => {
            let mut body = pow::challenge_json(&challenge);
            body["expected_tries"] = flashgate_wire::altcha::expected_tries(c.level).into();
            let mut reply = Reply::ok(200, body);
            reply.headers.push(("cache-control", "no-store".into()));
            Decided::Answer(reply)
        }
    }
}

/// The admission record with the place of the ticket `claims` (verified
/// by `ticket` before the snapshot was fetched).
pub fn record(
    product_id: &str,
    snapshot: &Snapshot,
    claims: &TicketClaims,
    now_ms: u64,
) -> Decided {
    let Some(q) = &snapshot.room else {
        return Decided::Refuse(no_room());
    };
    Decided::Answer(Reply::ok(
        200,
        crate::edge::record::body(product_id, q, claims, now_ms),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::snapshot::{PowNow, RoomSnapshot};
    use crate::settings::tests::settings;
    use flashgate_core::{Admission, Uptake};
    use flashgate_wire::SaleState;

    pub(crate) const OPEN: u64 = 1_000_000;

    /// A product with `available` units, open at `OPEN`, with a room when
    /// `queue` (its lottery key drawn) and the proof of work `pow`.
    pub(crate) fn snapshot(available: u64, queue: bool, pow: Option<PowNow>) -> Snapshot {
        let mut admission = Admission::default();
        admission.lottery.key = Some(flashgate_core::LotteryKey([7; 32]));
        Snapshot {
            at_ms: OPEN,
            product: json!({"id": "p1"}),
            available,
            held: 0,
            state: SaleState::Open,
            room: queue.then(|| RoomSnapshot {
                admit_per_s: 10,
                opens_at_ms: Some(OPEN),
                prequeue_ms: 60_000,
                ticket_ttl_ms: 3_600_000,
                admission,
                uptake: Uptake::default(),
                pow,
            }),
            sold_out: None,
            shards: 1,
            existing: 1,
            fetched_at_ms: OPEN,
        }
    }

    fn answer(d: Decided) -> Reply {
        match d {
            Decided::Answer(r) => r,
            other => panic!("not an answer: {other:?}"),
        }
    }

    fn refusal(d: Decided) -> ProblemCode {
        match d {
            Decided::Refuse(p) => p.code,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn a_join_gets_a_ticket_its_poll_reads_back() {
        let s = settings();
        let snap = snapshot(10, true, None);
        let mut cache = EdgeCache::default();
        let joined = answer(join(&s, "p1", "alice", None, &snap, &mut cache, OPEN + 5));
        assert_eq!(joined.status, 201);
        assert_eq!(joined.body["buyer_id"], "alice");
        assert_eq!(joined.body["arrived_at_ms"], OPEN + 5);
        assert!(cache.unreported("p1").is_some(), "the ticket is counted");
        let text = joined.body["ticket"].as_str().unwrap().to_string();
        let polled = answer(standing(
            &s,
            "p1",
            "alice",
            Some(&text),
            &snap,
            &cache,
            OPEN + 6,
        ));
        assert_eq!(polled.status, 200);
        assert_eq!(polled.body["expires_at_ms"], joined.body["expires_at_ms"]);
        assert_eq!(polled.body["state"], "open");
        // Another buyer's ticket, or none, is refused.
        let bob = standing(&s, "p1", "bob", Some(&text), &snap, &cache, OPEN + 6);
        assert_eq!(refusal(bob), ProblemCode::TicketInvalid);
        let none = standing(&s, "p1", "alice", None, &snap, &cache, OPEN + 6);
        assert_eq!(refusal(none), ProblemCode::TicketRequired);
    }

    #[test]
    fn without_a_room_or_its_key_nobody_joins() {
        let s = settings();
        let mut cache = EdgeCache::default();
        let plain = snapshot(10, false, None);
        let d = join(&s, "p1", "alice", None, &plain, &mut cache, OPEN);
        assert_eq!(refusal(d), ProblemCode::NoWaitingRoom);
        let d = standing(&s, "p1", "alice", Some("v1.x.y"), &plain, &cache, OPEN);
        assert_eq!(
            refusal(d),
            ProblemCode::TicketInvalid,
            "the ticket is checked first"
        );
        let mut keyless = snapshot(10, true, None);
        keyless.room.as_mut().unwrap().admission.lottery.key = None;
        let d = join(&s, "p1", "alice", None, &keyless, &mut cache, OPEN);
        assert!(matches!(d, Decided::Unavailable), "{d:?}");
        assert!(cache.unreported("p1").is_none(), "nothing was issued");
    }

    #[test]
    fn a_join_without_a_solution_is_asked_one_or_sent_to_the_infinite_queue() {
        let s = settings();
        let mut cache = EdgeCache::default();
        let pow = PowNow {
            level: 3,
            infinite_queue: false,
        };
        let snap = snapshot(10, true, Some(pow));
        let d = join(&s, "p1", "alice", None, &snap, &mut cache, OPEN);
        let Decided::Challenge(c) = d else {
            panic!("{d:?}")
        };
        assert_eq!(
            c,
            Challenging {
                level: 3,
                now_ms: OPEN,
                why: Asked::JoinRefused(None),
            }
        );
        let refused = challenge(&s, "p1", "alice", c, &[1; 32]);
        assert_eq!(refusal(refused), ProblemCode::PowRequired);
        // In the infinite queue, a ticket never admitted.
        let infinite_queued = snapshot(
            10,
            true,
            Some(PowNow {
                level: 3,
                infinite_queue: true,
            }),
        );
        let joined = answer(join(
            &s,
            "p1",
            "alice",
            None,
            &infinite_queued,
            &mut cache,
            OPEN,
        ));
        assert_eq!(joined.status, 201);
        assert_eq!(joined.body["admitted"], false);
    }

    #[test]
    fn a_challenge_is_asked_of_a_room_with_a_proof_of_work_only() {
        let s = settings();
        let d = ask_challenge(&snapshot(10, true, None), OPEN);
        assert_eq!(refusal(d), ProblemCode::NoPow);
        let pow = PowNow {
            level: 2,
            infinite_queue: false,
        };
        let Decided::Challenge(c) = ask_challenge(&snapshot(10, true, Some(pow)), OPEN) else {
            panic!("no challenge")
        };
        assert_eq!(c.why, Asked::Asked);
        let reply = answer(challenge(&s, "p1", "alice", c, &[1; 32]));
        assert_eq!(reply.status, 200);
        assert!(reply.body["expected_tries"].is_number());
        assert!(reply
            .headers
            .iter()
            .any(|(n, v)| *n == "cache-control" && v == "no-store"));
        // A sold-out room asks nothing.
        let d = ask_challenge(&snapshot(0, true, Some(pow)), OPEN);
        assert_eq!(refusal(d), ProblemCode::SoldOut);
    }

    #[test]
    fn the_record_needs_a_ticket_and_a_room() {
        let s = settings();
        assert_eq!(
            ticket(&s, "p1", "alice", None, OPEN).unwrap_err().code,
            ProblemCode::TicketRequired
        );
        let snap = snapshot(10, true, None);
        let mut cache = EdgeCache::default();
        let joined = answer(join(&s, "p1", "alice", None, &snap, &mut cache, OPEN));
        let text = joined.body["ticket"].as_str().unwrap();
        let claims = ticket(&s, "p1", "alice", Some(text), OPEN).unwrap();
        let reply = answer(record("p1", &snap, &claims, OPEN + 1));
        assert_eq!(reply.status, 200);
        let d = record("p1", &snapshot(10, false, None), &claims, OPEN);
        assert_eq!(refusal(d), ProblemCode::NoWaitingRoom);
    }
}
