//! The parts of a request the edge reads, read in one call across the
//! JavaScript boundary: its method, url and every header field it may
//! use, instead of one call (and one string copy) per field; and its body,
//! read up to the limit.

use std::cell::OnceCell;

use futures_util::StreamExt;
use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::Request;

use crate::edge::ticket::TICKET_HEADER;
use crate::http::problem::Problem;
use crate::limits::BODY_BYTES_MAX;
use flashgate_wire::signing;

#[wasm_bindgen(inline_js = "
export function parts(req, names) {
  const h = req.headers;
  let out = req.method + '\\n' + req.url;
  for (const n of names) {
    const v = h.get(n);
    out += v === null ? '\\n\\r' : '\\n' + v;
  }
  return out;
}")]
extern "C" {
    /// `method\nurl\nvalue...`, a value per name, `\r` for an absent one.
    /// Neither a method, a url (its parser drops line breaks) nor a field
    /// value (the runtime refuses one with a line break or a bare `\r`, and
    /// trims it) holds either character.
    fn parts(req: &web_sys::Request, names: &js_sys::Array) -> String;
}

/// The header fields the edge reads. A new one goes last, in `ALL` too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    ContentLength,
    ConnectingIp,
    ContentType,
    IdempotencyKey,
    Authorization,
    Cookie,
    Ticket,
    Pow,
    KeyId,
    Timestamp,
    Signature,
    AcceptLanguage,
    Upgrade,
}

impl Field {
    const ALL: [Field; 13] = [
        Field::ContentLength,
        Field::ConnectingIp,
        Field::ContentType,
        Field::IdempotencyKey,
        Field::Authorization,
        Field::Cookie,
        Field::Ticket,
        Field::Pow,
        Field::KeyId,
        Field::Timestamp,
        Field::Signature,
        Field::AcceptLanguage,
        Field::Upgrade,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::ContentLength => "content-length",
            Field::ConnectingIp => "cf-connecting-ip",
            Field::ContentType => "content-type",
            Field::IdempotencyKey => "idempotency-key",
            Field::Authorization => "authorization",
            Field::Cookie => "cookie",
            Field::Ticket => TICKET_HEADER,
            Field::Pow => crate::edge::pow::POW_HEADER,
            Field::KeyId => signing::KEY_ID_HEADER,
            Field::Timestamp => signing::TIMESTAMP_HEADER,
            Field::Signature => signing::SIGNATURE_HEADER,
            Field::AcceptLanguage => "accept-language",
            Field::Upgrade => "upgrade",
        }
    }
}

// `ALL` lists every field at its own index, the last one included.
const _: () = {
    let mut i = 0;
    while i < Field::ALL.len() {
        assert!(Field::ALL[i] as usize == i);
        i += 1;
    }
    assert!(Field::Upgrade as usize + 1 == Field::ALL.len());
};

thread_local! {
    // The names as a JavaScript array, built once per isolate.
    static NAMES: OnceCell<js_sys::Array> = const { OnceCell::new() };
}

/// A request's method, url and fields.
pub struct Parts {
    pub method: String,
    pub url: String,
    values: Vec<Option<String>>,
}

impl Parts {
    pub fn read(req: &web_sys::Request) -> Parts {
        let joined = NAMES.with(|cell| {
            let names = cell.get_or_init(|| {
                Field::ALL
                    .iter()
                    .map(|f| JsValue::from_str(f.name()))
                    .collect()
            });
            parts(req, names)
        });
        let mut lines = joined.split('\n');
        let method = lines.next().unwrap_or_default().to_string();
        let url = lines.next().unwrap_or_default().to_string();
        let values = lines.map(|v| (v != "\r").then(|| v.to_string())).collect();
        Parts {
            method,
            url,
            values,
        }
    }

    /// The field's value, if the request has it.
    pub fn get(&self, field: Field) -> Option<&str> {
        self.values.get(field as usize).and_then(|v| v.as_deref())
    }
}

/// The body's declared length, if the request states one that parses.
fn declared(parts: &Parts) -> Option<u64> {
    parts
        .get(Field::ContentLength)
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Whether the body is read in one piece (`in_one_piece`): a method with a
/// body, declaring a length from 1 to the limit. The runtime holds a body
/// to its declared length.
pub fn one_piece(parts: &Parts) -> bool {
    parts.method != "GET"
        && parts.method != "HEAD"
        && declared(parts).is_some_and(|n| (1..=BODY_BYTES_MAX as u64).contains(&n))
}

/// The body a one-piece read (`one_piece`) got: the runtime's buffer, or
/// `None` if the client broke off before its declared length.
pub fn in_one_piece(buffer: Option<JsValue>) -> Result<Vec<u8>, Problem> {
    let Some(buffer) = buffer else {
        return Err(body_broken_off());
    };
    let body = worker::js_sys::Uint8Array::new(&buffer).to_vec();
    if body.len() > BODY_BYTES_MAX {
        return Err(Problem::body_too_large(BODY_BYTES_MAX));
    }
    Ok(body)
}

/// Reads at most `BODY_BYTES_MAX + 1` bytes, so an oversized body is refused
/// without being read whole.
pub async fn read_body(
    req: web_sys::Request,
    parts: &Parts,
) -> worker::Result<Result<Vec<u8>, Problem>> {
    let declared = declared(parts);
    if declared.is_some_and(|n| n > BODY_BYTES_MAX as u64) {
        return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
    }
    if declared == Some(0) || parts.method == "GET" || parts.method == "HEAD" {
        return Ok(Ok(Vec::new()));
    }
    if one_piece(parts) {
        let buffer = JsFuture::from(req.array_buffer()?).await.ok();
        return Ok(in_one_piece(buffer));
    }
    // No declared length: read the stream, and stop past the limit.
    let mut req = Request::from(req);
    let mut body = Vec::new();
    let mut stream = match req.stream() {
        Ok(s) => s,
        // No body at all.
        Err(_) => return Ok(Ok(body)),
    };
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Ok(Err(body_broken_off()));
        };
        body.extend_from_slice(&chunk);
        if body.len() > BODY_BYTES_MAX {
            return Ok(Err(Problem::body_too_large(BODY_BYTES_MAX)));
        }
    }
    Ok(Ok(body))
}

/// A body that could not be read whole: the client broke off before its
/// declared length, or its framing was broken. The client's fault, so a
/// 4xx (it may never arrive), and nothing was decided.
fn body_broken_off() -> Problem {
    Problem::malformed_json("the body could not be read whole: it ended early or was broken off")
}
