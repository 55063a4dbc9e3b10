//! Turning replies into `worker::Response`s.

use worker::{Headers, Response};

use crate::problem::Problem;
use crate::reply::Reply;

pub fn respond(reply: Reply) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", reply.content_type())?;
    headers.set("cache-control", "no-store")?;
    for (name, value) in &reply.headers {
        headers.set(name, value)?;
    }
    if reply.replayed {
        headers.set("idempotent-replayed", "true")?;
    }
    Ok(Response::from_bytes(reply.body_bytes())?
        .with_status(reply.status)
        .with_headers(headers))
}

pub fn problem(p: Problem) -> worker::Result<Response> {
    respond(p.into())
}
