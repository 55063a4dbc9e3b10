//! `--audit`: the waiting room checked from outside, from nothing but what
//! the gate published and what the load's own buyers saw. No secret of the
//! gate enters it; the order of places and the record's bounds are written
//! here again, independently of the gate's code.
//!
//! From the commitment read before the run, the key read after it, the
//! admission record and each ticket's observations, it checks:
//! - the commitment is `SHA-256(key)`;
//! - every ticket's tiebreak is the one the key gives, so the pre-queue's
//!   order is the key's;
//! - the record is in time order and its watermark never moves back;
//! - no ticket was admitted before the record's watermark passed it, and
//!   none was told to wait after the record says it was admitted;
//! - no ticket was admitted while one ahead of it was still told to wait.
//!
//! "Told to wait" may come from an edge's snapshot, which can be up to
//! `STALE_MS` behind the object, so those observations are given that
//! much slack; an admission is taken only from a reserve the object
//! granted, which is exact.

use std::cmp::Ordering;

use flashgate_wire::lottery;
use serde::{Deserialize, Serialize};

/// How far behind the object an edge's answer may be: its snapshot's
/// longest use while a refresh is slow (the Worker's
/// `SNAPSHOT_STALE_MAX_MS`, 10 s), plus a second for the refresh itself.
pub const STALE_MS: u64 = 11_000;

/// A ticket's place in the room's order (the gate's `QueueKey`, as its
/// record route writes it): every pre-queue place first, by tiebreak then
/// arrival; then the rest by arrival, then tiebreak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Place {
    Prequeue { tiebreak: u32, arrived_ms: u64 },
    Regular { arrived_ms: u64, tiebreak: u32 },
}

impl Place {
    fn rank(&self) -> (u8, u64, u64) {
        match *self {
            Place::Prequeue {
                tiebreak,
                arrived_ms,
            } => (0, u64::from(tiebreak), arrived_ms),
            Place::Regular {
                arrived_ms,
                tiebreak,
            } => (1, arrived_ms, u64::from(tiebreak)),
        }
    }

    /// A ticket's place, from its claims and the sale's opening.
    pub fn of(arrived_ms: u64, tiebreak: u32, opens_at_ms: Option<u64>) -> Place {
        if opens_at_ms.is_some_and(|o| arrived_ms < o) {
            Place::Prequeue {
                tiebreak,
                arrived_ms,
            }
        } else {
            Place::Regular {
                arrived_ms,
                tiebreak,
            }
        }
    }
}

impl Ord for Place {
    fn cmp(&self, other: &Place) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Place {
    fn partial_cmp(&self, other: &Place) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A point of the record: from `at_ms`, everyone below `below` was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct Point {
    pub at_ms: u64,
    pub below: Place,
}

/// The record as `GET /api/products/{id}/queue/record` answers it.
#[derive(Clone, Debug, Deserialize)]
pub struct AdmissionRecord {
    pub opens_at_ms: Option<u64>,
    pub points: Vec<Point>,
    pub now: Point,
}

/// A ticket's claims, as its holder reads them (the ticket's middle part).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Claims {
    pub p: String,
    pub b: String,
    pub t: u64,
    pub h: u32,
}

impl Claims {
    /// The claims of ticket text `v1.{claims}.{mac}`.
    pub fn read(ticket: &str) -> Option<Claims> {
        use base64::Engine;
        let body = ticket.split('.').nth(1)?;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

/// What one buyer saw of its ticket, in epoch ms.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub claims: Option<Claims>,
    /// A reserve with the ticket was granted, answered at this instant.
    pub admitted_by_ms: Option<u64>,
    /// Requests sent at these instants were told to wait (a poll that said
    /// not admitted, a reserve refused `not_admitted`).
    pub waiting_at_ms: Vec<u64>,
}

/// Everything the audit judges.
#[derive(Clone, Debug)]
pub struct Sale {
    pub product: String,
    /// As the product read said before the run.
    pub commitment: Option<String>,
    /// As the product read said after it.
    pub key: Option<String>,
    pub record: AdmissionRecord,
    pub tickets: Vec<Seen>,
}

/// One thing the audit found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    pub tickets: u64,
    pub points: u64,
    pub violations: Vec<Violation>,
}

impl AuditReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The record's lower bound of the watermark at `at_ms`.
fn at_least(r: &AdmissionRecord, at_ms: u64) -> Option<Place> {
    r.points
        .iter()
        .rev()
        .find(|p| p.at_ms <= at_ms)
        .map(|p| p.below)
}

/// The record's upper bound of the watermark at `at_ms`.
fn at_most(r: &AdmissionRecord, at_ms: u64) -> Place {
    r.points
        .iter()
        .find(|p| p.at_ms >= at_ms)
        .map_or(r.now.below, |p| p.below)
}

pub fn audit(sale: &Sale) -> AuditReport {
    let mut v = Vec::new();
    let mut bad = |check: &'static str, detail: String| v.push(Violation { check, detail });
    let key = sale.key.as_deref().and_then(lottery::parse_key);
    match (&sale.commitment, &key) {
        (Some(c), Some(k)) if lottery::commitment(k) == *c => {}
        (c, _) => bad(
            "commitment",
            format!(
                "the key {:?} does not hash to the commitment {c:?}",
                sale.key
            ),
        ),
    }
    let r = &sale.record;
    let mut all = r.points.clone();
    all.push(r.now);
    for (i, w) in all.windows(2).enumerate() {
        if w[1].at_ms < w[0].at_ms || (i + 1 < r.points.len() && w[1].at_ms == w[0].at_ms) {
            bad(
                "record_order",
                format!("point {} is earlier than the one before", i + 1),
            );
        }
        if w[1].below < w[0].below {
            bad(
                "record_order",
                format!("the watermark moved back at point {}", i + 1),
            );
        }
    }
    let mut placed = Vec::new();
    for s in &sale.tickets {
        let Some(c) = &s.claims else { continue };
        if c.p != sale.product {
            bad("ticket", format!("{}'s ticket names product {}", c.b, c.p));
            continue;
        }
        if let Some(k) = &key {
            let want = lottery::tiebreak(k, &c.p, &c.b);
            if c.h != want {
                bad(
                    "tiebreak",
                    format!("{}'s tiebreak is {} and the key gives {want}", c.b, c.h),
                );
            }
        }
        let place = Place::of(c.t, c.h, r.opens_at_ms);
        if let Some(at) = s.admitted_by_ms {
            if place >= at_most(r, at) {
                bad(
                    "admitted_out_of_turn",
                    format!(
                        "{} was granted a reserve by {at} before the record's watermark passed it",
                        c.b
                    ),
                );
            }
        }
        for &at in &s.waiting_at_ms {
            if at_least(r, at.saturating_sub(STALE_MS)).is_some_and(|w| place < w) {
                bad(
                    "told_to_wait_after_admission",
                    format!(
                        "{} was told to wait at {at}, after the record admitted it",
                        c.b
                    ),
                );
            }
        }
        placed.push((place, c.b.as_str(), s));
    }
    placed.sort_by_key(|a| a.0);
    // A ticket behind admitted by `t` while one ahead of it was told to wait
    // after `t` (with the slack an edge's answer may need).
    let mut latest_wait_ahead: Option<(u64, &str)> = None;
    for &(_, buyer, s) in &placed {
        if let (Some(at), Some((wait, ahead))) = (s.admitted_by_ms, latest_wait_ahead) {
            if wait > at.saturating_add(STALE_MS) {
                bad(
                    "admitted_before_one_ahead",
                    format!("{buyer} was admitted by {at} while {ahead}, ahead of it, was told to wait at {wait}"),
                );
            }
        }
        if let Some(&w) = s.waiting_at_ms.iter().max() {
            if latest_wait_ahead.is_none_or(|(l, _)| w > l) {
                latest_wait_ahead = Some((w, buyer));
            }
        }
    }
    AuditReport {
        tickets: placed.len() as u64,
        points: r.points.len() as u64,
        violations: v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u64 = 1_800_000_000_000;
    const KEY: [u8; 32] = [5; 32];

    /// An honest sale: 30 pre-queue tickets by the key's tiebreaks,
    /// admitted 10 a second from the opening, a point a second; each buyer
    /// polled (told to wait) until its turn, then reserved.
    fn honest() -> Sale {
        let mut tickets: Vec<(Place, Seen)> = (0..30)
            .map(|i| {
                let b = format!("b{i}");
                let h = lottery::tiebreak(&KEY, "p", &b);
                let c = Claims {
                    p: "p".into(),
                    b,
                    t: OPEN - 5_000 + i,
                    h,
                };
                (
                    Place::of(c.t, c.h, Some(OPEN)),
                    Seen {
                        claims: Some(c),
                        ..Seen::default()
                    },
                )
            })
            .collect();
        tickets.sort_by_key(|a| a.0);
        let mut points = Vec::new();
        for second in 1..=3u64 {
            let at = OPEN + second * 1_000;
            // The watermark: just past the (10 × second)th ticket.
            let last_in = (10 * second as usize).min(tickets.len()) - 1;
            let below = match tickets[last_in].0 {
                Place::Prequeue {
                    tiebreak,
                    arrived_ms,
                } => Place::Prequeue {
                    tiebreak,
                    arrived_ms: arrived_ms + 1,
                },
                p => p,
            };
            points.push(Point { at_ms: at, below });
        }
        for (rank, (_, s)) in tickets.iter_mut().enumerate() {
            let in_at = OPEN + (rank as u64 / 10 + 1) * 1_000;
            s.waiting_at_ms = (0..4)
                .map(|k| OPEN - 2_000 + k * 500)
                .filter(|&t| t + 600 < in_at)
                .collect();
            s.admitted_by_ms = Some(in_at + 50);
        }
        Sale {
            product: "p".into(),
            commitment: Some(lottery::commitment(&KEY)),
            key: Some(hex(&KEY)),
            record: AdmissionRecord {
                opens_at_ms: Some(OPEN),
                now: Point {
                    at_ms: OPEN + 9_000,
                    below: Place::Regular {
                        arrived_ms: OPEN,
                        tiebreak: 0,
                    },
                },
                points,
            },
            tickets: tickets.into_iter().map(|(_, s)| s).collect(),
        }
    }

    fn hex(k: &[u8; 32]) -> String {
        k.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn checks(sale: &Sale) -> Vec<&'static str> {
        let mut c: Vec<_> = audit(sale).violations.iter().map(|v| v.check).collect();
        c.dedup();
        c
    }

    #[test]
    fn an_honest_sale_passes() {
        let r = audit(&honest());
        assert!(r.passed(), "{:?}", r.violations);
        assert_eq!((r.tickets, r.points), (30, 3));
    }

    #[test]
    fn a_tampered_key_fails() {
        let mut sale = honest();
        sale.key = Some(hex(&[6; 32]));
        let c = checks(&sale);
        assert!(c.contains(&"commitment"), "{c:?}");
        assert!(c.contains(&"tiebreak"), "{c:?}");
        // A commitment that was never published fails too.
        let mut sale = honest();
        sale.commitment = None;
        assert_eq!(checks(&sale), ["commitment"]);
    }

    #[test]
    fn a_record_reordered_by_one_step_fails() {
        let mut sale = honest();
        sale.record.points.swap(0, 1);
        assert!(
            checks(&sale).contains(&"record_order"),
            "{:?}",
            checks(&sale)
        );
        // The same watermarks with their times swapped back: it moved back.
        let mut sale = honest();
        let (a, b) = (sale.record.points[1].below, sale.record.points[2].below);
        sale.record.points[1].below = b;
        sale.record.points[2].below = a;
        assert!(
            checks(&sale).contains(&"record_order"),
            "{:?}",
            checks(&sale)
        );
    }

    #[test]
    fn a_ticket_admitted_out_of_turn_fails() {
        // The last ticket in the order is granted a reserve at the opening,
        // before the record's watermark passed it.
        let mut sale = honest();
        let last = sale.tickets.last_mut().unwrap();
        last.admitted_by_ms = Some(OPEN + 100);
        last.waiting_at_ms.clear();
        let c = checks(&sale);
        assert!(c.contains(&"admitted_out_of_turn"), "{c:?}");
        // And the first, ahead of everyone, told to wait long after others
        // were in: admitted before one ahead (however the record reads).
        let mut sale = honest();
        sale.tickets[0]
            .waiting_at_ms
            .push(OPEN + 3_000 + STALE_MS + 1_000);
        let c = checks(&sale);
        assert!(c.contains(&"admitted_before_one_ahead"), "{c:?}");
        assert!(c.contains(&"told_to_wait_after_admission"), "{c:?}");
    }

    #[test]
    fn places_order_as_the_gate_orders_them() {
        let pre = |h, t| Place::Prequeue {
            tiebreak: h,
            arrived_ms: t,
        };
        let reg = |t, h| Place::Regular {
            arrived_ms: t,
            tiebreak: h,
        };
        assert!(pre(u32::MAX, u64::MAX) < reg(0, 0));
        assert!(pre(1, 9) < pre(2, 0));
        assert!(reg(1, 9) < reg(2, 0));
        assert_eq!(Place::of(5, 1, Some(6)), pre(1, 5));
        assert_eq!(Place::of(6, 1, Some(6)), reg(6, 1));
        let json = r#"{"kind":"prequeue","tiebreak":7,"arrived_ms":3}"#;
        assert_eq!(serde_json::from_str::<Place>(json).unwrap(), pre(7, 3));
    }
}
