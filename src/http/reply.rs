//! An HTTP reply, before the shell turns it into a `worker::Response`.

use serde_json::Value;

use crate::http::problem::Problem;

#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// The body is an RFC 9457 problem document.
    pub problem: bool,
    /// Response fields beside the content type (see `Problem::headers`).
    pub headers: Vec<(&'static str, String)>,
    /// The answer is a replay of an earlier one (`Idempotent-Replayed`).
    pub replayed: bool,
}

impl Reply {
    pub fn ok(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body,
            problem: false,
            headers: Vec::new(),
            replayed: false,
        }
    }

    /// The reply's body as bytes. Serializing a `Value` cannot fail.
    pub fn body_bytes(&self) -> Vec<u8> {
        self.body.to_string().into_bytes()
    }

    pub fn content_type(&self) -> &'static str {
        if self.problem {
            flashgate_wire::problem::CONTENT_TYPE
        } else {
            "application/json"
        }
    }
}

impl From<Problem> for Reply {
    fn from(p: Problem) -> Reply {
        let body = serde_json::to_value(p.document()).unwrap_or(Value::Null);
        Reply {
            status: p.status(),
            body,
            problem: true,
            headers: p.headers,
            replayed: false,
        }
    }
}
