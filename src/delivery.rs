//! Forwarding the outbox to the origin, as pure decisions: the batch an
//! outbox lease becomes, and what an attempt's answer means. The object's
//! shell only signs, sends and waits (`wasm/gate_do.rs`).

use flashgate_core::OutboxEntry;
use flashgate_wire::bounds::order_id;
use flashgate_wire::{Batch, BatchResult, Order};

/// How long one delivery to the origin may take before it counts as failed.
pub const ORIGIN_TIMEOUT_MS: u64 = 10_000;
/// Batches one alarm sends before yielding; the next alarm continues.
pub const BATCHES_PER_ALARM_MAX: usize = 20;
/// The most orders one batch carries: what the origin accepts.
pub const ORDERS_PER_BATCH_MAX: usize = flashgate_wire::bounds::ORDERS_PER_BATCH_MAX;

/// The origin batch for leased outbox entries of `product_id`.
pub fn batch(product_id: &str, stock_total: u64, entries: &[OutboxEntry]) -> Batch {
    let orders = entries
        .iter()
        .map(|e| Order {
            reservation_id: order_id(product_id, e.reservation_id),
            product_id: product_id.to_string(),
            buyer_id: e.buyer.to_string(),
            quantity: e.quantity,
            payment_ref: e.payment_ref.to_string(),
            confirmed_at_ms: e.confirmed_at_ms,
            stock_total,
        })
        .collect();
    Batch { orders }
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
            DeliveryError::NotConfigured => {
                "no ORIGIN_URL or ORIGIN_HMAC_SECRET is configured".into()
            }
            DeliveryError::Encode(e) => format!("the batch could not be encoded: {e}"),
            DeliveryError::Network(e) => format!("network: {e}"),
            DeliveryError::Timeout => {
                format!("the origin did not answer within {ORIGIN_TIMEOUT_MS} ms")
            }
            DeliveryError::Origin5xx(s) => format!("the origin failed with {s}"),
            DeliveryError::Signature => {
                "the origin refused the signature (401): check ORIGIN_HMAC_SECRET and clocks".into()
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
            400..=499 => Err(DeliveryError::Origin4xx(status)),
            _ => Err(DeliveryError::Origin5xx(status)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_wire::{ItemResult, ItemStatus};

    fn entries() -> Vec<OutboxEntry> {
        (1..=2)
            .map(|i| OutboxEntry {
                seq: i,
                reservation_id: 10 + i,
                buyer: "alice".into(),
                quantity: 1,
                payment_ref: "pay".into(),
                confirmed_at_ms: 5,
            })
            .collect()
    }

    #[test]
    fn a_batch_names_each_order_by_product_and_reservation() {
        let b = batch("p1", 100, &entries());
        assert_eq!(b.validate(), Ok(()));
        let ids: Vec<_> = b.orders.iter().map(|o| o.reservation_id.as_str()).collect();
        assert_eq!(ids, ["p1:11", "p1:12"]);
        assert!(b.orders.iter().all(|o| o.stock_total == 100));
    }

    #[test]
    fn attempts_sort_into_classes() {
        let b = batch("p1", 100, &entries());
        let answer = |status: ItemStatus| {
            let r = BatchResult {
                results: b
                    .orders
                    .iter()
                    .map(|o| ItemResult {
                        reservation_id: o.reservation_id.clone(),
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
                body: answer(ItemStatus::RejectedOversell),
            },
        )
        .unwrap();
        assert_eq!(ok.rejected_oversell(), 2);
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
        let other = batch("p2", 1, &entries());
        let wrong = classify(
            &other,
            Attempt::Answered {
                status: 200,
                body: answer(ItemStatus::Inserted),
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
