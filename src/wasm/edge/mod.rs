//! The Worker's fetch handler: the edge in front of every product. It runs
//! the steps of `edge::pipeline` (and answers the pages, the OpenAPI
//! document and the assets `edge::routes` names), and decides nothing:
//! `request` reads a request's head and body, `objects` calls the
//! product objects, the catalog and the rate limiters, `verify` has
//! WebCrypto verify a provider's token signature, `admin` serves the
//! product list, the drift, the orders and the history, and `respond` builds the
//! answers that are not JSON replies.

mod admin;
mod objects;
pub mod request;
mod respond;
mod verify;

use std::cell::RefCell;

use worker::worker_sys::web_sys;
use worker::{event, Context, Env};

use crate::edge::cache::EdgeCache;
use crate::edge::catalog::CatalogView;
use crate::edge::page::Lang;
use crate::edge::pipeline::{Head, Input, Pipeline, Step};
use crate::edge::routes::{self, Route};
use crate::http::problem::Problem;
use crate::wasm::edge::request::{Field, Parts};
use crate::wasm::{config, http, now_ms, random_bytes, rpc};

thread_local! {
    // An isolate is single-threaded: requests interleave only at awaits,
    // and no borrow of these cells spans one.
    static EDGE: RefCell<EdgeCache> = RefCell::new(EdgeCache::default());
    /// Which product ids exist, as read from the catalog.
    static CATALOG: RefCell<CatalogView> = RefCell::new(CatalogView::default());
}

/// `unavailable`, with a jittered `Retry-After`, so a crowd that was
/// refused together does not come back together.
fn unavailable() -> Problem {
    Problem::unavailable(worker::js_sys::Math::random())
}

#[event(fetch)]
// The runtime's request as it is: workers-rs' `Request` would read its
// method, url, headers and `cf` into wasm up front, which most answers here
// never need.
async fn fetch(
    req: web_sys::Request,
    env: Env,
    _ctx: Context,
) -> worker::Result<web_sys::Response> {
    match handle(req, &env).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            worker::console_error!("flashgate edge: {e}");
            http::problem(Problem::internal())
        }
    }
}

/// The pipeline's view of a request's head.
fn head(parts: &Parts) -> Head<'_> {
    Head {
        method: &parts.method,
        url: &parts.url,
        connecting_ip: parts.get(Field::ConnectingIp),
        content_type: parts.get(Field::ContentType),
        idempotency_key: parts.get(Field::IdempotencyKey),
        authorization: parts.get(Field::Authorization),
        cookie: parts.get(Field::Cookie),
        ticket: parts.get(Field::Ticket),
        pow: parts.get(Field::Pow),
        key_id: parts.get(Field::KeyId),
        timestamp: parts.get(Field::Timestamp),
        signature: parts.get(Field::Signature),
        upgrade: parts.get(Field::Upgrade),
    }
}

async fn handle(req: web_sys::Request, env: &Env) -> worker::Result<web_sys::Response> {
    let parts = Parts::read(&req);
    let path_and_query = routes::path_and_query(&parts.url);
    let route = match routes::route(&parts.method, routes::path(path_and_query)) {
        Ok(Route::Page(page)) => {
            let payment_url = env
                .var("DEMO_PAYMENT_URL")
                .map(|v| v.to_string())
                .unwrap_or_default();
            let lang = Lang::from_accept_language(parts.get(Field::AcceptLanguage));
            return respond::page(&page, lang, &payment_url);
        }
        Ok(Route::OpenApi) => return respond::openapi(),
        Ok(Route::Asset(asset)) => return respond::asset(asset),
        Ok(route) => route,
        Err(p) => return http::problem(p),
    };
    let settings = match config::settings(env) {
        Ok(s) => s,
        // `config::settings` logged which setting, once.
        Err(_) => return http::problem(Problem::misconfigured()),
    };
    let mut pipeline = Pipeline::new(&settings, head(&parts), route);
    // The last answer of an object or the catalog, for `Step::PassOn`.
    let mut held: Option<web_sys::Response> = None;
    let mut input = Input::Start;
    // The body, when it was read with the client's limit.
    let mut read: Option<Result<Vec<u8>, Problem>> = None;
    loop {
        let step = EDGE.with_borrow_mut(|c| pipeline.next(input, now_ms(), c));
        input = match step {
            Step::Limit {
                limiter,
                key,
                then_body,
            } => {
                let with = (then_body && request::one_piece(&parts)).then_some(&req);
                let (answer, body) = objects::limit(env, limiter, &key, with).await?;
                read = body;
                Input::Limit(answer)
            }
            Step::ReadBody => Input::Body(match read.take() {
                Some(body) => body,
                // The request is kept (a reference, not a copy): the
                // history route reads its `Accept`, which no other route
                // needs.
                None => request::read_body(Clone::clone(&req), &parts).await?,
            }),
            Step::VerifyToken(v) => Input::Verified(verify::verify(&v).await),
            Step::Listed { product_id } => Input::Listed(objects::listed(env, &product_id).await),
            Step::Register { product_id } => {
                let (registration, answer) = objects::register(env, &product_id).await?;
                held = answer;
                Input::Registered(registration)
            }
            Step::Snapshot { product_id } => {
                Input::Snapshot(objects::lookup(env, &product_id).await)
            }
            Step::Random => Input::Random(random_bytes()),
            Step::Forward(target) => match rpc::send(env, &target.object, &target.command).await {
                Ok(resp) => {
                    let status = resp.status();
                    held = Some(resp);
                    Input::Forwarded(Some(status))
                }
                Err(e) => {
                    worker::console_error!(
                        "flashgate edge: product {} unreachable: {e}",
                        target.object
                    );
                    Input::Forwarded(None)
                }
            },
            Step::PassOn => {
                return match held {
                    Some(resp) => Ok(resp),
                    None => http::problem(Problem::internal()),
                }
            }
            Step::Product(body) => return respond::product(&body),
            Step::Answer(reply) => return http::respond(&reply),
            Step::Refuse(p) => return http::problem(p),
            Step::Unavailable => return http::problem(unavailable()),
            Step::Session { secure } => return respond::session(&settings, secure),
            Step::List { all } => return admin::list_products(env, all).await,
            Step::Drift {
                product_id,
                command,
            } => return admin::drift_check(env, &settings, &product_id, &command).await,
            Step::Orders { product_id, query } => {
                return admin::orders_page(&settings, &product_id, query).await
            }
            Step::History { product_id } => {
                let accept = req.headers().get("accept").ok().flatten();
                return admin::history(env, &settings, &product_id, accept.as_deref()).await;
            }
        };
    }
}
