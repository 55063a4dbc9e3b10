//! The batch of confirmed orders the gate forwards, and the origin's answer.

use serde::{Deserialize, Serialize};

use crate::bounds::{self, ORDERS_PER_BATCH_MAX, STOCK_UNITS_MAX};

/// One confirmed reservation on its way to the origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Order {
    /// Globally unique: `bounds::order_id(product_id, reservation id)`.
    pub reservation_id: String,
    pub product_id: String,
    pub buyer_id: String,
    pub quantity: u32,
    pub payment_ref: String,
    pub confirmed_at_ms: u64,
    /// The gate's stock total when the batch was sent. The origin uses it
    /// only to register a product it has not seen; its own total rules.
    pub stock_total: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub orders: Vec<Order>,
}

/// Which field of which order broke a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderField {
    ReservationId,
    ProductId,
    BuyerId,
    Quantity,
    PaymentRef,
    StockTotal,
}

impl OrderField {
    fn describe(self) -> String {
        match self {
            OrderField::ReservationId => {
                "reservation_id must be {product_id}:{reservation id}, the id at least 1".into()
            }
            OrderField::ProductId => format!(
                "product_id must be 1 to {} bytes of A-Z a-z 0-9 _ -",
                bounds::PRODUCT_ID_BYTES_MAX
            ),
            OrderField::BuyerId => format!(
                "buyer_id must be 1 to {} bytes of A-Z a-z 0-9 _ - .",
                bounds::BUYER_ID_BYTES_MAX
            ),
            OrderField::Quantity => {
                format!("quantity must be 1 to {}", bounds::ORDER_QUANTITY_MAX)
            }
            OrderField::PaymentRef => format!(
                "payment_ref must be 1 to {} bytes without control characters",
                bounds::PAYMENT_REF_BYTES_MAX
            ),
            OrderField::StockTotal => format!("stock_total must be at most {STOCK_UNITS_MAX}"),
        }
    }
}

/// Why a batch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchError {
    Empty,
    TooLarge { orders: usize },
    Order { index: usize, field: OrderField },
}

impl BatchError {
    pub fn describe(&self) -> String {
        match self {
            BatchError::Empty => "a batch holds at least one order".into(),
            BatchError::TooLarge { orders } => {
                format!("a batch holds at most {ORDERS_PER_BATCH_MAX} orders, not {orders}")
            }
            BatchError::Order { index, field } => format!("order {index}: {}", field.describe()),
        }
    }
}

impl Order {
    /// Checks every bound of the order. The gate only builds orders that
    /// pass; the origin refuses any that does not.
    pub fn validate(&self) -> Result<(), OrderField> {
        if !bounds::valid_product_id(&self.product_id) {
            return Err(OrderField::ProductId);
        }
        match bounds::parse_order_id(&self.reservation_id) {
            Some((product, _)) if product == self.product_id => {}
            _ => return Err(OrderField::ReservationId),
        }
        if !bounds::valid_buyer_id(&self.buyer_id) {
            return Err(OrderField::BuyerId);
        }
        if !bounds::valid_quantity(self.quantity) {
            return Err(OrderField::Quantity);
        }
        if !bounds::valid_payment_ref(&self.payment_ref) {
            return Err(OrderField::PaymentRef);
        }
        if self.stock_total > STOCK_UNITS_MAX {
            return Err(OrderField::StockTotal);
        }
        Ok(())
    }
}

impl Batch {
    pub fn validate(&self) -> Result<(), BatchError> {
        if self.orders.is_empty() {
            return Err(BatchError::Empty);
        }
        if self.orders.len() > ORDERS_PER_BATCH_MAX {
            return Err(BatchError::TooLarge {
                orders: self.orders.len(),
            });
        }
        for (index, order) in self.orders.iter().enumerate() {
            order
                .validate()
                .map_err(|field| BatchError::Order { index, field })?;
        }
        Ok(())
    }
}

/// What became of one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Stored now, and the product's `sold` went up.
    Inserted,
    /// Stored by an earlier delivery; nothing changed.
    Exists,
    /// Stored, but it would have oversold the product. This should never
    /// happen; both sides alert on it.
    RejectedOversell,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemResult {
    pub reservation_id: String,
    pub status: ItemStatus,
}

/// The origin's answer to a batch: one result per order, in batch order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub results: Vec<ItemResult>,
}

impl BatchResult {
    /// True when the answer names exactly the batch's orders, in order: an
    /// answer to another batch must not ack this one.
    pub fn answers(&self, batch: &Batch) -> bool {
        self.results.len() == batch.orders.len()
            && self
                .results
                .iter()
                .zip(&batch.orders)
                .all(|(r, o)| r.reservation_id == o.reservation_id)
    }

    /// How many orders the origin refused as oversell.
    pub fn rejected_oversell(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.status == ItemStatus::RejectedOversell)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::order_id;

    pub(crate) fn order(n: u64) -> Order {
        Order {
            reservation_id: order_id("p1", n),
            product_id: "p1".into(),
            buyer_id: "alice".into(),
            quantity: 1,
            payment_ref: "pay".into(),
            confirmed_at_ms: 1,
            stock_total: 10,
        }
    }

    #[test]
    fn validation_names_the_field() {
        let ok = Batch {
            orders: vec![order(1), order(2)],
        };
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(Batch { orders: vec![] }.validate(), Err(BatchError::Empty));
        let big = Batch {
            orders: (1..=ORDERS_PER_BATCH_MAX as u64 + 1).map(order).collect(),
        };
        assert_eq!(
            big.validate(),
            Err(BatchError::TooLarge {
                orders: ORDERS_PER_BATCH_MAX + 1
            })
        );
        type Spoil = fn(&mut Order);
        let cases: Vec<(Spoil, OrderField)> = vec![
            (
                |o| o.reservation_id = "p2:1".into(),
                OrderField::ReservationId,
            ),
            (
                |o| o.reservation_id = "p1:0".into(),
                OrderField::ReservationId,
            ),
            (|o| o.product_id = "p 1".into(), OrderField::ProductId),
            (|o| o.buyer_id = String::new(), OrderField::BuyerId),
            (|o| o.buyer_id = "b".repeat(65), OrderField::BuyerId),
            (|o| o.quantity = 0, OrderField::Quantity),
            (|o| o.quantity = 1001, OrderField::Quantity),
            (|o| o.payment_ref = String::new(), OrderField::PaymentRef),
            (|o| o.payment_ref = "p".repeat(129), OrderField::PaymentRef),
            (
                |o| o.stock_total = STOCK_UNITS_MAX + 1,
                OrderField::StockTotal,
            ),
        ];
        for (spoil, field) in cases {
            let mut o = order(1);
            spoil(&mut o);
            let b = Batch {
                orders: vec![order(1), o],
            };
            assert_eq!(b.validate(), Err(BatchError::Order { index: 1, field }));
        }
    }

    #[test]
    fn an_answer_must_name_the_batch() {
        let batch = Batch {
            orders: vec![order(1), order(2)],
        };
        let answer = |ids: &[u64]| BatchResult {
            results: ids
                .iter()
                .map(|&n| ItemResult {
                    reservation_id: order_id("p1", n),
                    status: ItemStatus::Inserted,
                })
                .collect(),
        };
        assert!(answer(&[1, 2]).answers(&batch));
        assert!(!answer(&[2, 1]).answers(&batch));
        assert!(!answer(&[1]).answers(&batch));
        assert!(!answer(&[1, 2, 3]).answers(&batch));
    }
}
