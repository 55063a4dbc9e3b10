//! Every bound and grammar of a field that crosses between the gate and the
//! origin, stated once. The gate's core keeps its own limits for its memory
//! budget; the gate crate checks at compile time that they equal these.

/// A product id: 1 to 64 bytes of `A-Z a-z 0-9 _ -`.
pub const PRODUCT_ID_BYTES_MAX: usize = 64;
/// A buyer id: 1 to 64 bytes of `A-Z a-z 0-9 _ - .`.
pub const BUYER_ID_BYTES_MAX: usize = 64;
/// A payment reference: 1 to 128 bytes of UTF-8 without control characters.
pub const PAYMENT_REF_BYTES_MAX: usize = 128;
/// The most units one order (one reservation) can carry.
pub const ORDER_QUANTITY_MAX: u32 = 1_000;
/// The largest stock total a product may have.
pub const STOCK_UNITS_MAX: u64 = 1_000_000_000;
/// The most orders one batch may carry.
pub const ORDERS_PER_BATCH_MAX: usize = 500;
/// The longest order id: a product id, a colon, and a u64 in decimal.
pub const ORDER_ID_BYTES_MAX: usize = PRODUCT_ID_BYTES_MAX + 1 + 20;

fn id_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

pub fn valid_product_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= PRODUCT_ID_BYTES_MAX && id.bytes().all(id_byte)
}

pub fn valid_buyer_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= BUYER_ID_BYTES_MAX && id.bytes().all(|c| id_byte(c) || c == b'.')
}

pub fn valid_payment_ref(s: &str) -> bool {
    !s.is_empty() && s.len() <= PAYMENT_REF_BYTES_MAX && !s.chars().any(char::is_control)
}

pub fn valid_quantity(q: u32) -> bool {
    (1..=ORDER_QUANTITY_MAX).contains(&q)
}

/// The id of an order at the origin, unique across products: the product id
/// and the reservation's id within the product, `{product_id}:{id}`.
pub fn order_id(product_id: &str, reservation_id: u64) -> String {
    format!("{product_id}:{reservation_id}")
}

/// Splits an order id into its product id and reservation id. Refuses
/// anything `order_id` would not have written: a bad product id, a
/// reservation id of 0, a sign, or leading zeros.
pub fn parse_order_id(s: &str) -> Option<(&str, u64)> {
    let (product, id) = s.rsplit_once(':')?;
    if !valid_product_id(product) {
        return None;
    }
    let n: u64 = id.parse().ok()?;
    (n > 0 && n.to_string() == id).then_some((product, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_round_trip_and_refuse_what_was_never_written() {
        let id = order_id("p-1", 42);
        assert_eq!(id, "p-1:42");
        assert_eq!(parse_order_id(&id), Some(("p-1", 42)));
        assert!(order_id(&"p".repeat(64), u64::MAX).len() <= ORDER_ID_BYTES_MAX);
        for bad in [
            ":1", "p:", "p:0", "p:01", "p:+1", "p q:1", "p:1:2", "p:-1", "p",
        ] {
            assert_eq!(parse_order_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn grammars() {
        assert!(valid_product_id("A-z_09"));
        assert!(!valid_product_id(""));
        assert!(!valid_product_id("a.b"));
        assert!(!valid_product_id(&"p".repeat(65)));
        assert!(valid_buyer_id("alice.b-1_x"));
        assert!(!valid_buyer_id("al ice"));
        assert!(!valid_buyer_id(&"b".repeat(65)));
        assert!(valid_payment_ref("支付-1"));
        assert!(!valid_payment_ref(""));
        assert!(!valid_payment_ref("a\nb"));
        assert!(!valid_payment_ref(&"p".repeat(129)));
        assert!(valid_quantity(1) && valid_quantity(1000));
        assert!(!valid_quantity(0) && !valid_quantity(1001));
    }
}
