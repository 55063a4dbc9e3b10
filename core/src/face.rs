//! A product's face: what a shop shows of it (a name, a price with its
//! currency, an image and a short description, in Chinese and English
//! where given). The gate decides nothing by it; it lives beside the rules
//! in [`crate::Config`] only so that it is stored, restored and published
//! with them, through the rows the core already keeps.
//!
//! Every member is hostile text that pages will show: [`Face::validate`]
//! bounds each (the bounds are in [`crate::limits`]) and refuses what no
//! honest shop sends: control characters, direction overrides, an image
//! that is not `https`. Pages still escape all of it.

use serde::{Deserialize, Serialize};

use crate::config::limits::{
    FACE_DESCRIPTION_BYTES_MAX, FACE_IMAGE_URL_BYTES_MAX, FACE_NAME_BYTES_MAX,
    FACE_PRICE_FRACTION_DIGITS_MAX, FACE_PRICE_INTEGER_DIGITS_MAX,
};

/// A text in the two languages the pages speak; either may be absent, and
/// a page shows the other then.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Localized {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zh: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub en: Option<String>,
}

impl Localized {
    pub fn is_empty(&self) -> bool {
        self.zh.is_none() && self.en.is_none()
    }

    fn texts(&self) -> impl Iterator<Item = &str> {
        [self.zh.as_deref(), self.en.as_deref()]
            .into_iter()
            .flatten()
    }
}

/// A price as a decimal string and an ISO 4217 currency code. A string and
/// not a float, so that `19.90` stays `19.90`; pages format it with the
/// browser's `Intl.NumberFormat`, which knows each currency's digits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// `0`, `12` or `19.90`: digits, no sign, no leading zero.
    pub amount: String,
    /// Three capital letters, such as `CNY` or `EUR`.
    pub currency: String,
}

/// The face of a product. An admin's update replaces it whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Face {
    #[serde(default, skip_serializing_if = "Localized::is_empty")]
    pub name: Localized,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// An `https` URL, which the pages' policy allows as an image source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    #[serde(default, skip_serializing_if = "Localized::is_empty")]
    pub description: Localized,
}

/// Why a face was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaceError {
    Name,
    Description,
    Amount,
    Currency,
    ImageUrl,
}

impl FaceError {
    /// A sentence for the admin, with the bounds read from the limits.
    pub fn describe(self) -> String {
        match self {
            FaceError::Name => format!(
                "face.name.zh and face.name.en must each be 1 to {FACE_NAME_BYTES_MAX} bytes \
                 of text, with no control or direction-override characters"
            ),
            FaceError::Description => format!(
                "face.description.zh and face.description.en must each be 1 to \
                 {FACE_DESCRIPTION_BYTES_MAX} bytes of text, with no control characters but \
                 line breaks, and no direction overrides"
            ),
            FaceError::Amount => format!(
                "face.price.amount must be a decimal such as \"19.90\": at most \
                 {FACE_PRICE_INTEGER_DIGITS_MAX} digits, no leading zero, and at most \
                 {FACE_PRICE_FRACTION_DIGITS_MAX} after the point"
            ),
            FaceError::Currency => {
                "face.price.currency must be an ISO 4217 code: three capital letters".into()
            }
            FaceError::ImageUrl => format!(
                "face.image_url must be an https URL of at most {FACE_IMAGE_URL_BYTES_MAX} \
                 bytes, with a host, no user name, and no space, quote or angle bracket"
            ),
        }
    }
}

/// Characters that make a text show otherwise than it reads: the bidi
/// overrides and isolates (a name could otherwise show reversed, or swap
/// the words around it), and the byte-order mark.
fn deceptive(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

fn text_ok(s: &str, bytes_max: usize, line_breaks: bool) -> bool {
    !s.trim().is_empty()
        && s.len() <= bytes_max
        && s.chars()
            .all(|c| !deceptive(c) && (!c.is_control() || (line_breaks && c == '\n')))
}

fn amount_ok(s: &str) -> bool {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(int)
        && int.len() <= FACE_PRICE_INTEGER_DIGITS_MAX
        && (int == "0" || !int.starts_with('0'))
        && frac.is_none_or(|f| digits(f) && f.len() <= FACE_PRICE_FRACTION_DIGITS_MAX)
}

/// An `https` URL a page may put in `<img src>`: ASCII (anything else is
/// percent-encoded by whoever writes the URL), a host, no user name (which
/// hides the real host), and none of the characters that end an attribute
/// or a URL in some parser.
fn image_url_ok(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("https://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.split(':').next().unwrap_or("");
    s.len() <= FACE_IMAGE_URL_BYTES_MAX
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && !b"\"'<>\\`{}|^".contains(&b))
        && !authority.contains('@')
        && !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

impl Face {
    pub fn is_empty(&self) -> bool {
        *self == Face::default()
    }

    /// The face's only check: every bound and grammar, once.
    pub fn validate(&self) -> Result<(), FaceError> {
        if !self
            .name
            .texts()
            .all(|s| text_ok(s, FACE_NAME_BYTES_MAX, false))
        {
            return Err(FaceError::Name);
        }
        if !self
            .description
            .texts()
            .all(|s| text_ok(s, FACE_DESCRIPTION_BYTES_MAX, true))
        {
            return Err(FaceError::Description);
        }
        if let Some(p) = &self.price {
            if !amount_ok(&p.amount) {
                return Err(FaceError::Amount);
            }
            if !(p.currency.len() == 3 && p.currency.bytes().all(|b| b.is_ascii_uppercase())) {
                return Err(FaceError::Currency);
            }
        }
        if self.image_url.as_deref().is_some_and(|u| !image_url_ok(u)) {
            return Err(FaceError::ImageUrl);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn face(json: &str) -> Result<Face, String> {
        serde_json::from_str::<Face>(json).map_err(|e| e.to_string())
    }

    /// One table: each face, and what its check says. A refusal names the
    /// member; the input is printed on a failure.
    #[test]
    fn faces_are_checked_member_by_member() {
        let long_name = format!(
            r#"{{"name": {{"en": "{}"}}}}"#,
            "x".repeat(FACE_NAME_BYTES_MAX + 1)
        );
        let longest_zh = format!(
            r#"{{"name": {{"zh": "{}"}}}}"#,
            "茶".repeat(FACE_NAME_BYTES_MAX / 3)
        );
        let long_url = format!(
            r#"{{"image_url": "https://e.com/{}"}}"#,
            "a".repeat(FACE_IMAGE_URL_BYTES_MAX)
        );
        let cases: Vec<(&str, Result<(), FaceError>)> = vec![
            ("{}", Ok(())),
            (
                r#"{"name": {"zh": "龙井茶", "en": "Longjing tea"}, "price": {"amount": "19.90", "currency": "CNY"},
                   "image_url": "https://cdn.example.com/tea.jpg?w=400", "description": {"en": "Spring harvest.\nPicked by hand."}}"#,
                Ok(()),
            ),
            (r#"{"name": {"en": "<script>alert(1)</script>"}}"#, Ok(())),
            (&longest_zh, Ok(())),
            (&long_name, Err(FaceError::Name)),
            (r#"{"name": {"en": ""}}"#, Err(FaceError::Name)),
            (r#"{"name": {"en": "   "}}"#, Err(FaceError::Name)),
            (r#"{"name": {"en": "a\nb"}}"#, Err(FaceError::Name)),
            (r#"{"name": {"zh": "a\u0000b"}}"#, Err(FaceError::Name)),
            (r#"{"name": {"en": "gpj.\u202Eexe"}}"#, Err(FaceError::Name)),
            (
                r#"{"description": {"zh": "a\u0007"}}"#,
                Err(FaceError::Description),
            ),
            (r#"{"price": {"amount": "0", "currency": "JPY"}}"#, Ok(())),
            (
                r#"{"price": {"amount": "1.234", "currency": "KWD"}}"#,
                Ok(()),
            ),
            (
                r#"{"price": {"amount": "01", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "-1", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "1.", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "1.2345", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "1e9", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "1234567890", "currency": "CNY"}}"#,
                Err(FaceError::Amount),
            ),
            (
                r#"{"price": {"amount": "1", "currency": "cny"}}"#,
                Err(FaceError::Currency),
            ),
            (
                r#"{"price": {"amount": "1", "currency": "CNYY"}}"#,
                Err(FaceError::Currency),
            ),
            (
                r#"{"image_url": "http://e.com/a.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "javascript:alert(1)"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "data:image/png;base64,AAAA"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "HTTPS://e.com/a.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (r#"{"image_url": "https://"}"#, Err(FaceError::ImageUrl)),
            (
                r#"{"image_url": "https:///a.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "https://shop.com@evil.com/a.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "https://e.com/a.png\" onerror=\"alert(1)"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "https://e.com/a b.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (
                r#"{"image_url": "https://e.com/图.png"}"#,
                Err(FaceError::ImageUrl),
            ),
            (&long_url, Err(FaceError::ImageUrl)),
        ];
        for (json, want) in cases {
            let f = face(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(f.validate(), want, "{json}");
        }
    }

    #[test]
    fn unknown_members_and_wrong_types_are_refused_by_the_shape() {
        for bad in [
            r#"{"title": "x"}"#,
            r#"{"name": {"fr": "thé"}}"#,
            r#"{"name": "tea"}"#,
            r#"{"price": {"amount": 19.9, "currency": "CNY"}}"#,
            r#"{"price": {"amount": "1"}}"#,
            r#"{"image_url": 7}"#,
        ] {
            assert!(face(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_state_the_limits() {
        assert!(FaceError::Name
            .describe()
            .contains(&FACE_NAME_BYTES_MAX.to_string()));
        assert!(FaceError::ImageUrl
            .describe()
            .contains(&FACE_IMAGE_URL_BYTES_MAX.to_string()));
    }
}
