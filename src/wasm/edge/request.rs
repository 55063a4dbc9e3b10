//! The parts of a request the edge reads, read in one call across the
//! JavaScript boundary: its method, url and every header field it may
//! use, instead of one call (and one string copy) per field.

use std::cell::OnceCell;

use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::worker_sys::web_sys;

use crate::edge::ticket::TICKET_HEADER;
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
