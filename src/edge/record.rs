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

use flashgate_core::{Published, QueueKey};
use flashgate_wire::lottery::commitment;
use serde::Serialize;

use crate::edge::ticket::TicketClaims;
use crate::protocol::snapshot::QueueSnapshot;

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
    points: &'a [flashgate_core::Point],
    now: Now,
    ticket: Place,
}

/// The record's answer for the ticket `claims` (verified) at `now_ms`.
pub fn body(
    product_id: &str,
    q: &QueueSnapshot,
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
    let body = RecordBody {
        product_id,
        opens_at_ms: rules.opens_at_ms,
        lottery,
        step_ms: a.record.step_ms,
        points: &a.record.points,
        now: Now {
            at_ms: now_ms,
            below,
        },
        ticket: Place {
            buyer_id: claims.b.clone(),
            arrived_at_ms: claims.t,
            tiebreak: claims.h,
            place,
            admitted: place < below,
            // Past the record's last point, the watermark now shows it.
            admitted_at_ms: a
                .record
                .admitted_at(place)
                .or((place < below).then_some(now_ms)),
        },
    };
    // Numbers, strings and enums of them always serialize.
    serde_json::to_value(body).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_core::{Admission, Arrivals, LotteryKey, Rules, Ticket, Uptake};

    const OPEN: u64 = 1_000_000;

    #[test]
    fn the_key_shows_only_from_the_opening_and_the_place_is_the_tickets() {
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
                    shadow: false,
                },
                rules.opens_at_ms,
            );
        }
        a.record(OPEN, rules, &arrivals);
        for at in [OPEN + 1_000, OPEN + 2_000, OPEN + 3_000] {
            let w = a.watermark(at, rules).below;
            a.record.note(at, w);
        }
        let q = QueueSnapshot {
            admit_per_s: 10,
            opens_at_ms: Some(OPEN),
            prequeue_ms: 60_000,
            ticket_ttl_ms: 3_600_000,
            admission: a,
            uptake: Uptake::default(),
            pow: None,
        };
        let claims = TicketClaims {
            p: "p1".into(),
            b: "alice".into(),
            t: OPEN + 350,
            h: 0,
            e: OPEN + 3_600_000,
            shadow: false,
        };
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
}
