//! The edge's answers that are not JSON replies: pages, the OpenAPI
//! document, the assets and a product's view; and a dev session, whose
//! buyer the shell draws.

use worker::worker_sys::web_sys;
use worker::{Headers, Response};

use crate::edge::assets::{self, Asset};
use crate::edge::page::{self, Lang};
use crate::edge::pipeline;
use crate::edge::routes::Page;
use crate::settings::Settings;
use crate::wasm::http;

fn html_response(body: String, fields: &[(&str, String)]) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "text/html; charset=utf-8")?;
    headers.set("cache-control", "no-cache")?;
    headers.set("vary", "accept-language")?;
    for (name, value) in fields {
        headers.set(name, value)?;
    }
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers))
}

/// A page of `web/`, in the reader's language.
pub fn page(page: &Page, lang: Lang, payment_url: &str) -> worker::Result<web_sys::Response> {
    html_response(
        page::html(page, lang, payment_url),
        &page::security_fields(page, payment_url),
    )
    .map(Into::into)
}

/// The OpenAPI document, as JSON.
pub fn openapi() -> worker::Result<web_sys::Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set("cache-control", "no-cache")?;
    headers.set("x-content-type-options", "nosniff")?;
    Ok(
        Response::from_bytes(crate::OPENAPI_JSON.as_bytes().to_vec())?
            .with_headers(headers)
            .into(),
    )
}

/// A file of `edge::assets`, as it is, cacheable for a year.
pub fn asset(asset: &Asset) -> worker::Result<web_sys::Response> {
    let headers = Headers::new();
    headers.set("content-type", asset.content_type)?;
    headers.set("cache-control", assets::CACHE_CONTROL)?;
    headers.set("x-content-type-options", "nosniff")?;
    Ok(Response::from_bytes(asset.body.to_vec())?
        .with_headers(headers)
        .into())
}

/// A product's view (or a list of them), cacheable for a second.
pub fn product(body: &[u8]) -> worker::Result<web_sys::Response> {
    http::raw(
        200,
        body,
        &[
            ("content-type", "application/json"),
            ("cache-control", "public, max-age=1"),
            ("x-content-type-options", "nosniff"),
        ],
    )
}

fn random_u64() -> u64 {
    let hi = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

/// `POST /api/session` (`pipeline::session`), its buyer drawn here.
pub fn session(settings: &Settings, secure: bool) -> worker::Result<web_sys::Response> {
    let now_ms = crate::wasm::now_ms();
    match pipeline::session(settings, secure, now_ms, random_u64()) {
        Ok(reply) => http::respond(&reply),
        Err(p) => http::problem(p),
    }
}
