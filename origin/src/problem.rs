//! The origin's problem codes: one table, the only place a code's string,
//! status and title are written. Every error the origin answers is an
//! `AppError` with one of these codes, rendered as the wire crate's problem
//! document under the rule both services share (see `flashgate_wire::problem`).
//! A test checks this table against `openapi.yaml`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flashgate_wire::problem::{ProblemDocument, CONTENT_TYPE};

macro_rules! origin_codes {
    ($($Var:ident => $code:literal, $status:literal, $title:literal;)+) => {
        /// Every problem code the origin answers with.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum OriginCode {
            $($Var,)+
        }

        impl OriginCode {
            pub const ALL: &'static [OriginCode] = &[$(OriginCode::$Var,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(OriginCode::$Var => $code,)+
                }
            }

            pub const fn status(self) -> u16 {
                match self {
                    $(OriginCode::$Var => $status,)+
                }
            }

            pub const fn title(self) -> &'static str {
                match self {
                    $(OriginCode::$Var => $title,)+
                }
            }
        }
    };
}

origin_codes! {
    NotFound => "not_found", 404, "No such route";
    MethodNotAllowed => "method_not_allowed", 405, "Method not allowed";
    BodyTooLarge => "body_too_large", 413, "Request body too large";
    BadBody => "bad_body", 400, "Unreadable request body";
    BodyTimeout => "body_timeout", 408, "Request body too slow";
    MalformedJson => "malformed_json", 400, "Malformed JSON";
    InvalidBody => "invalid_body", 422, "Invalid request body";
    BatchTooLarge => "batch_too_large", 413, "Batch too large";
    BadSignature => "bad_signature", 401, "Missing or bad signature";
    Unauthorized => "unauthorized", 401, "Credential required";
    TokenInvalid => "token_invalid", 401, "Invalid buyer token";
    InvalidProductId => "invalid_product_id", 400, "Invalid product id";
    UnknownProduct => "unknown_product", 404, "Unknown product";
    BadQuery => "bad_query", 400, "Invalid query";
    Timeout => "timeout", 503, "Request timed out";
    Overloaded => "overloaded", 503, "Too many requests in flight";
    GateUnreachable => "gate_unreachable", 502, "Gate unreachable";
    Unhealthy => "unhealthy", 503, "Database unavailable";
    Internal => "internal", 500, "Internal error";
}

/// An error answer. Server errors are logged where they arise and answered
/// without internals.
#[derive(Debug)]
pub struct AppError {
    pub code: OriginCode,
    pub detail: String,
    /// Sent as `Retry-After`, in seconds.
    pub retry_after_s: Option<u64>,
    /// Sent as `WWW-Authenticate` with a 401.
    pub challenge: Option<&'static str>,
}

impl AppError {
    pub fn new(code: OriginCode, detail: impl Into<String>) -> AppError {
        AppError {
            code,
            detail: detail.into(),
            retry_after_s: None,
            challenge: None,
        }
    }

    pub fn unauthorized(detail: impl Into<String>) -> AppError {
        AppError {
            challenge: Some(r#"Bearer realm="flashgate-origin""#),
            ..AppError::new(OriginCode::Unauthorized, detail)
        }
    }

    pub fn retry_after(mut self, seconds: u64) -> AppError {
        self.retry_after_s = Some(seconds);
        self
    }
}

impl From<anyhow::Error> for AppError {
    fn from(e: anyhow::Error) -> AppError {
        tracing::error!(error = %format!("{e:#}"), "request failed");
        AppError::new(
            OriginCode::Internal,
            "the origin could not complete the request; retrying is safe",
        )
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let doc = ProblemDocument::new(
            self.code.as_str(),
            self.code.status(),
            self.code.title(),
            self.detail,
        );
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(doc)).into_response();
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if let Some(s) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(c) = self.challenge {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_with_valid_statuses() {
        let mut seen = std::collections::HashSet::new();
        for c in OriginCode::ALL {
            assert!(seen.insert(c.as_str()));
            assert!(StatusCode::from_u16(c.status()).is_ok());
            assert!((400..600).contains(&c.status()));
        }
    }
}
