//! RFC 9457 problem documents, with the stable `code` member clients switch
//! on. Every error the gate returns is one of these; none leaks internals.
//! The status and title come from the code's row in `flashgate_wire::codes`.

use flashgate_wire::ProblemDocument;
use serde_json::{Map, Value};

use crate::http::codes::ProblemCode;

#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub code: ProblemCode,
    pub detail: String,
    /// Extra members that help the client act, such as `available`.
    pub extra: Map<String, Value>,
    /// Response fields that go with the problem: `Retry-After` when a retry
    /// later may succeed, `Allow` with a 405, `WWW-Authenticate` with a
    /// 401, the `RateLimit` fields with a 429.
    pub headers: Vec<(&'static str, String)>,
}

impl Problem {
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Problem {
            code,
            detail: detail.into(),
            extra: Map::new(),
            headers: Vec::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// `Retry-After` in whole seconds, at least one.
    pub fn retry_after_ms(self, ms: u64) -> Self {
        self.header("retry-after", ms.div_ceil(1000).max(1).to_string())
    }

    /// The value of a response field this problem carries.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    pub fn document(&self) -> ProblemDocument {
        let mut doc = ProblemDocument::new(
            self.code.as_str(),
            self.code.status(),
            self.code.title(),
            self.detail.clone(),
        );
        doc.extra = self.extra.clone();
        doc
    }

    // ----- the problems the edge raises before the Durable Object ---------

    /// A live-update route asked without a WebSocket upgrade.
    pub fn upgrade_required() -> Self {
        Problem::new(
            ProblemCode::UpgradeRequired,
            "this route is a WebSocket: send Upgrade: websocket",
        )
        .header("upgrade", "websocket")
    }

    /// The product's object keeps no more sockets: the viewer polls the
    /// edge-cached product read instead.
    pub fn live_full(product_id: &str, sockets_max: u32, poll_ms: u64) -> Self {
        Problem::live_full_because(
            product_id,
            format!("this product has its {sockets_max} live viewers"),
            poll_ms,
        )
    }

    /// One client has its share of a product's live sockets: the same
    /// answer as a full product, so a page polls instead.
    pub fn live_full_for_client(product_id: &str, per_client_max: usize, poll_ms: u64) -> Self {
        Problem::live_full_because(
            product_id,
            format!("this client has {per_client_max} live sockets on this product"),
            poll_ms,
        )
    }

    fn live_full_because(product_id: &str, why: String, poll_ms: u64) -> Self {
        Problem::new(
            ProblemCode::LiveFull,
            format!("{why}; poll GET /api/products/{product_id} instead"),
        )
        .with("poll", format!("/api/products/{product_id}"))
        .with("poll_interval_ms", poll_ms)
        .retry_after_ms(poll_ms.max(30_000))
    }

    /// The catalog lists no more products; an existing product can still
    /// be updated.
    pub fn catalog_full(products_max: usize) -> Self {
        Problem::new(
            ProblemCode::CatalogFull,
            format!("the gate lists at most {products_max} products"),
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::NotFound, detail)
    }

    pub fn method_not_allowed(allow: String) -> Self {
        Problem::new(
            ProblemCode::MethodNotAllowed,
            format!("this route accepts {allow}"),
        )
        .header("allow", allow)
    }

    pub fn body_too_large(limit: usize) -> Self {
        Problem::new(
            ProblemCode::BodyTooLarge,
            format!("the body must be at most {limit} bytes"),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Problem::new(
            ProblemCode::UnsupportedMediaType,
            "send the body as application/json",
        )
    }

    pub fn malformed_json(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::MalformedJson, detail)
    }

    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::InvalidBody, detail)
    }

    pub fn invalid_query(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::InvalidQuery, detail)
    }

    pub fn invalid_quantity(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::InvalidQuantity, detail)
    }

    pub fn invalid_product_id() -> Self {
        Problem::new(
            ProblemCode::InvalidProductId,
            format!(
                "a product id is 1 to {} characters from A-Z a-z 0-9 _ -",
                flashgate_wire::bounds::PRODUCT_ID_BYTES_MAX
            ),
        )
    }

    pub fn invalid_reservation_id() -> Self {
        Problem::new(
            ProblemCode::UnknownReservation,
            "no reservation has this id",
        )
    }

    pub fn unknown_reservation() -> Self {
        Problem::new(
            ProblemCode::UnknownReservation,
            "no reservation of yours has this id",
        )
    }

    pub fn idempotency_key_missing() -> Self {
        Problem::new(
            ProblemCode::IdempotencyKeyMissing,
            "a reserve request must carry an Idempotency-Key header",
        )
    }

    pub fn idempotency_key_invalid() -> Self {
        Problem::new(
            ProblemCode::IdempotencyKeyInvalid,
            format!(
                "an Idempotency-Key is 1 to {} visible ASCII characters, optionally quoted",
                flashgate_core::limits::IDEM_KEY_BYTES_MAX
            ),
        )
    }

    pub fn unauthorized() -> Self {
        Problem::new(
            ProblemCode::Unauthorized,
            "send Authorization: Bearer with the admin token",
        )
    }

    pub fn unknown_product(id: &str) -> Self {
        Problem::new(
            ProblemCode::UnknownProduct,
            format!("no product has the id {id:?}"),
        )
    }

    /// The gate refuses to serve with its settings. The detail names no
    /// variable: which one is wrong, and why, is for the operator's log,
    /// not for an anonymous caller.
    pub fn misconfigured() -> Self {
        Problem::new(
            ProblemCode::Misconfigured,
            "the gate is not configured to serve; its log says what to fix",
        )
    }

    /// A buyer over the object's pace for this window.
    pub fn rate_limited(retry_after_ms: u64) -> Self {
        Problem::new(
            ProblemCode::RateLimited,
            "too many reserve attempts for this buyer; wait before trying again",
        )
        .with("retry_after_ms", retry_after_ms)
        .retry_after_ms(retry_after_ms)
    }

    /// A ticket whose turn has not come, with where it stands.
    pub fn not_admitted(position: u64, eta_s: Option<u64>) -> Self {
        let mut p = Problem::new(
            ProblemCode::NotAdmitted,
            format!("about {position} buyers are ahead in the waiting room"),
        )
        .with("position", position);
        if let Some(eta) = eta_s {
            p = p.with("eta_s", eta).retry_after_ms(eta.clamp(1, 30) * 1000);
        }
        p
    }

    pub fn ticket_invalid(detail: impl Into<String>) -> Self {
        Problem::new(ProblemCode::TicketInvalid, detail)
    }

    /// The product's object could not be reached or could not store. The
    /// client should come back after 1 to 3 seconds, picked by `random`
    /// (a number in [0, 1)), so that a crowd turned away together does not
    /// return together.
    pub fn unavailable(random: f64) -> Self {
        let retry_after_s = 1 + (random.clamp(0.0, 0.999) * 3.0) as u64;
        Problem::new(
            ProblemCode::Unavailable,
            "the product is busy or briefly unreachable; retry after the given time (it is safe with the same Idempotency-Key)",
        )
        .header("retry-after", retry_after_s.to_string())
    }

    pub fn internal() -> Self {
        Problem::new(
            ProblemCode::Internal,
            "the gate could not complete the request; it is safe to retry with the same Idempotency-Key",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_spreads_the_retries_over_one_to_three_seconds() {
        let waits: Vec<u64> = [0.0, 0.3, 0.5, 0.7, 0.99, 1.0, -1.0, f64::NAN]
            .iter()
            .map(|&r| {
                let p = Problem::unavailable(r);
                assert_eq!(p.status(), 503);
                p.header_value("retry-after").unwrap().parse().unwrap()
            })
            .collect();
        assert!(waits.iter().all(|w| (1..=3).contains(w)), "{waits:?}");
        assert_eq!(waits[..5], [1, 1, 2, 3, 3]);
    }
}
