//! Every bound and grammar of a field that crosses between the gate and the
//! origin (and the buyer tokens that come to both from the shop's login or
//! its identity provider, the key sets and signatures they share, and the
//! proof of work a buyer's page sends the gate), stated once, and the
//! promises the load tools judge the gate by.
//! The gate's core keeps its own limits for its memory budget; the gate
//! crate checks at compile time that they equal these.

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
/// The lag of a `sold_out` answer: units that came back (a cancel, an
/// expiry, a void, a restock) up to this long before a reserve was sent may
/// still be answered `sold_out`; any other `sold_out` is false if a unit was
/// available anywhere when it was given. It is the gate's stated promise:
/// the edge's snapshot freshness is derived from it, and `flashgate-load`
/// judges every `sold_out` by it.
pub const SOLD_OUT_LAG_MS: u64 = 1_000;
/// A reservation id as the gate shows it: 16 lowercase hex digits (the
/// gate's keyed permutation of its internal id; see `src/ids.rs`).
pub const RESERVATION_ID_HEX_DIGITS: usize = 16;
/// The longest order id: a product id, a colon, and a reservation id.
pub const ORDER_ID_BYTES_MAX: usize = PRODUCT_ID_BYTES_MAX + 1 + RESERVATION_ID_HEX_DIGITS;

// Buyer tokens (`token`) and a provider's keys (`jwks`): they cross from
// the shop's login or its identity provider to the gate and the origin.

/// The longest buyer token signed with a shared key (HS256), in bytes: the
/// gate's own tokens and a shop's are a few hundred bytes, and this was
/// the bound before provider tokens were taken; it stays, so that an HS256
/// token is checked exactly as it always was.
pub const HS256_TOKEN_BYTES_MAX: usize = 2 * 1024;
/// The longest buyer token of any kind, in bytes, checked before a byte
/// of it is decoded. Identity providers' ID tokens are commonly 1 to 2 KiB
/// with an RSA signature of 256 to 512 bytes; tokens carrying roles or
/// groups run to several KiB. 8 KiB takes those and is far inside what a
/// request header may carry; a browser's cookie holds at most about 4 KiB,
/// so a larger token must come as `Authorization: Bearer`.
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;
const _: () = assert!(HS256_TOKEN_BYTES_MAX <= TOKEN_BYTES_MAX);
/// Clock skew forgiven on `exp`, `nbf` and `iat`, in seconds.
pub const TOKEN_LEEWAY_S: u64 = 30;
/// The longest lifetime a token may claim, in seconds: `exp - iat`, or
/// `exp - now` for a token without `iat`.
pub const TOKEN_LIFETIME_S_MAX: u64 = 24 * 60 * 60;
/// The longest JWKS the gate parses, in bytes. A provider's set of two or
/// three keys is 1 to 2 KiB once each key's certificate chain (`x5c`),
/// which the gate does not read, is stripped; with it, about 1.5 KiB a key
/// more.
pub const JWKS_BYTES_MAX: usize = 16 * 1024;
/// The most keys a JWKS may hold: providers publish two or three (the
/// current key, the next, the last), a few more across a rotation.
pub const JWKS_KEYS_MAX: usize = 16;
/// The longest key id of a JWKS, in bytes. Providers write ids of 20 to 44
/// characters (hex digests, base64 thumbprints).
pub const JWK_KID_BYTES_MAX: usize = 128;
/// RSA moduli the gate accepts, in bits: 2048 is the least a provider
/// issues today (RFC 7518, 3.3 requires it), and 4096 the most WebCrypto is
/// commonly asked to verify.
pub const RSA_MODULUS_BITS_MIN: usize = 2048;
pub const RSA_MODULUS_BITS_MAX: usize = 4096;
/// The longest RSA public exponent, in bytes (65537 is 3).
pub const RSA_EXPONENT_BYTES_MAX: usize = 8;

// Key sets (`keys`) and request signatures (`signing`): the gate and the
// origin read the same sets and sign to each other.

/// The shortest secret a key set accepts: 256 bits of a random string.
pub const KEY_BYTES_MIN: usize = 32;
/// The longest key id.
pub const KID_BYTES_MAX: usize = 32;
/// The most keys one set may hold.
pub const KEYS_PER_SET_MAX: usize = 8;
/// The least estimated strength of a secret, in bits (`keys::check_secret`).
pub const SECRET_BITS_MIN: f64 = 128.0;
/// How much of a secret `keys::estimated_bits` reads: enough for any secret
/// worth having, and a bound on the work a hostile value can cause.
pub const SECRET_BYTES_ESTIMATED_MAX: usize = 1024;
/// A signature older or newer than this is refused, so a captured request
/// cannot be replayed later.
pub const SIGNATURE_SKEW_MS_MAX: u64 = 5 * 60 * 1000;

// The proof of work's payload (`altcha`): it crosses from the buyer's
// page, or a shop's own widget, to the gate.

/// The largest payload a join may carry, in bytes of base64: a challenge
/// with the longest buyer and product ids is under 900.
pub const PAYLOAD_BYTES_MAX: usize = 2_048;
/// The most hex zeros a key prefix may ask for (16^8 tries is hours).
pub const LEVEL_MAX: u8 = 8;

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

pub fn valid_reservation_id(id: &str) -> bool {
    id.len() == RESERVATION_ID_HEX_DIGITS
        && id
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// The id of an order at the origin, unique across products: the product id
/// and the reservation's id as buyers see it, `{product_id}:{reservation}`.
pub fn order_id(product_id: &str, reservation_id: &str) -> String {
    format!("{product_id}:{reservation_id}")
}

/// Splits an order id into its product id and reservation id. Refuses
/// anything `order_id` would not have written.
pub fn parse_order_id(s: &str) -> Option<(&str, &str)> {
    let (product, id) = s.rsplit_once(':')?;
    (valid_product_id(product) && valid_reservation_id(id)).then_some((product, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_round_trip_and_refuse_what_was_never_written() {
        let id = order_id("p-1", "00112233aabbccdd");
        assert_eq!(id, "p-1:00112233aabbccdd");
        assert_eq!(parse_order_id(&id), Some(("p-1", "00112233aabbccdd")));
        assert!(order_id(&"p".repeat(64), "ffffffffffffffff").len() <= ORDER_ID_BYTES_MAX);
        for bad in [
            ":00112233aabbccdd",
            "p:",
            "p:1",
            "p:00112233AABBCCDD",
            "p q:00112233aabbccdd",
            "p:00112233aabbccdd0",
            "p",
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
