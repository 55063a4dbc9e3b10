//! Forwarding the outbox to the origin, as pure decisions: the batch an
//! outbox lease becomes, and what an attempt's answer means. The object's
//! shell only signs, sends and waits (`wasm/object/product.rs`).

use flashgate_core::{OutboxEntry, OutboxEvent};
use flashgate_wire::bounds::order_id;
use flashgate_wire::{Batch, BatchResult, Event};

use crate::ids::IdCodec;
use crate::limits::ORIGIN_TIMEOUT_MS;

/// The origin batch for leased outbox entries of `product_id`. Orders are
/// named by the reservation id buyers see.
pub fn batch(product_id: &str, ids: &IdCodec, entries: &[OutboxEntry]) -> Batch {
    let events = entries
        .iter()
        .map(|e| match &e.event {
            OutboxEvent::Stock { stock_total, at_ms } => Event::Stock {
                seq: e.seq,
                stock_total: *stock_total,
                at_ms: *at_ms,
            },
            OutboxEvent::Order {
                reservation_id,
                buyer,
                quantity,
                payment_ref,
                confirmed_at_ms,
            } => Event::Order {
                seq: e.seq,
                reservation_id: order_id(product_id, &ids.encode(*reservation_id)),
                buyer_id: buyer.to_string(),
                quantity: *quantity,
                payment_ref: payment_ref.to_string(),
                confirmed_at_ms: *confirmed_at_ms,
            },
            OutboxEvent::Void {
                reservation_id,
                quantity,
                voided_at_ms,
            } => Event::Void {
                seq: e.seq,
                reservation_id: order_id(product_id, &ids.encode(*reservation_id)),
                quantity: *quantity,
                voided_at_ms: *voided_at_ms,
            },
        })
        .collect();
    Batch {
        product_id: product_id.to_string(),
        events,
    }
}

/// What one attempt to post a batch came to, as the shell saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The shell has no origin URL or no signing secret.
    NotConfigured,
    /// The batch could not be encoded or the request not built.
    Encode(String),
    /// The request failed before an answer: refused, reset, DNS.
    Network(String),
    /// No answer within `ORIGIN_TIMEOUT_MS`.
    Timeout,
    /// An answer, with its status and body.
    Answered { status: u16, body: Vec<u8> },
}

/// Why a delivery failed, and whether a retry can help. Every failure is
/// retried with backoff all the same, because dropping a batch would lose
/// orders (I2); the ones that cannot heal by themselves are alerts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryError {
    NotConfigured,
    Encode(String),
    Network(String),
    Timeout,
    Origin5xx(u16),
    Signature,
    Origin4xx(u16),
    /// A 2xx whose body is not the answer to this batch.
    BadAnswer(String),
}

impl DeliveryError {
    /// Whether waiting can heal it. The rest need an operator.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            DeliveryError::Network(_)
                | DeliveryError::Timeout
                | DeliveryError::Origin5xx(_)
                | DeliveryError::BadAnswer(_)
        )
    }

    pub fn describe(&self) -> String {
        match self {
            DeliveryError::NotConfigured => "no ORIGIN_URL is configured".into(),
            DeliveryError::Encode(e) => format!("the batch could not be encoded: {e}"),
            DeliveryError::Network(e) => format!("network: {e}"),
            DeliveryError::Timeout => {
                format!("the origin did not answer within {ORIGIN_TIMEOUT_MS} ms")
            }
            DeliveryError::Origin5xx(s) => format!("the origin failed with {s}"),
            DeliveryError::Signature => {
                "the origin refused the signature (401): check FORWARD_KEYS and clocks".into()
            }
            DeliveryError::Origin4xx(s) => format!("the origin refused the batch with {s}"),
            DeliveryError::BadAnswer(e) => format!("the origin's answer does not fit: {e}"),
        }
    }
}

/// Sorts an attempt into a delivered batch (the origin's per-order answer)
/// or a failure class.
pub fn classify(batch: &Batch, attempt: Attempt) -> Result<BatchResult, DeliveryError> {
    match attempt {
        Attempt::NotConfigured => Err(DeliveryError::NotConfigured),
        Attempt::Encode(e) => Err(DeliveryError::Encode(e)),
        Attempt::Network(e) => Err(DeliveryError::Network(e)),
        Attempt::Timeout => Err(DeliveryError::Timeout),
        Attempt::Answered { status, body } => match status {
            200..=299 => {
                let result: BatchResult = serde_json::from_slice(&body)
                    .map_err(|e| DeliveryError::BadAnswer(e.to_string()))?;
                if result.answers(batch) {
                    Ok(result)
                } else {
                    Err(DeliveryError::BadAnswer(
                        "the results do not name this batch's orders".into(),
                    ))
                }
            }
            401 => Err(DeliveryError::Signature),
            // The origin cut a body that arrived too slowly (`body_timeout`):
            // a slow link, which heals, as a timeout here does.
            408 => Err(DeliveryError::Timeout),
            400..=499 => Err(DeliveryError::Origin4xx(status)),
            _ => Err(DeliveryError::Origin5xx(status)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_wire::{EventResult, EventStatus};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn entries() -> Vec<OutboxEntry> {
        vec![
            OutboxEntry {
                seq: 1,
                event: OutboxEvent::Stock {
                    stock_total: 100,
                    at_ms: 1,
                },
            },
            OutboxEntry {
                seq: 2,
                event: OutboxEvent::Order {
                    reservation_id: 11,
                    buyer: "alice".into(),
                    quantity: 1,
                    payment_ref: "pay".into(),
                    confirmed_at_ms: 5,
                },
            },
            OutboxEntry {
                seq: 3,
                event: OutboxEvent::Void {
                    reservation_id: 11,
                    quantity: 1,
                    voided_at_ms: 6,
                },
            },
        ]
    }

    #[test]
    fn a_batch_carries_every_event_with_its_sequence() {
        let ids = IdCodec::new(SECRET, "p1");
        let b = batch("p1", &ids, &entries());
        assert_eq!(b.validate(), Ok(()));
        let seqs: Vec<u64> = b.events.iter().map(Event::seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        let Event::Order { reservation_id, .. } = &b.events[1] else {
            panic!("an order")
        };
        assert_eq!(*reservation_id, format!("p1:{}", ids.encode(11)));
    }

    #[test]
    fn attempts_sort_into_classes() {
        let ids = IdCodec::new(SECRET, "p1");
        let b = batch("p1", &ids, &entries());
        let answer = |batch: &Batch, status: EventStatus| {
            let r = BatchResult {
                results: batch
                    .events
                    .iter()
                    .map(|e| EventResult {
                        seq: e.seq(),
                        status,
                    })
                    .collect(),
            };
            serde_json::to_vec(&r).unwrap()
        };
        let ok = classify(
            &b,
            Attempt::Answered {
                status: 200,
                body: answer(&b, EventStatus::RejectedOversell),
            },
        )
        .unwrap();
        assert_eq!(ok.refused(), 3);
        let cases = [
            (Attempt::NotConfigured, DeliveryError::NotConfigured, false),
            (
                Attempt::Encode("x".into()),
                DeliveryError::Encode("x".into()),
                false,
            ),
            (
                Attempt::Network("reset".into()),
                DeliveryError::Network("reset".into()),
                true,
            ),
            (Attempt::Timeout, DeliveryError::Timeout, true),
            (
                Attempt::Answered {
                    status: 408,
                    body: vec![],
                },
                DeliveryError::Timeout,
                true,
            ),
            (
                Attempt::Answered {
                    status: 503,
                    body: vec![],
                },
                DeliveryError::Origin5xx(503),
                true,
            ),
            (
                Attempt::Answered {
                    status: 401,
                    body: vec![],
                },
                DeliveryError::Signature,
                false,
            ),
            (
                Attempt::Answered {
                    status: 422,
                    body: vec![],
                },
                DeliveryError::Origin4xx(422),
                false,
            ),
        ];
        for (attempt, want, retryable) in cases {
            let got = classify(&b, attempt).unwrap_err();
            assert_eq!(got, want);
            assert_eq!(got.retryable(), retryable, "{}", got.describe());
        }
        // A 2xx that is not this batch's answer acks nothing.
        let shorter = batch("p1", &ids, &entries()[..2]);
        let wrong = classify(
            &b,
            Attempt::Answered {
                status: 200,
                body: answer(&shorter, EventStatus::Applied),
            },
        );
        assert!(matches!(wrong, Err(DeliveryError::BadAnswer(_))));
        let garbage = classify(
            &b,
            Attempt::Answered {
                status: 200,
                body: b"<html>".to_vec(),
            },
        );
        assert!(matches!(garbage, Err(DeliveryError::BadAnswer(_))));
    }
}
