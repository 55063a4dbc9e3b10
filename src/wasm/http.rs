//! Turning replies into responses.

use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::worker_sys::web_sys;

use crate::http::problem::Problem;
use crate::http::reply::Reply;

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
export function reply(status, body, fields) {
  const headers = new Headers();
  const kv = fields.split('\\n');
  for (let i = 0; i + 1 < kv.length; i += 2) headers.set(kv[i], kv[i + 1]);
  // The view is into wasm memory, which later calls may move: copy it.
  return new Response(body.length === 0 ? null : body.slice(), { status, headers });
}")]
extern "C" {
    /// A response built in one call: `fields` is `name\nvalue\n...`.
    #[wasm_bindgen(catch, js_name = reply)]
    fn build(status: u16, body: &[u8], fields: &str) -> Result<web_sys::Response, JsValue>;
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

/// A response of `status` with `body` and these header fields, built in one
/// call. Field values never hold a newline (the runtime refuses one).
pub fn raw(status: u16, body: &[u8], fields: &[(&str, &str)]) -> worker::Result<web_sys::Response> {
    let mut joined = String::new();
    for (name, value) in fields {
        joined.push_str(name);
        joined.push('\n');
        joined.push_str(value);
        joined.push('\n');
    }
    Ok(build(status, body, &joined)?)
}
