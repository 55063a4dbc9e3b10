//! `GET /api/products/{id}/queue/record`: what a buyer needs to check the
//! waiting room from outside, answered at the edge from the snapshot.
//!
//! The answer holds the lottery's commitment (and the key once the sale
//! opened), the admission record (the watermark over time, bounded:
//! `limits::RECORD_POINTS_MAX` points), the watermark now, and the asking
//! ticket's own place in the order and when the record first shows it
//! admitted. With the key a buyer recomputes their tiebreak
//! (`flashgate_wire::lottery::tiebreak`), so their place; with the record
//! they see that the watermark never moved back, so that nobody behind
//! them was admitted before them. `flashgate-load --audit` checks a whole
//! sale this way.
//!
//! A ticket of the infinite queue is shown the record as it stood before
//! the watermark passed its place, and no further (`shown_to`): its holder
//! can compute the place from the ticket and the key, so a record that
//! showed the watermark past it would contradict its poll (never
//! admitted) and its reserve (`not_admitted`). Every point it sees is a
//! true point of the record; only the later ones are left out, as if the
//! room had stopped just short of it.

use flashgate_core::{Point, Published, QueueKey};
use flashgate_wire::lottery::commitment;
use serde::Serialize;

use crate::edge::ticket::TicketClaims;
use crate::protocol::snapshot::RoomSnapshot;

#[derive(Serialize)]
struct Lottery {
    /// `SHA-256(key)` in hex; `null` only before the room's key is drawn.
    commitment: Option<String>,
    /// The key in hex, from the opening on.
    key: Option<String>,
}

#[derive(Serialize)]
struct Place {
    buyer_id: String,
    arrived_at_ms: u64,
    tiebreak: u32,
    /// Its key in the queue's total order.
    place: QueueKey,
    admitted: bool,
    /// When the record first shows it admitted: its first point above the
    /// place, or, if only the watermark now is, now. It was admitted at or
    /// before this instant.
    admitted_at_ms: Option<u64>,
}

#[derive(Serialize)]
struct Now {
    at_ms: u64,
    below: QueueKey,
}

#[derive(Serialize)]
struct RecordBody<'a> {
    product_id: &'a str,
    opens_at_ms: Option<u64>,
    lottery: Lottery,
    step_ms: u64,
    points: &'a [Point],
    now: Now,
    ticket: Place,
}

/// The record's answer for the ticket `claims` (verified) at `now_ms`.
pub fn body(
    product_id: &str,
    q: &RoomSnapshot,
    claims: &TicketClaims,
    now_ms: u64,
) -> serde_json::Value {
    let rules = q.rules();
    let a = &q.admission;
    let lottery = match a.lottery.published(now_ms, rules.opens_at_ms) {
        Published::None => Lottery {
            commitment: None,
            key: None,
        },
        Published::Commitment(k) => Lottery {
            commitment: Some(commitment(&k.0)),
            key: None,
        },
        Published::Key(k) => Lottery {
            commitment: Some(commitment(&k.0)),
            key: Some(k.to_hex()),
        },
    };
    let place = claims.ticket().key(rules.opens_at_ms);
    let below = a.watermark(now_ms, rules).below;
    let (points, below) = if claims.infinite_queue {
        shown_to(&a.record.points, below, place)
    } else {
        (&a.record.points[..], below)
    };
    let admitted = place < below;
    let body = RecordBody {
        product_id,
        opens_at_ms: rules.opens_at_ms,
        lottery,
        step_ms: a.record.step_ms,
        points,
        now: Now {
            at_ms: now_ms,
            below,
        },
        ticket: Place {
            buyer_id: claims.b.clone(),
            arrived_at_ms: claims.t,
            tiebreak: claims.h,
            place,
            admitted,
            // Past the record's last point, the watermark now shows it.
            admitted_at_ms: points
                .iter()
                .find(|p| place < p.below)
                .map(|p| p.at_ms)
                .or(admitted.then_some(now_ms)),
        },
    };
    // Numbers, strings and enums of them always serialize.
    serde_json::to_value(body).unwrap_or(serde_json::Value::Null)
}

/// The record's points and watermark now, as shown to a ticket of the
/// infinite queue at `place`: the points that do not pass it, and the
/// watermark now if it does not pass it either, or else the last of those
/// points (the watermark before the first point, nobody admitted, if none).
/// The points' watermarks rise strictly (`AdmissionRecord::note`), so those that do
/// not pass the place are the first ones.
fn shown_to(points: &[Point], below: QueueKey, place: QueueKey) -> (&[Point], QueueKey) {
    if below <= place {
        return (points, below);
    }
    let kept = &points[..points.partition_point(|p| p.below <= place)];
    (kept, kept.last().map_or(QueueKey::MIN, |p| p.below))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_core::{Admission, Arrivals, LotteryKey, Rules, Ticket, Uptake};

    const OPEN: u64 = 1_000_000;

    /// A room of 50 tickets arriving over the first 0.5 s after the
    /// opening, 10 admitted a second, its record noted at 1, 2 and 3 s.
    fn room() -> RoomSnapshot {
        let rules = Rules {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
        };
        let mut a = Admission::default();
        a.lottery.key = Some(LotteryKey([3; 32]));
        a.checkpoint(OPEN - 10_000, rules, true);
        let mut arrivals = Arrivals::default();
        for i in 0..50 {
            arrivals.add(
                &Ticket {
                    arrived_ms: OPEN + i * 10,
                    tiebreak: 0,
                    infinite_queue: false,
                },
                rules.opens_at_ms,
            );
        }
        a.record(OPEN, rules, &arrivals);
        for at in [OPEN + 1_000, OPEN + 2_000, OPEN + 3_000] {
            let w = a.watermark(at, rules).below;
            a.record.note(at, w);
        }
        RoomSnapshot {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
            prequeue_ms: 60_000,
            ticket_ttl_ms: 3_600_000,
            admission: a,
            uptake: Uptake::default(),
            pow: None,
        }
    }

    fn claims(arrived_ms: u64, infinite_queue: bool) -> TicketClaims {
        TicketClaims {
            p: "p1".into(),
            b: "alice".into(),
            t: arrived_ms,
            h: 0,
            e: OPEN + 3_600_000,
            infinite_queue,
        }
    }

    /// A ticket's place and the watermark `below`, as the record's JSON
    /// writes them, compared in the queue's order.
    fn key(v: &serde_json::Value) -> QueueKey {
        serde_json::from_value(v.clone()).unwrap()
    }

    #[test]
    fn the_key_shows_only_from_the_opening_and_the_place_is_the_tickets() {
        let q = room();
        let claims = claims(OPEN + 350, false);
        let before = body("p1", &q, &claims, OPEN - 1);
        let c = commitment(&[3; 32]);
        assert_eq!(before["lottery"]["commitment"], c.as_str());
        assert!(before["lottery"]["key"].is_null(), "{before}");
        let after = body("p1", &q, &claims, OPEN + 3_500);
        assert_eq!(after["lottery"]["key"], "03".repeat(32));
        assert_eq!(after["points"].as_array().unwrap().len(), 3);
        assert_eq!(after["ticket"]["place"]["kind"], "regular");
        assert_eq!(after["ticket"]["admitted"], true);
        // A ticket 35% into its second, of 50: the 18th, admitted between
        // 1 s (10 in) and 2 s (20 in).
        assert_eq!(after["ticket"]["admitted_at_ms"], OPEN + 2_000);
    }

    /// The record a ticket of the infinite queue gets agrees with its poll
    /// (never admitted): the watermark it shows never passes its place,
    /// while an honest ticket at the same place is shown it admitted.
    #[test]
    fn the_infinite_queue_is_never_shown_the_watermark_past_its_place() {
        let q = room();
        let at = OPEN + 3_500;
        let honest = body("p1", &q, &claims(OPEN + 350, false), at);
        let infinite_queue = body("p1", &q, &claims(OPEN + 350, true), at);
        assert_eq!(honest["ticket"]["admitted"], true);
        assert_eq!(
            infinite_queue["ticket"]["admitted"], false,
            "{infinite_queue}"
        );
        assert!(
            infinite_queue["ticket"]["admitted_at_ms"].is_null(),
            "{infinite_queue}"
        );
        let place = key(&infinite_queue["ticket"]["place"]);
        assert_eq!(place, key(&honest["ticket"]["place"]));
        let points = infinite_queue["points"].as_array().unwrap();
        // The first point (10 in) is before it; the later ones passed it.
        assert_eq!(points[..], honest["points"].as_array().unwrap()[..1]);
        assert!(points.iter().all(|p| key(&p["below"]) <= place));
        assert_eq!(infinite_queue["now"]["below"], points[0]["below"]);
        assert_eq!(infinite_queue["now"]["at_ms"], at);
        // The same members as any record.
        let members = |v: &serde_json::Value| {
            let mut k: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(members(&infinite_queue), members(&honest));
        assert_eq!(
            members(&infinite_queue["ticket"]),
            members(&honest["ticket"])
        );
        // Passed before the record's first point: no point, nobody in.
        let first = body("p1", &q, &claims(OPEN, true), at);
        assert_eq!(first["points"].as_array().unwrap().len(), 0);
        assert_eq!(key(&first["now"]["below"]), QueueKey::MIN);
        assert_eq!(first["ticket"]["admitted"], false);
        // Until the watermark reaches it, it sees what anyone sees.
        let back = OPEN + 4_900;
        assert_eq!(
            body("p1", &q, &claims(back, true), at),
            body("p1", &q, &claims(back, false), at)
        );
    }
}
