//! RFC 9457 problem documents, with the stable `code` member clients switch
//! on. Every error the gate returns is one of these; none leaks internals.

use serde_json::{json, Map, Value};

#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub status: u16,
    /// Stable and machine-readable, such as `sold_out`.
    pub code: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Extra members that help the client act, such as `available`.
    pub extra: Map<String, Value>,
    /// Sent as `Retry-After`, in seconds, when a retry later may succeed.
    pub retry_after_s: Option<u64>,
    /// Sent as `Allow` with a 405.
    pub allow: Option<&'static str>,
}

impl Problem {
    pub fn new(
        status: u16,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            code,
            title,
            detail: detail.into(),
            extra: Map::new(),
            retry_after_s: None,
            allow: None,
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    pub fn body(&self) -> Value {
        let mut doc = json!({
            // A relative type URI: one per code, stable across releases.
            "type": format!("/problems/{}", self.code),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        });
        let obj = doc.as_object_mut().expect("object literal");
        for (k, v) in &self.extra {
            obj.insert(k.clone(), v.clone());
        }
        doc
    }

    // ----- the problems the edge raises before the Durable Object ---------

    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(404, "not_found", "No such route", detail)
    }

    pub fn method_not_allowed(allow: &'static str) -> Self {
        let mut p = Problem::new(
            405,
            "method_not_allowed",
            "Method not allowed",
            format!("this route accepts {allow}"),
        );
        p.allow = Some(allow);
        p
    }

    pub fn body_too_large(limit: usize) -> Self {
        Problem::new(
            413,
            "body_too_large",
            "Request body too large",
            format!("the body must be at most {limit} bytes"),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Problem::new(
            415,
            "unsupported_media_type",
            "Unsupported media type",
            "send the body as application/json",
        )
    }

    pub fn malformed_json(detail: impl Into<String>) -> Self {
        Problem::new(400, "malformed_json", "Malformed JSON", detail)
    }

    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Problem::new(422, "invalid_body", "Invalid request body", detail)
    }

    pub fn invalid_quantity(detail: impl Into<String>) -> Self {
        Problem::new(422, "invalid_quantity", "Invalid quantity", detail)
    }

    pub fn invalid_product_id() -> Self {
        Problem::new(
            400,
            "invalid_product_id",
            "Invalid product id",
            "a product id is 1 to 64 characters from A-Z a-z 0-9 _ -",
        )
    }

    pub fn invalid_reservation_id() -> Self {
        Problem::new(
            404,
            "unknown_reservation",
            "Unknown reservation",
            "no reservation has this id",
        )
    }

    pub fn idempotency_key_missing() -> Self {
        Problem::new(
            400,
            "idempotency_key_missing",
            "Idempotency-Key required",
            "a reserve request must carry an Idempotency-Key header",
        )
    }

    pub fn idempotency_key_invalid() -> Self {
        Problem::new(
            400,
            "idempotency_key_invalid",
            "Invalid Idempotency-Key",
            "an Idempotency-Key is 1 to 64 visible ASCII characters, optionally quoted",
        )
    }

    pub fn buyer_missing() -> Self {
        Problem::new(
            401,
            "buyer_missing",
            "Buyer identity required",
            "send the X-Buyer-Id header: 1 to 64 characters from A-Z a-z 0-9 _ - .",
        )
    }

    pub fn unauthorized() -> Self {
        Problem::new(
            401,
            "unauthorized",
            "Admin token required",
            "send Authorization: Bearer with the admin token",
        )
    }

    pub fn unknown_product(id: &str) -> Self {
        Problem::new(
            404,
            "unknown_product",
            "Unknown product",
            format!("no product has the id {id:?}"),
        )
    }

    pub fn internal() -> Self {
        Problem::new(
            500,
            "internal",
            "Internal error",
            "the gate could not complete the request; it is safe to retry with the same Idempotency-Key",
        )
    }
}
