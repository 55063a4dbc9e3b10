//! Turning replies into `worker::Response`s.

use worker::{Headers, Response};

use crate::problem::Problem;
use crate::reply::Reply;

pub fn respond(reply: Reply) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", reply.content_type())?;
    headers.set("cache-control", "no-store")?;
    if let Some(s) = reply.retry_after_s {
        headers.set("retry-after", &s.to_string())?;
    }
    if let Some(allow) = &reply.allow {
        headers.set("allow", allow)?;
    }
    if let Some(challenge) = &reply.www_authenticate {
        headers.set("www-authenticate", challenge)?;
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
