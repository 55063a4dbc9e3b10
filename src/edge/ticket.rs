//! Waiting-room tickets, issued and verified at the edge with no round trip
//! to the product's object.
//!
//! A ticket says: this buyer arrived in this product's waiting room at this
//! instant, with this tiebreak, and may use the ticket until it expires. It
//! is signed with HMAC-SHA256 under a key derived from `ID_SECRET` (so one
//! secret fewer to configure; the derivation separates the two uses), and
//! written `v1.{claims}.{mac}`, both parts base64url. The tiebreak is a
//! hash of the sale's lottery key, the product and the buyer
//! (`flashgate_wire::lottery`): it orders the pre-queue's lottery, a buyer
//! cannot re-roll it by joining again, and anyone can recompute it once the
//! key is published. `ID_SECRET` signs tickets and has no part in it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use flashgate_core::Ticket;
use flashgate_wire::lottery::tiebreak;
use serde::{Deserialize, Serialize};

use crate::http::problem::Problem;
pub use crate::ids::TicketKey;
use crate::limits::TICKET_BYTES_MAX;

/// The request header a ticket travels in.
pub const TICKET_HEADER: &str = "flashgate-ticket";

const VERSION: &str = "v1";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketClaims {
    /// The product.
    pub p: String,
    /// The buyer.
    pub b: String,
    /// Arrived at, epoch ms.
    pub t: u64,
    /// The tiebreak.
    pub h: u32,
    /// Expires at, epoch ms.
    pub e: u64,
    /// Signed with the infinite queue's key: never admitted. Not written
    /// in the claims, so that nothing in the ticket tells it apart.
    #[serde(skip)]
    pub infinite_queue: bool,
}

impl TicketClaims {
    pub fn ticket(&self) -> Ticket {
        Ticket {
            arrived_ms: self.t,
            tiebreak: self.h,
            infinite_queue: self.infinite_queue,
        }
    }
}

/// Why a ticket was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketError {
    Malformed,
    Signature,
    OtherProduct,
    OtherBuyer,
    Expired,
}

impl TicketError {
    pub fn describe(self) -> &'static str {
        match self {
            TicketError::Malformed => "the waiting-room ticket is not one this gate issues",
            TicketError::Signature => "the waiting-room ticket's signature does not match",
            TicketError::OtherProduct => "the waiting-room ticket is for another product",
            TicketError::OtherBuyer => "the waiting-room ticket is another buyer's",
            TicketError::Expired => "the waiting-room ticket has expired; join again",
        }
    }

    pub fn problem(self) -> Problem {
        Problem::ticket_invalid(self.describe())
    }
}

impl TicketKey {
    /// A ticket for `buyer_id`, arriving now, valid for `ttl_ms`, its
    /// tiebreak drawn by the sale's `lottery_key`; `infinite_queue`: one of the
    /// infinite queue, signed with its own key, the same in every other
    /// respect.
    pub fn issue(
        &self,
        product_id: &str,
        buyer_id: &str,
        lottery_key: &[u8; 32],
        now_ms: u64,
        ttl_ms: u64,
        infinite_queue: bool,
    ) -> (String, TicketClaims) {
        let claims = TicketClaims {
            p: product_id.into(),
            b: buyer_id.into(),
            t: now_ms,
            h: tiebreak(lottery_key, product_id, buyer_id),
            e: now_ms.saturating_add(ttl_ms),
            infinite_queue,
        };
        // A struct of strings and numbers always serializes.
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let mac = self.tag(infinite_queue, &[VERSION.as_bytes(), body.as_bytes()]);
        let text = format!("{VERSION}.{body}.{}", URL_SAFE_NO_PAD.encode(mac));
        (text, claims)
    }

    /// The ticket's claims, if it is this gate's, for this product and
    /// buyer, and not expired.
    pub fn verify(
        &self,
        text: &str,
        product_id: &str,
        buyer_id: &str,
        now_ms: u64,
    ) -> Result<TicketClaims, TicketError> {
        if text.len() > TICKET_BYTES_MAX {
            return Err(TicketError::Malformed);
        }
        let mut parts = text.trim().split('.');
        let (Some(version), Some(body), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TicketError::Malformed);
        };
        if version != VERSION {
            return Err(TicketError::Malformed);
        }
        let given = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| TicketError::Malformed)?;
        let signed = [VERSION.as_bytes(), body.as_bytes()];
        let infinite_queue = if self.verify_tag(false, &signed, &given) {
            false
        } else if self.verify_tag(true, &signed, &given) {
            true
        } else {
            return Err(TicketError::Signature);
        };
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TicketError::Malformed)?;
        let mut claims: TicketClaims =
            serde_json::from_slice(&json).map_err(|_| TicketError::Malformed)?;
        claims.infinite_queue = infinite_queue;
        if claims.p != product_id {
            return Err(TicketError::OtherProduct);
        }
        if claims.b != buyer_id {
            return Err(TicketError::OtherBuyer);
        }
        if claims.e <= now_ms {
            return Err(TicketError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const LOTTERY: [u8; 32] = [9; 32];

    #[test]
    fn a_ticket_verifies_for_its_buyer_and_product_only() {
        let k = TicketKey::new(SECRET);
        let (text, claims) = k.issue("p1", "alice", &LOTTERY, 1_000, 60_000, false);
        assert_eq!(k.verify(&text, "p1", "alice", 2_000), Ok(claims.clone()));
        assert_eq!(
            k.verify(&text, "p2", "alice", 2_000),
            Err(TicketError::OtherProduct)
        );
        assert_eq!(
            k.verify(&text, "p1", "bob", 2_000),
            Err(TicketError::OtherBuyer)
        );
        assert_eq!(
            k.verify(&text, "p1", "alice", 61_000),
            Err(TicketError::Expired)
        );
        // Another gate's key, a tampered body, and junk.
        let other = TicketKey::new(b"another-secret-of-thirty-two-byte");
        assert_eq!(
            other.verify(&text, "p1", "alice", 2_000),
            Err(TicketError::Signature)
        );
        let (_, body_b) = {
            let forged = TicketClaims {
                t: 0,
                ..claims.clone()
            };
            let b = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
            (forged, b)
        };
        let mut parts: Vec<&str> = text.split('.').collect();
        parts[1] = &body_b;
        assert_eq!(
            k.verify(&parts.join("."), "p1", "alice", 2_000),
            Err(TicketError::Signature)
        );
        for junk in ["", "v1", "v1.a.b", "v2.a.b", "v1.a.b.c", &"x".repeat(600)] {
            assert!(k.verify(junk, "p1", "alice", 2_000).is_err(), "{junk}");
        }
    }

    #[test]
    fn an_infinite_queue_ticket_looks_like_any_other_and_is_never_admitted() {
        let k = TicketKey::new(SECRET);
        let (real, real_claims) = k.issue("p1", "alice", &LOTTERY, 1_000, 60_000, false);
        let (infinite_queue, infinite_queue_claims) =
            k.issue("p1", "alice", &LOTTERY, 1_000, 60_000, true);
        // The same claims, the same form; only the key differs.
        assert_eq!(real.split('.').nth(1), infinite_queue.split('.').nth(1));
        assert_eq!(real.len(), infinite_queue.len());
        assert_ne!(real, infinite_queue);
        let verified = k.verify(&infinite_queue, "p1", "alice", 2_000).unwrap();
        assert!(verified.infinite_queue && verified.ticket().infinite_queue);
        assert_eq!(verified, infinite_queue_claims);
        assert!(
            !k.verify(&real, "p1", "alice", 2_000)
                .unwrap()
                .ticket()
                .infinite_queue
        );
        assert!(!real_claims.infinite_queue);
        // Another gate's key verifies neither.
        let other = TicketKey::new(b"another-secret-of-thirty-two-byte");
        assert_eq!(
            other.verify(&infinite_queue, "p1", "alice", 2_000),
            Err(TicketError::Signature)
        );
    }

    #[test]
    fn the_tiebreak_is_the_buyers_own_and_cannot_be_rerolled() {
        let k = TicketKey::new(SECRET);
        let (_, a1) = k.issue("p1", "alice", &LOTTERY, 1_000, 60_000, false);
        let (_, a2) = k.issue("p1", "alice", &LOTTERY, 5_000, 60_000, false);
        let (_, b) = k.issue("p1", "bob", &LOTTERY, 1_000, 60_000, false);
        assert_eq!(a1.h, a2.h);
        assert_ne!(a1.h, b.h);
        assert_eq!(
            a1.h,
            tiebreak(&LOTTERY, "p1", "alice"),
            "anyone can recompute it"
        );
        // Not the gate's secret: another gate's key gives the same draw,
        // and another sale's lottery key another one.
        let other = TicketKey::new(b"another-secret-of-thirty-two-byte");
        assert_eq!(
            other
                .issue("p1", "alice", &LOTTERY, 1_000, 60_000, false)
                .1
                .h,
            a1.h
        );
        assert_ne!(
            k.issue("p1", "alice", &[1; 32], 1_000, 60_000, false).1.h,
            a1.h
        );
    }
}
