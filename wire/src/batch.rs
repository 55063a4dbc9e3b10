//! The batch of outbox events the gate forwards for one product, and the
//! origin's answer.
//!
//! Every change the origin must mirror travels the outbox in the order the
//! gate made it: confirmed orders, voids (refunds) and stock totals. Each
//! event carries its outbox sequence number, dense and rising per product,
//! so the origin applies stock totals only forward, and answers each event
//! by its sequence.

use serde::{Deserialize, Serialize};

use crate::bounds::{self, ORDERS_PER_BATCH_MAX, STOCK_UNITS_MAX};

/// One change for the origin to mirror.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// The product's stock total is now `stock_total`.
    Stock {
        seq: u64,
        stock_total: u64,
        at_ms: u64,
    },
    /// A reservation was confirmed (paid): an order.
    Order {
        seq: u64,
        /// Globally unique: `bounds::order_id(product_id, reservation id)`.
        reservation_id: String,
        buyer_id: String,
        quantity: u32,
        payment_ref: String,
        confirmed_at_ms: u64,
    },
    /// A confirmed order was voided (refunded); its units are back in stock.
    Void {
        seq: u64,
        reservation_id: String,
        quantity: u32,
        voided_at_ms: u64,
    },
}

impl Event {
    pub fn seq(&self) -> u64 {
        match self {
            Event::Stock { seq, .. } | Event::Order { seq, .. } | Event::Void { seq, .. } => *seq,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub product_id: String,
    pub events: Vec<Event>,
}

/// Which field of which event broke a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventField {
    Seq,
    ReservationId,
    BuyerId,
    Quantity,
    PaymentRef,
    StockTotal,
}

impl EventField {
    fn describe(self) -> String {
        match self {
            EventField::Seq => "seq must be at least 1 and rise through the batch".into(),
            EventField::ReservationId => {
                "reservation_id must be {product_id}:{reservation id} of this batch's product"
                    .into()
            }
            EventField::BuyerId => format!(
                "buyer_id must be 1 to {} bytes of A-Z a-z 0-9 _ - .",
                bounds::BUYER_ID_BYTES_MAX
            ),
            EventField::Quantity => {
                format!("quantity must be 1 to {}", bounds::ORDER_QUANTITY_MAX)
            }
            EventField::PaymentRef => format!(
                "payment_ref must be 1 to {} bytes without control characters",
                bounds::PAYMENT_REF_BYTES_MAX
            ),
            EventField::StockTotal => format!("stock_total must be at most {STOCK_UNITS_MAX}"),
        }
    }
}

/// Why a batch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchError {
    ProductId,
    Empty,
    TooLarge { events: usize },
    Event { index: usize, field: EventField },
}

impl BatchError {
    pub fn describe(&self) -> String {
        match self {
            BatchError::ProductId => format!(
                "product_id must be 1 to {} bytes of A-Z a-z 0-9 _ -",
                bounds::PRODUCT_ID_BYTES_MAX
            ),
            BatchError::Empty => "a batch holds at least one event".into(),
            BatchError::TooLarge { events } => {
                format!("a batch holds at most {ORDERS_PER_BATCH_MAX} events, not {events}")
            }
            BatchError::Event { index, field } => format!("event {index}: {}", field.describe()),
        }
    }
}

fn order_of(product_id: &str, reservation_id: &str) -> Result<(), EventField> {
    match bounds::parse_order_id(reservation_id) {
        Some((product, _)) if product == product_id => Ok(()),
        _ => Err(EventField::ReservationId),
    }
}

impl Event {
    fn validate(&self, product_id: &str) -> Result<(), EventField> {
        match self {
            Event::Stock { stock_total, .. } => {
                if *stock_total > STOCK_UNITS_MAX {
                    return Err(EventField::StockTotal);
                }
            }
            Event::Order {
                reservation_id,
                buyer_id,
                quantity,
                payment_ref,
                ..
            } => {
                order_of(product_id, reservation_id)?;
                if !bounds::valid_buyer_id(buyer_id) {
                    return Err(EventField::BuyerId);
                }
                if !bounds::valid_quantity(*quantity) {
                    return Err(EventField::Quantity);
                }
                if !bounds::valid_payment_ref(payment_ref) {
                    return Err(EventField::PaymentRef);
                }
            }
            Event::Void {
                reservation_id,
                quantity,
                ..
            } => {
                order_of(product_id, reservation_id)?;
                if !bounds::valid_quantity(*quantity) {
                    return Err(EventField::Quantity);
                }
            }
        }
        Ok(())
    }
}

impl Batch {
    /// Checks every bound. The gate only builds batches that pass; the
    /// origin refuses any that does not.
    pub fn validate(&self) -> Result<(), BatchError> {
        if !bounds::valid_product_id(&self.product_id) {
            return Err(BatchError::ProductId);
        }
        if self.events.is_empty() {
            return Err(BatchError::Empty);
        }
        if self.events.len() > ORDERS_PER_BATCH_MAX {
            return Err(BatchError::TooLarge {
                events: self.events.len(),
            });
        }
        let mut last = 0;
        for (index, event) in self.events.iter().enumerate() {
            if event.seq() <= last {
                return Err(BatchError::Event {
                    index,
                    field: EventField::Seq,
                });
            }
            last = event.seq();
            event
                .validate(&self.product_id)
                .map_err(|field| BatchError::Event { index, field })?;
        }
        Ok(())
    }
}

/// What became of one event at the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// Applied now: an order stored and counted, a void applied, a total set.
    Applied,
    /// Applied by an earlier delivery; nothing changed.
    Duplicate,
    /// An order stored, but it would have oversold the product. Never
    /// expected: both sides alert on it.
    RejectedOversell,
    /// A void of an order the origin does not hold, or a stock total below
    /// the units it counts as sold. Never expected: both sides alert on it.
    Refused,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventResult {
    pub seq: u64,
    pub status: EventStatus,
}

/// The origin's answer to a batch: one result per event, in batch order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub results: Vec<EventResult>,
}

impl BatchResult {
    /// True when the answer names exactly the batch's events, in order: an
    /// answer to another batch must not ack this one.
    pub fn answers(&self, batch: &Batch) -> bool {
        self.results.len() == batch.events.len()
            && self
                .results
                .iter()
                .zip(&batch.events)
                .all(|(r, e)| r.seq == e.seq())
    }

    /// How many events the origin refused (oversell, or refused): each is a
    /// disagreement between the gate and the origin.
    pub fn refused(&self) -> usize {
        self.results
            .iter()
            .filter(|r| {
                matches!(
                    r.status,
                    EventStatus::RejectedOversell | EventStatus::Refused
                )
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::order_id;

    fn order(seq: u64) -> Event {
        Event::Order {
            seq,
            reservation_id: order_id("p1", &format!("{seq:016x}")),
            buyer_id: "alice".into(),
            quantity: 1,
            payment_ref: "pay".into(),
            confirmed_at_ms: 1,
        }
    }

    fn batch(events: Vec<Event>) -> Batch {
        Batch {
            product_id: "p1".into(),
            events,
        }
    }

    #[test]
    fn the_wire_form_is_tagged_by_kind() {
        let b = batch(vec![
            Event::Stock {
                seq: 1,
                stock_total: 10,
                at_ms: 5,
            },
            order(2),
        ]);
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains(r#""kind":"stock""#), "{json}");
        assert_eq!(serde_json::from_str::<Batch>(&json).unwrap(), b);
        let unknown = r#"{"product_id":"p1","events":[{"kind":"stock","seq":1,"stock_total":1,"at_ms":1,"x":1}]}"#;
        assert!(serde_json::from_str::<Batch>(unknown).is_err());
    }

    #[test]
    fn validation_names_the_event_and_field() {
        assert_eq!(batch(vec![order(1), order(2)]).validate(), Ok(()));
        assert_eq!(batch(vec![]).validate(), Err(BatchError::Empty));
        let mut bad_product = batch(vec![order(1)]);
        bad_product.product_id = "p 1".into();
        assert_eq!(bad_product.validate(), Err(BatchError::ProductId));
        let big = batch((1..=ORDERS_PER_BATCH_MAX as u64 + 1).map(order).collect());
        assert_eq!(
            big.validate(),
            Err(BatchError::TooLarge {
                events: ORDERS_PER_BATCH_MAX + 1
            })
        );
        let at = |index, field| Err(BatchError::Event { index, field });
        assert_eq!(
            batch(vec![order(2), order(2)]).validate(),
            at(1, EventField::Seq)
        );
        assert_eq!(batch(vec![order(0)]).validate(), at(0, EventField::Seq));
        type Spoil = fn(&mut Event);
        let cases: Vec<(Spoil, EventField)> = vec![
            (
                |e| {
                    if let Event::Order { reservation_id, .. } = e {
                        *reservation_id = "p2:0000000000000001".into()
                    }
                },
                EventField::ReservationId,
            ),
            (
                |e| {
                    if let Event::Order { buyer_id, .. } = e {
                        *buyer_id = "b".repeat(65)
                    }
                },
                EventField::BuyerId,
            ),
            (
                |e| {
                    if let Event::Order { quantity, .. } = e {
                        *quantity = 0
                    }
                },
                EventField::Quantity,
            ),
            (
                |e| {
                    if let Event::Order { payment_ref, .. } = e {
                        *payment_ref = String::new()
                    }
                },
                EventField::PaymentRef,
            ),
        ];
        for (spoil, field) in cases {
            let mut e = order(2);
            spoil(&mut e);
            assert_eq!(batch(vec![order(1), e]).validate(), at(1, field));
        }
        let stock = Event::Stock {
            seq: 1,
            stock_total: STOCK_UNITS_MAX + 1,
            at_ms: 0,
        };
        assert_eq!(batch(vec![stock]).validate(), at(0, EventField::StockTotal));
        let void = Event::Void {
            seq: 1,
            reservation_id: "p1:0000000000000001".into(),
            quantity: 0,
            voided_at_ms: 0,
        };
        assert_eq!(batch(vec![void]).validate(), at(0, EventField::Quantity));
    }

    #[test]
    fn an_answer_must_name_the_batch() {
        let b = batch(vec![order(1), order(2)]);
        let answer = |seqs: &[u64]| BatchResult {
            results: seqs
                .iter()
                .map(|&seq| EventResult {
                    seq,
                    status: EventStatus::Applied,
                })
                .collect(),
        };
        assert!(answer(&[1, 2]).answers(&b));
        assert!(!answer(&[2, 1]).answers(&b));
        assert!(!answer(&[1]).answers(&b));
        assert!(!answer(&[1, 2, 3]).answers(&b));
    }
}
