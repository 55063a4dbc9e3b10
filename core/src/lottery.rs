//! What makes the waiting room checkable from outside: the sale's lottery
//! key, and the record of the watermark over time.
//!
//! - The lottery key is 32 random bytes the object draws when the room is
//!   set up (the shell brings the randomness: the core has none). The
//!   product read publishes its SHA-256 before the pre-queue opens and the
//!   key itself once the sale opens ([`Lottery::published`]); a ticket's
//!   tiebreak is a hash of the key, the product and the buyer
//!   (`flashgate_wire::lottery`), so anyone holding the key can recompute
//!   the pre-queue's order, and nobody, the gate included, could choose it
//!   once the commitment was out.
//! - The record ([`AdmissionRecord`]) is the watermark's position over time: a point
//!   whenever it moved, at most one per `step_ms`, at most
//!   `limits::RECORD_POINTS_MAX` points. When it is full every other point
//!   is dropped and the step doubles, so it stays small and still bounds
//!   the watermark at every instant: the watermark never moves back, so
//!   between two points it lies between them. A buyer who holds a ticket
//!   can then check that nobody behind them was admitted before them.
//!
//! Hashing lives outside the core (the core depends on nothing that
//! hashes); this module keeps the bytes and decides what is public when.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::admission::QueueKey;
use crate::config::limits;

/// A sale's lottery key: 32 random bytes, written as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LotteryKey(pub [u8; 32]);

impl std::fmt::Debug for LotteryKey {
    // Printed as its hex, like its JSON; it is secret until the opening, so
    // it only appears in debug output of tests and the stored row.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LotteryKey({})", self.to_hex())
    }
}

impl LotteryKey {
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(DIGITS[usize::from(b >> 4)] as char);
            s.push(DIGITS[usize::from(b & 15)] as char);
        }
        s
    }

    /// 64 lowercase hex digits, or `None`.
    pub fn from_hex(s: &str) -> Option<LotteryKey> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut key = [0u8; 32];
        for (i, b) in key.iter_mut().enumerate() {
            *b = (digit(s[2 * i])? << 4) | digit(s[2 * i + 1])?;
        }
        Some(LotteryKey(key))
    }
}

impl Serialize for LotteryKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for LotteryKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LotteryKey, D::Error> {
        let s = String::deserialize(d)?;
        LotteryKey::from_hex(&s).ok_or_else(|| serde::de::Error::custom("not a lottery key"))
    }
}

/// What of the key may be told now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// No key yet (the room was just set up; the object draws one in the
    /// same event).
    None,
    /// Before the opening: only its commitment, `SHA-256(key)`.
    Commitment(LotteryKey),
    /// From the opening on: the key itself.
    Key(LotteryKey),
}

/// The sale's lottery: its key, if drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lottery {
    pub key: Option<LotteryKey>,
}

impl Lottery {
    /// What may be told at `now_ms` of a sale that opens at `opens_at_ms`
    /// (`None`: open from the start, so the key is public at once; there is
    /// no pre-queue to order).
    pub fn published(&self, now_ms: u64, opens_at_ms: Option<u64>) -> Published {
        match self.key {
            None => Published::None,
            Some(k) if opens_at_ms.is_some_and(|o| now_ms < o) => Published::Commitment(k),
            Some(k) => Published::Key(k),
        }
    }
}

/// One point of the record: from `at_ms` on (until the next point), the
/// watermark was at least `below`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub at_ms: u64,
    pub below: QueueKey,
}

/// The watermark over time, coarse and bounded: at most
/// `limits::RECORD_POINTS_MAX` points, one per `step_ms` at most.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionRecord {
    pub step_ms: u64,
    pub points: Vec<Point>,
}

impl Default for AdmissionRecord {
    fn default() -> AdmissionRecord {
        AdmissionRecord {
            step_ms: limits::RECORD_STEP_MS,
            points: Vec::new(),
        }
    }
}

/// Why a record cannot be the one a gate kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionRecordFault {
    /// Past its bound, or a step that is not the base step doubled.
    Shape,
    /// A point's time does not come after the one before it.
    TimeOrder { index: usize },
    /// A point's watermark is below the one before it: someone admitted
    /// would have been turned back, or the record was reordered.
    WentBack { index: usize },
}

impl AdmissionRecord {
    /// Notes the watermark at `now_ms`. Returns whether the record changed
    /// (so that it is stored).
    ///
    /// A watermark that rose within the millisecond of the last point
    /// raises that point: a checkpoint can move the watermark at once
    /// (`Admission::checkpoint_after_lag`), and the point is the bound a
    /// reader takes for that millisecond (`at_most`).
    pub fn note(&mut self, now_ms: u64, below: QueueKey) -> bool {
        if let Some(last) = self.points.last_mut() {
            if last.at_ms == now_ms && below > last.below {
                last.below = below;
                return true;
            }
            if below <= last.below || now_ms < last.at_ms.saturating_add(self.step_ms) {
                return false;
            }
        } else if below == QueueKey::MIN {
            return false;
        }
        if self.points.len() >= limits::RECORD_POINTS_MAX {
            // Keep every other point, the first included: each kept point
            // is still a true bound of its time.
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.step_ms = self.step_ms.saturating_mul(2);
        }
        self.points.push(Point {
            at_ms: now_ms,
            below,
        });
        true
    }

    /// Checks what every record the gate keeps satisfies. A record read
    /// from outside is checked with this too (`flashgate-load --audit`).
    pub fn check(&self) -> Result<(), AdmissionRecordFault> {
        let doubled = self.step_ms >= limits::RECORD_STEP_MS
            && (self.step_ms / limits::RECORD_STEP_MS).is_power_of_two()
            && self.step_ms.is_multiple_of(limits::RECORD_STEP_MS);
        if self.points.len() > limits::RECORD_POINTS_MAX || !doubled {
            return Err(AdmissionRecordFault::Shape);
        }
        for (index, w) in self.points.windows(2).enumerate() {
            if w[1].at_ms <= w[0].at_ms {
                return Err(AdmissionRecordFault::TimeOrder { index: index + 1 });
            }
            if w[1].below < w[0].below {
                return Err(AdmissionRecordFault::WentBack { index: index + 1 });
            }
        }
        Ok(())
    }

    /// The watermark was at least this at `at_ms`: the last point at or
    /// before it (`QueueKey::MIN` before the first).
    pub fn at_least(&self, at_ms: u64) -> QueueKey {
        let i = self.points.partition_point(|p| p.at_ms <= at_ms);
        i.checked_sub(1)
            .map_or(QueueKey::MIN, |i| self.points[i].below)
    }

    /// The watermark was at most this at `at_ms`: the first point at or
    /// after it, or `now` (the watermark when the record was read) past the
    /// last.
    pub fn at_most(&self, at_ms: u64, now: QueueKey) -> QueueKey {
        let i = self.points.partition_point(|p| p.at_ms < at_ms);
        self.points.get(i).map_or(now, |p| p.below)
    }

    /// When the record first shows `key` admitted: the first point whose
    /// watermark is above it. `None` if none is yet.
    pub fn admitted_at(&self, key: QueueKey) -> Option<u64> {
        self.points.iter().find(|p| key < p.below).map(|p| p.at_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> QueueKey {
        QueueKey::Regular {
            arrived_ms: n,
            tiebreak: 0,
        }
    }

    #[test]
    fn a_key_round_trips_as_hex_and_junk_is_refused() {
        let k = LotteryKey([0xab; 32]);
        assert_eq!(LotteryKey::from_hex(&k.to_hex()), Some(k));
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, format!("\"{}\"", "ab".repeat(32)));
        for junk in [
            "",
            "ab",
            &"AB".repeat(32),
            &"zz".repeat(32),
            &"ab".repeat(33),
        ] {
            assert_eq!(LotteryKey::from_hex(junk), None, "{junk}");
        }
        assert!(serde_json::from_str::<LotteryKey>("\"00\"").is_err());
    }

    #[test]
    fn the_key_is_told_only_once_the_sale_opens() {
        let l = Lottery {
            key: Some(LotteryKey([7; 32])),
        };
        assert_eq!(
            l.published(999, Some(1_000)),
            Published::Commitment(l.key.unwrap())
        );
        assert_eq!(
            l.published(1_000, Some(1_000)),
            Published::Key(l.key.unwrap())
        );
        assert_eq!(l.published(0, None), Published::Key(l.key.unwrap()));
        assert_eq!(Lottery::default().published(0, None), Published::None);
    }

    #[test]
    fn the_record_stays_bounded_monotone_and_a_true_bound() {
        let mut r = AdmissionRecord::default();
        assert!(
            !r.note(0, QueueKey::MIN),
            "nobody admitted: nothing to note"
        );
        let mut truth = Vec::new();
        for i in 1..=5_000u64 {
            let at = i * 700;
            let w = key(i * 10);
            truth.push((at, w));
            r.note(at, w);
            assert!(r.points.len() <= limits::RECORD_POINTS_MAX);
            assert_eq!(r.check(), Ok(()));
        }
        assert!(r.step_ms > limits::RECORD_STEP_MS, "it coarsened");
        let now = truth.last().unwrap().1;
        for &(at, w) in truth.iter().step_by(37) {
            assert!(r.at_least(at) <= w, "{at}");
            assert!(w <= r.at_most(at, now), "{at}");
        }
        // A point held within a step, or one that does not move, is not kept.
        let mut r = AdmissionRecord::default();
        assert!(r.note(1_000, key(5)));
        assert!(!r.note(1_001, key(6)));
        assert!(!r.note(9_000, key(5)));
        assert!(r.note(9_000, key(6)));
        assert_eq!(r.admitted_at(key(5)), Some(9_000));
        assert_eq!(r.admitted_at(key(4)), Some(1_000));
        assert_eq!(r.admitted_at(key(6)), None);
        // A watermark that rises within the last point's millisecond (a
        // checkpoint's jump) raises that point: its bound stays true.
        assert!(r.note(9_000, key(8)));
        assert_eq!(r.points.len(), 2);
        assert_eq!(r.at_most(9_000, key(8)), key(8));
        assert!(!r.note(9_000, key(7)), "never lowered");
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_reordered_or_misshapen_record_fails_its_check() {
        let mut r = AdmissionRecord::default();
        for i in 1..10 {
            r.note(i * 2_000, key(i));
        }
        assert_eq!(r.check(), Ok(()));
        let mut swapped = r.clone();
        swapped.points.swap(3, 4);
        assert!(swapped.check().is_err());
        let mut back = r.clone();
        back.points[5].below = key(1);
        assert_eq!(
            back.check(),
            Err(AdmissionRecordFault::WentBack { index: 5 })
        );
        let mut odd = r.clone();
        odd.step_ms = limits::RECORD_STEP_MS * 3;
        assert_eq!(odd.check(), Err(AdmissionRecordFault::Shape));
    }
}
