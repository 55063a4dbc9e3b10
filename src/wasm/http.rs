//! Turning replies into responses.

use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::worker_sys::web_sys;
use worker::{Headers, Response};

use crate::http::problem::Problem;
use crate::http::reply::Reply;

/// The fields every reply carries, in order: the one list both ways of
/// building a response below send.
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

pub fn respond(reply: Reply) -> worker::Result<Response> {
    let headers = Headers::new();
    for (name, value) in fields(&reply) {
        headers.set(name, value)?;
    }
    Ok(Response::from_bytes(reply.body_bytes())?
        .with_status(reply.status)
        .with_headers(headers))
}

pub fn problem(p: Problem) -> worker::Result<Response> {
    respond(p.into())
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

/// `respond` for a hot path: the runtime's response, built in one call
/// across the boundary instead of one per field (`Headers::set`), plus the
/// body's copy, the init's fields and the conversion `worker::Response`
/// needs.
pub fn respond_raw(reply: &Reply) -> worker::Result<web_sys::Response> {
    raw(reply.status, &reply.body_bytes(), &fields(reply))
}

/// `problem`, built as `respond_raw` builds.
pub fn problem_raw(p: Problem) -> worker::Result<web_sys::Response> {
    respond_raw(&p.into())
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
