//! The problem document (RFC 9457) that the gate and the origin answer every
//! error with. One shape and one rule for both:
//! - `type` is `/problems/{code}`, a relative URI, one per code;
//! - `title` is the fixed summary of the code, the same for every
//!   occurrence (RFC 9457 section 3.1.3); each side keeps a table of its codes
//!   with their status and title (`codes` here for the gate,
//!   `flashgate_origin::problem` for the origin);
//! - `detail` explains this occurrence;
//! - `code` is the stable machine-readable code clients switch on;
//! - further members help the client act, such as `available`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const CONTENT_TYPE: &str = "application/problem+json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProblemDocument {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ProblemDocument {
    pub fn new(code: &str, status: u16, title: &str, detail: impl Into<String>) -> Self {
        ProblemDocument {
            type_uri: type_uri(code),
            title: title.into(),
            status,
            detail: detail.into(),
            code: code.into(),
            extra: Map::new(),
        }
    }
}

/// The `type` of a problem with `code`.
pub fn type_uri(code: &str) -> String {
    format!("/problems/{code}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_members_sit_beside_the_standard_ones() {
        let mut p = ProblemDocument::new("sold_out", 409, "Sold out", "every unit is held or sold");
        p.extra.insert("available".into(), 0.into());
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["type"], "/problems/sold_out");
        assert_eq!(v["available"], 0);
        let back: ProblemDocument = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
