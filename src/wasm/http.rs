//! Turning replies into responses.

use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::worker_sys::web_sys;

use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::limits::REPLY_FIELD_SETS_MAX;

/// The fields every reply carries, in order.
fn fields(reply: &Reply) -> Vec<(&'static str, &str)> {
    let mut fields = vec![
        ("content-type", reply.content_type()),
        ("cache-control", "no-store"),
        // A JSON answer is never to be read as a page or a script.
        ("x-content-type-options", "nosniff"),
    ];
    fields.extend(reply.headers.iter().map(|(n, v)| (*n, v.as_str())));
    if reply.replayed {
        fields.push(("idempotent-replayed", "true"));
    }
    fields
}

#[wasm_bindgen(inline_js = "
const BUILT = new Map();
export function reply(status, body, fields, keep, keptMax) {
  let headers = keep ? BUILT.get(fields) : undefined;
  if (headers === undefined) {
    headers = new Headers();
    const kv = fields.split('\\n');
    for (let i = 0; i + 1 < kv.length; i += 2) headers.set(kv[i], kv[i + 1]);
    if (keep) {
      if (BUILT.size >= keptMax) BUILT.clear();
      BUILT.set(fields, headers);
    }
  }
  // The response takes a copy of the fields, so a kept set is never changed.
  // The view is into wasm memory, which later calls may move: copy it.
  return new Response(body.length === 0 ? null : body.slice(), { status, headers });
}")]
extern "C" {
    /// A response built in one call: `fields` is `name\nvalue\n...`. With
    /// `keep`, the fields are built once per isolate and kept by their text
    /// (at most `kept_max` sets).
    #[wasm_bindgen(catch, js_name = reply)]
    fn build(
        status: u16,
        body: &[u8],
        fields: &str,
        keep: bool,
        kept_max: u32,
    ) -> Result<web_sys::Response, JsValue>;
}

/// The one way a reply becomes a response: the runtime's own, built in one
/// call across the boundary instead of one per field (`Headers::set`) plus
/// the body's copy and the conversion a `worker::Response` needs. A caller
/// that must hand the runtime a `worker::Response` (a Durable Object's
/// `fetch`) converts it with `into()`, which wraps it and copies nothing.
pub fn respond(reply: &Reply) -> worker::Result<web_sys::Response> {
    raw(reply.status, &reply.body_bytes(), &fields(reply))
}

/// A problem document, as `respond` builds every reply.
pub fn problem(p: Problem) -> worker::Result<web_sys::Response> {
    respond(&p.into())
}

/// Fields whose value is new with each reply: a set holding one is built
/// for its reply alone, never kept.
const PER_REPLY: [&str; 2] = ["set-cookie", "server-timing"];

/// A response of `status` with `body` and these header fields, built in one
/// call. Field values never hold a newline (the runtime refuses one).
///
/// The fields are built into a `Headers` once per isolate and kept by
/// their text, since most replies carry one of a few sets (a problem's, a
/// JSON answer's): the response copies a kept set instead of one `set` per
/// field. Measured by `node --experimental-websocket bench/profile.mjs
/// MODE 6`, the builds without and with alternated, workerd CPU per
/// request: a sold-out answer 125-131 to 120-123 us (three pairs) and
/// 134-138 to 123-124 us (two more, a busier hour); a product read 83-84
/// to 76-77 us (two pairs). Every run with the kept sets was below every
/// run without.
pub fn raw(status: u16, body: &[u8], fields: &[(&str, &str)]) -> worker::Result<web_sys::Response> {
    let mut joined = String::new();
    for (name, value) in fields {
        joined.push_str(name);
        joined.push('\n');
        joined.push_str(value);
        joined.push('\n');
    }
    let keep = !fields.iter().any(|(name, _)| PER_REPLY.contains(name));
    Ok(build(status, body, &joined, keep, REPLY_FIELD_SETS_MAX)?)
}
