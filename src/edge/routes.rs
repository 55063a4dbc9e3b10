//! The public HTTP API at the edge: the route table, routing, and the
//! validation of a request into a `Command`.
//!
//! This module is pure (no `worker` types), so it is tested natively. The
//! Worker hands it the method, path, the few headers it reads and the body;
//! it returns either a `Command` for the product's Durable Object or the
//! `Problem` to answer with. The Durable Object never sees malformed input.
//! `ROUTES` is the only list of the gate's routes: the router walks it, and a
//! test checks it against `openapi.yaml`.

use flashgate_core::limits;
use flashgate_wire::bounds;
use flashgate_wire::signing::Presented;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::edge::{assets, auth};
use crate::http::problem::Problem;
use crate::limits::BODY_BYTES_MAX;
use crate::protocol::Command;
use crate::settings::Settings;

/// What a route does, before its path parameters are filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    Page,
    ProductPage,
    AdminPage,
    ListProducts,
    AdminListProducts,
    Live,
    AdminDrift,
    AdminOrders,
    AdminHistory,
    OpenApi,
    Session,
    GetProduct,
    Reserve,
    GetReservation,
    Confirm,
    Cancel,
    AdminConfigure,
    AdminStats,
    AdminRestock,
    AdminVoid,
    JoinQueue,
    QueueStatus,
    QueueRecord,
    QueueChallenge,
    Asset,
}

/// Every route of the gate: method, path template, and what it does. Path
/// parameters are `{product_id}` and `{reservation_id}`.
pub const ROUTES: &[(&str, &str, RouteKind)] = &[
    ("GET", "/", RouteKind::Page),
    ("GET", "/index.html", RouteKind::Page),
    ("GET", "/p/{product_id}", RouteKind::ProductPage),
    ("GET", "/admin", RouteKind::AdminPage),
    ("GET", "/openapi.json", RouteKind::OpenApi),
    ("GET", assets::ALTCHA_JS, RouteKind::Asset),
    ("GET", assets::ALTCHA_WORKER, RouteKind::Asset),
    ("GET", assets::ALTCHA_CSS, RouteKind::Asset),
    ("GET", assets::ALTCHA_ZH, RouteKind::Asset),
    ("POST", "/api/session", RouteKind::Session),
    ("GET", "/api/products", RouteKind::ListProducts),
    ("GET", "/api/products/{product_id}", RouteKind::GetProduct),
    ("GET", "/api/products/{product_id}/live", RouteKind::Live),
    ("GET", "/admin/products", RouteKind::AdminListProducts),
    (
        "POST",
        "/api/products/{product_id}/queue",
        RouteKind::JoinQueue,
    ),
    (
        "GET",
        "/api/products/{product_id}/queue",
        RouteKind::QueueStatus,
    ),
    (
        "GET",
        "/api/products/{product_id}/queue/record",
        RouteKind::QueueRecord,
    ),
    (
        "GET",
        "/api/products/{product_id}/queue/challenge",
        RouteKind::QueueChallenge,
    ),
    (
        "POST",
        "/api/products/{product_id}/reservations",
        RouteKind::Reserve,
    ),
    (
        "GET",
        "/api/products/{product_id}/reservations/{reservation_id}",
        RouteKind::GetReservation,
    ),
    (
        "POST",
        "/api/products/{product_id}/reservations/{reservation_id}/confirm",
        RouteKind::Confirm,
    ),
    (
        "POST",
        "/api/products/{product_id}/reservations/{reservation_id}/cancel",
        RouteKind::Cancel,
    ),
    (
        "PUT",
        "/admin/products/{product_id}",
        RouteKind::AdminConfigure,
    ),
    (
        "POST",
        "/admin/products/{product_id}/restock",
        RouteKind::AdminRestock,
    ),
    (
        "GET",
        "/admin/products/{product_id}/stats",
        RouteKind::AdminStats,
    ),
    (
        "GET",
        "/admin/products/{product_id}/drift",
        RouteKind::AdminDrift,
    ),
    (
        "GET",
        "/admin/products/{product_id}/orders",
        RouteKind::AdminOrders,
    ),
    (
        "GET",
        "/admin/products/{product_id}/history",
        RouteKind::AdminHistory,
    ),
    (
        "POST",
        "/admin/products/{product_id}/reservations/{reservation_id}/void",
        RouteKind::AdminVoid,
    ),
];

/// Where a request goes, decided from the method and path alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A page, served by the Worker itself.
    Page(Page),
    /// The products on sale or scheduled, read through the edge cache.
    ListProducts,
    /// Every product the catalog lists, whatever its state, for the admin
    /// console: the shell checks the admin token first.
    AdminListProducts,
    /// A live-update socket on a product (WebSocket upgrade), accepted by
    /// its object.
    Live { product_id: String },
    /// The OpenAPI document, served by the Worker itself.
    OpenApi,
    /// A dev session (an anonymous buyer token), minted by the Worker.
    Session,
    /// The product's waiting room, answered by the edge: joining (a ticket
    /// is issued) or polling a ticket's standing.
    Queue { product_id: String, join: bool },
    /// The waiting room's admission record and the lottery, with the
    /// ticket's own place, answered by the edge (`room::record`).
    QueueRecord { product_id: String },
    /// A proof-of-work challenge for the buyer's join, answered by the
    /// edge (`edge::pow`).
    QueueChallenge { product_id: String },
    /// A file served as it is (`edge::assets`).
    Asset(&'static assets::Asset),
    /// A request for a product's Durable Object.
    Api(ApiRoute),
}

/// The pages the Worker serves (`page`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Page {
    /// `/`: the products open or scheduled.
    List,
    /// `/p/{id}`: one product, where a buyer buys.
    Product(String),
    /// `/admin`: the admin console.
    Admin,
}

/// A route that a product's Durable Object answers. Reservation ids are as
/// buyers see them (opaque, checked for form); `parse` decodes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRoute {
    GetProduct(String),
    Reserve(String),
    GetReservation(String, String),
    Confirm(String, String),
    Cancel(String, String),
    AdminConfigure(String),
    AdminStats(String),
    /// The gate's stats beside the origin's totals: the edge asks the
    /// object for its stats, then the origin.
    AdminDrift(String),
    /// A page of the product's orders at the origin, read with the gate's
    /// read token (as the drift is), so that the console needs no token of
    /// the origin's and the origin no CORS.
    AdminOrders(String),
    /// The product's history, read from home and its stock shards and
    /// merged by the edge (`edge::admin::history_body`).
    AdminHistory(String),
    AdminRestock(String),
    AdminVoid(String, String),
}

impl ApiRoute {
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            ApiRoute::AdminConfigure(_)
                | ApiRoute::AdminStats(_)
                | ApiRoute::AdminDrift(_)
                | ApiRoute::AdminOrders(_)
                | ApiRoute::AdminHistory(_)
                | ApiRoute::AdminRestock(_)
                | ApiRoute::AdminVoid(..)
        )
    }

    /// Whether the route acts as a buyer, proven by a buyer token.
    pub fn needs_buyer(&self) -> bool {
        matches!(
            self,
            ApiRoute::Reserve(_) | ApiRoute::GetReservation(..) | ApiRoute::Cancel(..)
        )
    }

    pub fn product_id(&self) -> &str {
        match self {
            ApiRoute::GetProduct(p)
            | ApiRoute::Reserve(p)
            | ApiRoute::GetReservation(p, _)
            | ApiRoute::Confirm(p, _)
            | ApiRoute::Cancel(p, _)
            | ApiRoute::AdminConfigure(p)
            | ApiRoute::AdminStats(p)
            | ApiRoute::AdminDrift(p)
            | ApiRoute::AdminOrders(p)
            | ApiRoute::AdminHistory(p)
            | ApiRoute::AdminRestock(p)
            | ApiRoute::AdminVoid(p, _) => p,
        }
    }
}

/// The parts of a request the edge reads.
pub struct Incoming<'a> {
    pub method: &'a str,
    /// The path and query as sent, which a payment signature covers.
    pub path_and_query: &'a str,
    pub content_type: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub authorization: Option<&'a str>,
    /// The buyer token of the session cookie (`auth::buyer_cookie`).
    pub cookie: Option<&'a str>,
    /// A waiting-room ticket (`Flashgate-Ticket`).
    pub ticket: Option<&'a str>,
    /// The signature headers of a payment confirmation.
    pub signature: Presented<'a>,
    pub body: &'a [u8],
}

/// The path of a request target (`path_and_query`'s result): no query.
pub fn path(path_and_query: &str) -> &str {
    path_and_query.split('?').next().unwrap_or(path_and_query)
}

/// The path and query of a request's URL as the runtime serialised it
/// (WHATWG), which a payment signature covers. Read from the string, not
/// parsed with the `url` crate: that crate and its IDNA tables would add a
/// third to the Worker's wasm, which is cold-start time. A serialised URL
/// of a special scheme always has a path, starting at the first `/` after
/// the host; a fragment is never sent.
pub fn path_and_query(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let target = url[after_scheme..]
        .find('/')
        .map_or("/", |i| &url[after_scheme + i..]);
    target.split('#').next().unwrap_or(target)
}

/// The Idempotency-Key header is a Structured Field string
/// (draft-ietf-httpapi-idempotency-key-header), so it arrives quoted. Bare
/// tokens are accepted too, as many clients send them. The key is 1 to 64
/// visible ASCII characters, without quotes or backslashes.
pub fn parse_idempotency_key(raw: &str) -> Result<String, Problem> {
    let raw = raw.trim();
    let inner = match raw.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(Problem::idempotency_key_invalid)?,
        None => raw,
    };
    let ok = !inner.is_empty()
        && inner.len() <= limits::IDEM_KEY_BYTES_MAX
        && inner
            .bytes()
            .all(|c| (0x21..=0x7e).contains(&c) && c != b'"' && c != b'\\');
    if ok {
        Ok(inner.to_string())
    } else {
        Err(Problem::idempotency_key_invalid())
    }
}

/// The path parameters of one template match.
#[derive(Default)]
struct Params<'a> {
    product_id: Option<&'a str>,
    reservation_id: Option<&'a str>,
}

/// Matches `path` against `template`, segment by segment.
fn match_template<'a>(template: &str, path: &'a str) -> Option<Params<'a>> {
    let mut params = Params::default();
    let mut segments = path.split('/');
    for want in template.split('/') {
        let got = segments.next()?;
        match want {
            "{product_id}" => params.product_id = Some(got),
            "{reservation_id}" => params.reservation_id = Some(got),
            literal if literal == got => {}
            _ => return None,
        }
    }
    segments.next().is_none().then_some(params)
}

/// Routes by method and path. Unknown paths are 404, known paths with the
/// wrong method 405 (with `Allow`), and malformed ids 400 (product) or 404
/// (reservation).
pub fn route(method: &str, path: &str) -> Result<Route, Problem> {
    // A trailing slash names the same resource, except for the root.
    let path = match path.strip_suffix('/') {
        Some(p) if !p.is_empty() => p,
        _ => path,
    };
    let mut allowed: Vec<&str> = Vec::new();
    let mut found = None;
    for &(m, template, kind) in ROUTES {
        if let Some(params) = match_template(template, path) {
            if m == method {
                found = Some((kind, params));
                break;
            }
            allowed.push(m);
        }
    }
    let Some((kind, params)) = found else {
        return Err(if allowed.is_empty() {
            Problem::not_found(format!("no route for {path}"))
        } else {
            Problem::method_not_allowed(allowed.join(", "))
        });
    };
    let product = || -> Result<String, Problem> {
        match params.product_id {
            Some(id) if bounds::valid_product_id(id) => Ok(id.to_string()),
            _ => Err(Problem::invalid_product_id()),
        }
    };
    // A reservation id of the wrong form names no reservation.
    let reservation = || -> Result<String, Problem> {
        params
            .reservation_id
            .filter(|id| bounds::valid_reservation_id(id))
            .map(str::to_string)
            .ok_or_else(Problem::invalid_reservation_id)
    };
    Ok(match kind {
        RouteKind::Page => Route::Page(Page::List),
        RouteKind::ProductPage => Route::Page(Page::Product(product()?)),
        RouteKind::AdminPage => Route::Page(Page::Admin),
        RouteKind::ListProducts => Route::ListProducts,
        RouteKind::AdminListProducts => Route::AdminListProducts,
        RouteKind::Live => Route::Live {
            product_id: product()?,
        },
        RouteKind::AdminDrift => Route::Api(ApiRoute::AdminDrift(product()?)),
        RouteKind::AdminOrders => Route::Api(ApiRoute::AdminOrders(product()?)),
        RouteKind::AdminHistory => Route::Api(ApiRoute::AdminHistory(product()?)),
        RouteKind::OpenApi => Route::OpenApi,
        RouteKind::Session => Route::Session,
        RouteKind::JoinQueue => Route::Queue {
            product_id: product()?,
            join: true,
        },
        RouteKind::QueueStatus => Route::Queue {
            product_id: product()?,
            join: false,
        },
        RouteKind::QueueRecord => Route::QueueRecord {
            product_id: product()?,
        },
        RouteKind::QueueChallenge => Route::QueueChallenge {
            product_id: product()?,
        },
        RouteKind::Asset => match assets::asset(path) {
            Some(a) => Route::Asset(a),
            None => return Err(Problem::not_found(format!("no route for {path}"))),
        },
        RouteKind::GetProduct => Route::Api(ApiRoute::GetProduct(product()?)),
        RouteKind::Reserve => Route::Api(ApiRoute::Reserve(product()?)),
        RouteKind::GetReservation => {
            Route::Api(ApiRoute::GetReservation(product()?, reservation()?))
        }
        RouteKind::Confirm => Route::Api(ApiRoute::Confirm(product()?, reservation()?)),
        RouteKind::Cancel => Route::Api(ApiRoute::Cancel(product()?, reservation()?)),
        RouteKind::AdminConfigure => Route::Api(ApiRoute::AdminConfigure(product()?)),
        RouteKind::AdminStats => Route::Api(ApiRoute::AdminStats(product()?)),
        RouteKind::AdminRestock => Route::Api(ApiRoute::AdminRestock(product()?)),
        RouteKind::AdminVoid => Route::Api(ApiRoute::AdminVoid(product()?, reservation()?)),
    })
}

/// The body as `T`: a JSON object (syntax errors are 400 `malformed_json`;
/// any other shape, an unknown member or a wrong type is 422
/// `invalid_body`, with serde's message naming the member).
fn json_body<T: DeserializeOwned>(inc: &Incoming, what: &str) -> Result<T, Problem> {
    let ct = inc.content_type.unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(Problem::unsupported_media_type());
    }
    let value: Value = serde_json::from_slice(inc.body)
        .map_err(|e| Problem::malformed_json(format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(Problem::invalid_body(format!(
            "the body of {what} must be a JSON object"
        )));
    }
    serde_json::from_value(value).map_err(|e| Problem::invalid_body(e.to_string()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReserveBody {
    /// A `Value`, not a `u32`, so that a number out of range (an invalid
    /// quantity) is told apart from a string (an invalid body).
    quantity: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfirmBody {
    buyer_id: Option<Value>,
    payment_ref: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestockBody {
    units: Option<Value>,
}

/// A page of orders asked for: after which origin cursor, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrdersQuery {
    pub after: Option<u64>,
    pub limit: usize,
}

/// The query of `GET /admin/products/{id}/orders`: `after` (a cursor the
/// last page gave as `next_after`) and `limit` (1 to
/// `ADMIN_ORDERS_PAGE_MAX`, `ADMIN_ORDERS_PAGE_DEFAULT` when absent). Any
/// other member, a repeated one or a value that is not a plain integer is
/// 400 `invalid_query`: it is copied into the origin's URL, so it must be
/// digits and nothing else.
pub fn orders_query(path_and_query: &str) -> Result<OrdersQuery, Problem> {
    use crate::limits::{ADMIN_ORDERS_PAGE_DEFAULT, ADMIN_ORDERS_PAGE_MAX};
    let mut q = OrdersQuery {
        after: None,
        limit: ADMIN_ORDERS_PAGE_DEFAULT,
    };
    let (mut seen_after, mut seen_limit) = (false, false);
    let bad = || {
        Problem::invalid_query(format!(
            "the query takes after (a cursor) and limit (1 to {ADMIN_ORDERS_PAGE_MAX}), each once, as digits"
        ))
    };
    let number = |v: &str| -> Option<u64> {
        (!v.is_empty() && v.len() <= 15 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse().ok())
            .flatten()
    };
    let query = path_and_query.split_once('?').map_or("", |(_, q)| q);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "after" if !seen_after => {
                seen_after = true;
                q.after = Some(number(v).ok_or_else(bad)?);
            }
            "limit" if !seen_limit => {
                seen_limit = true;
                let n = number(v).ok_or_else(bad)?;
                if !(1..=ADMIN_ORDERS_PAGE_MAX as u64).contains(&n) {
                    return Err(bad());
                }
                q.limit = n as usize;
            }
            _ => return Err(bad()),
        }
    }
    Ok(q)
}

/// Validates a routed request into a command: who sent it (a buyer token,
/// a payment signature, or the admin token, per route; see `auth`), and
/// what it asks. Reservation ids are decoded from their opaque form. The
/// edge runs it in its steps (`edge::pipeline`): `precheck`, the buyer's
/// proof, then `parse_proven`.
#[cfg(test)]
pub fn parse(
    inc: &Incoming,
    route: ApiRoute,
    settings: &Settings,
    now_ms: u64,
) -> Result<Command, Problem> {
    precheck(inc, &route, settings)?;
    let buyer = match route.needs_buyer() {
        true => Some(auth::buyer(
            settings,
            inc.authorization,
            inc.cookie,
            now_ms,
        )?),
        false => None,
    };
    parse_proven(inc, route, settings, buyer, now_ms)
}

/// What refuses a request before its buyer is proven: a body over the
/// limit, and on an admin route a token that is not the admin's.
pub fn precheck(inc: &Incoming, route: &ApiRoute, settings: &Settings) -> Result<(), Problem> {
    if inc.body.len() > BODY_BYTES_MAX {
        return Err(Problem::body_too_large(BODY_BYTES_MAX));
    }
    if route.is_admin() {
        auth::admin(settings, inc.authorization)?;
    }
    Ok(())
}

/// `parse` after `precheck`, with the buyer its token proved when the route
/// needs one (`ApiRoute::needs_buyer`).
pub fn parse_proven(
    inc: &Incoming,
    route: ApiRoute,
    settings: &Settings,
    buyer: Option<String>,
    now_ms: u64,
) -> Result<Command, Problem> {
    // A route that needs a buyer is given one; without it, nothing is
    // decided.
    let buyer = move || buyer.ok_or_else(Problem::internal);
    // Decodes after the id's form was checked by `route`; a decoded id the
    // product never issued reads as unknown there.
    let internal = |product_id: &str, rid: &str| -> Result<u64, Problem> {
        settings
            .reservation_ids
            .of(product_id)
            .decode(rid)
            .ok_or_else(Problem::invalid_reservation_id)
    };
    Ok(match route {
        ApiRoute::GetProduct(product_id) => Command::GetProduct { product_id },
        ApiRoute::Reserve(product_id) => {
            let buyer = buyer()?;
            let idem_key = match inc.idempotency_key {
                None => return Err(Problem::idempotency_key_missing()),
                Some(raw) => parse_idempotency_key(raw)?,
            };
            let body: ReserveBody = json_body(inc, "a reserve")?;
            let q = body
                .quantity
                .ok_or_else(|| Problem::invalid_body("quantity is required"))?;
            let quantity = match q.as_u64() {
                Some(n) if (1..=u64::from(limits::QUANTITY_MAX_MAX)).contains(&n) => n as u32,
                _ if q.is_number() => {
                    return Err(Problem::invalid_quantity(format!(
                        "quantity must be an integer from 1 to {}",
                        limits::QUANTITY_MAX_MAX
                    )))
                }
                _ => return Err(Problem::invalid_body("quantity must be a number")),
            };
            // A ticket, if sent, must be this gate's, for this product and
            // buyer, and unexpired; the object then checks its turn.
            let ticket = match inc.ticket {
                None => None,
                Some(text) => Some(
                    settings
                        .ticket_key
                        .verify(text, &product_id, &buyer, now_ms)
                        .map_err(|e| e.problem())?
                        .ticket(),
                ),
            };
            Command::Reserve {
                product_id,
                buyer,
                idem_key,
                quantity,
                ticket,
            }
        }
        ApiRoute::GetReservation(product_id, rid) => Command::GetReservation {
            buyer: buyer()?,
            reservation_id: internal(&product_id, &rid)?,
            product_id,
        },
        ApiRoute::Confirm(product_id, rid) => {
            // Only the shop's payment backend confirms: the request must be
            // signed with a payment key, over this method, path and body.
            auth::payment(
                settings,
                &inc.signature,
                inc.method,
                inc.path_and_query,
                inc.body,
                now_ms,
            )?;
            let body: ConfirmBody = json_body(inc, "a confirm")?;
            let buyer = match body.buyer_id {
                Some(Value::String(b)) if bounds::valid_buyer_id(&b) => b,
                _ => {
                    return Err(Problem::invalid_body(format!(
                        "buyer_id must be the buyer's id, 1 to {} of A-Z a-z 0-9 _ - .",
                        bounds::BUYER_ID_BYTES_MAX
                    )))
                }
            };
            let payment_ref = match body.payment_ref {
                Some(Value::String(s)) if bounds::valid_payment_ref(&s) => s,
                _ => {
                    return Err(Problem::invalid_body(format!(
                        "payment_ref must be a string of 1 to {} bytes without control characters",
                        bounds::PAYMENT_REF_BYTES_MAX
                    )))
                }
            };
            Command::Confirm {
                reservation_id: internal(&product_id, &rid)?,
                product_id,
                buyer,
                payment_ref,
            }
        }
        ApiRoute::Cancel(product_id, rid) => Command::Cancel {
            buyer: buyer()?,
            reservation_id: internal(&product_id, &rid)?,
            product_id,
        },
        ApiRoute::AdminConfigure(product_id) => Command::Configure {
            product_id,
            patch: json_body(inc, "a product update")?,
        },
        ApiRoute::AdminRestock(product_id) => {
            let body: RestockBody = json_body(inc, "a restock")?;
            let units = body
                .units
                .ok_or_else(|| Problem::invalid_body("units is required"))?;
            match units.as_u64() {
                Some(units) if (1..=limits::STOCK_UNITS_MAX).contains(&units) => {
                    Command::Restock { product_id, units }
                }
                _ => {
                    return Err(Problem::invalid_body(format!(
                        "units must be an integer from 1 to {}",
                        limits::STOCK_UNITS_MAX
                    )))
                }
            }
        }
        // The orders are the origin's, read by the shell; the command only
        // carries the admin's proven request to the product's existence check.
        ApiRoute::AdminStats(product_id)
        | ApiRoute::AdminDrift(product_id)
        | ApiRoute::AdminOrders(product_id) => Command::Stats { product_id },
        ApiRoute::AdminHistory(product_id) => Command::History { product_id },
        ApiRoute::AdminVoid(product_id, rid) => Command::Void {
            reservation_id: internal(&product_id, &rid)?,
            product_id,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codes::ProblemCode;
    use crate::settings::tests::{settings, ADMIN_TOKEN, PAYMENT_KEYS};
    use flashgate_wire::keys::KeySet;
    use flashgate_wire::signing::{self, Purpose};

    const NOW: u64 = 1_800_000_000_000;

    struct Req {
        method: &'static str,
        path: String,
        content_type: Option<&'static str>,
        idempotency_key: Option<String>,
        authorization: Option<String>,
        cookie: Option<String>,
        ticket: Option<String>,
        signed: Option<signing::Signed>,
        body: Vec<u8>,
    }

    fn buyer_token(buyer: &str) -> String {
        let s = settings();
        let claims = flashgate_wire::token::Claims {
            sub: buyer.into(),
            aud: s.buyer_tokens.audience().into(),
            iat: NOW / 1000,
            exp: NOW / 1000 + 600,
            nbf: None,
        };
        flashgate_wire::token::mint(s.buyer_tokens.hs256(), &claims, NOW)
    }

    fn req(method: &'static str, path: &str, body: &[u8]) -> Req {
        Req {
            method,
            path: path.into(),
            content_type: Some("application/json"),
            idempotency_key: Some("\"k-1\"".into()),
            authorization: Some(format!("Bearer {}", buyer_token("alice"))),
            cookie: None,
            ticket: None,
            signed: None,
            body: body.to_vec(),
        }
    }

    fn admin(method: &'static str, path: &str, body: &[u8]) -> Req {
        Req {
            authorization: Some(format!("Bearer {ADMIN_TOKEN}")),
            ..req(method, path, body)
        }
    }

    fn rid(n: u64) -> String {
        crate::ids::IdCodec::new(&settings().id_secret, "p1").encode(n)
    }

    /// A confirm signed as the shop's payment backend signs it.
    fn confirm(n: u64, body: &[u8], keys: &str, path: Option<&str>) -> Req {
        let path_signed = path
            .map(str::to_string)
            .unwrap_or_else(|| format!("/api/products/p1/reservations/{}/confirm", rid(n)));
        let signed = signing::sign(
            &KeySet::parse(keys).unwrap(),
            &signing::Request {
                purpose: Purpose::Payment,
                method: "POST",
                path: &path_signed,
                body,
            },
            NOW,
        );
        Req {
            authorization: None,
            signed: Some(signed),
            ..req(
                "POST",
                &format!("/api/products/p1/reservations/{}/confirm", rid(n)),
                body,
            )
        }
    }

    fn run(r: &Req) -> Result<Command, Problem> {
        let s = settings();
        let ts = r.signed.as_ref().map(|s| s.timestamp_ms.to_string());
        let inc = Incoming {
            method: r.method,
            path_and_query: &r.path,
            content_type: r.content_type,
            idempotency_key: r.idempotency_key.as_deref(),
            authorization: r.authorization.as_deref(),
            cookie: r.cookie.as_deref(),
            ticket: r.ticket.as_deref(),
            signature: Presented {
                kid: r.signed.as_ref().map(|s| s.kid.as_str()),
                timestamp: ts.as_deref(),
                signature: r.signed.as_ref().map(|s| s.signature.as_str()),
            },
            body: &r.body,
        };
        match route(r.method, &r.path)? {
            Route::Api(api) => parse(&inc, api, &s, NOW),
            other => panic!("{} {} is {other:?}", r.method, r.path),
        }
    }

    fn code(r: &Req) -> ProblemCode {
        run(r).unwrap_err().code
    }

    #[test]
    fn the_signed_target_is_the_path_and_query() {
        assert_eq!(
            path_and_query("https://gate.example/api/x?a=1"),
            "/api/x?a=1"
        );
        assert_eq!(path_and_query("http://127.0.0.1:8787/"), "/");
        assert_eq!(path_and_query("http://127.0.0.1:8787"), "/");
        assert_eq!(path_and_query("https://h/p%2Fq?x=%23#frag"), "/p%2Fq?x=%23");
        assert_eq!(path_and_query("/only/a/path"), "/only/a/path");
    }

    #[test]
    fn bad_input_table() {
        let long_id = format!("/api/products/{}", "p".repeat(65));
        let big = vec![b' '; BODY_BYTES_MAX + 1];
        let res = "/api/products/p1/reservations";
        let cases: Vec<(Req, ProblemCode)> = vec![
            (req("POST", res, b"{"), ProblemCode::MalformedJson),
            (req("POST", res, b"[1]"), ProblemCode::InvalidBody),
            (
                req("POST", res, b"{\"quantity\":\"2\"}"),
                ProblemCode::InvalidBody,
            ),
            (
                req("POST", res, b"{\"quantity\":-1}"),
                ProblemCode::InvalidQuantity,
            ),
            (
                req("POST", res, b"{\"quantity\":0}"),
                ProblemCode::InvalidQuantity,
            ),
            (
                req("POST", res, b"{\"quantity\":1.5}"),
                ProblemCode::InvalidQuantity,
            ),
            (
                req("POST", res, b"{\"quantity\":1e30}"),
                ProblemCode::InvalidQuantity,
            ),
            (
                req("POST", res, b"{\"quantity\":1,\"x\":1}"),
                ProblemCode::InvalidBody,
            ),
            (req("POST", res, &big), ProblemCode::BodyTooLarge),
            (req("DELETE", res, b""), ProblemCode::MethodNotAllowed),
            (req("GET", "/nope", b""), ProblemCode::NotFound),
            (req("GET", &long_id, b""), ProblemCode::InvalidProductId),
            (
                req("GET", "/api/products/p%201", b""),
                ProblemCode::InvalidProductId,
            ),
            (
                req("GET", &format!("{res}/{}", &rid(1)[..15]), b""),
                ProblemCode::UnknownReservation,
            ),
            (
                req("GET", &format!("{res}/{}", rid(1).to_uppercase()), b""),
                ProblemCode::UnknownReservation,
            ),
            (
                admin("PUT", "/admin/products/p1", b"{\"stock_total\":-5}"),
                ProblemCode::InvalidBody,
            ),
            (
                admin("PUT", "/admin/products/p1", b"{\"mode\":\"open\"}"),
                ProblemCode::InvalidBody,
            ),
            (
                confirm(
                    1,
                    b"{\"buyer_id\":\"alice\",\"payment_ref\":\"\"}",
                    PAYMENT_KEYS,
                    None,
                ),
                ProblemCode::InvalidBody,
            ),
            (
                confirm(1, b"{\"payment_ref\":\"p\"}", PAYMENT_KEYS, None),
                ProblemCode::InvalidBody,
            ),
        ];
        for (r, want) in cases {
            assert_eq!(code(&r), want, "{} {}", r.method, r.path);
        }
    }

    #[test]
    fn every_route_proves_its_caller() {
        let body = b"{\"quantity\":1}";
        let mut r = req("POST", "/api/products/p1/reservations", body);
        r.idempotency_key = None;
        assert_eq!(code(&r), ProblemCode::IdempotencyKeyMissing);
        r.idempotency_key = Some("k".repeat(65));
        assert_eq!(code(&r), ProblemCode::IdempotencyKeyInvalid);
        r.idempotency_key = Some("\"unterminated".into());
        assert_eq!(code(&r), ProblemCode::IdempotencyKeyInvalid);
        r.idempotency_key = Some("bare-token".into());
        assert!(run(&r).is_ok());
        r.authorization = None;
        assert_eq!(code(&r), ProblemCode::TokenMissing);
        r.cookie = Some(buyer_token("bob"));
        let Ok(Command::Reserve { buyer, .. }) = run(&r) else {
            panic!("a cookie carries the token")
        };
        assert_eq!(buyer, "bob");
        r.authorization = Some("Bearer forged".into());
        assert_eq!(code(&r), ProblemCode::TokenInvalid);
        r.authorization = Some(format!("Bearer {}", buyer_token("alice")));
        r.content_type = Some("text/plain");
        assert_eq!(code(&r), ProblemCode::UnsupportedMediaType);
        r.content_type = Some("application/json; charset=utf-8");
        assert!(run(&r).is_ok());

        // Admin routes take the admin token, and nothing else.
        let mut a = admin("GET", "/admin/products/p1/stats", b"");
        assert!(run(&a).is_ok());
        for bad in [
            None,
            Some("Bearer wrong".to_string()),
            Some(format!("Bearer {}", buyer_token("alice"))),
        ] {
            a.authorization = bad;
            assert_eq!(code(&a), ProblemCode::Unauthorized);
        }

        // A confirm takes a payment signature over this method, path and
        // body, and no buyer token.
        let body = b"{\"buyer_id\":\"alice\",\"payment_ref\":\"pay-1\"}";
        let ok = confirm(7, body, PAYMENT_KEYS, None);
        assert_eq!(
            run(&ok).unwrap(),
            Command::Confirm {
                product_id: "p1".into(),
                buyer: "alice".into(),
                reservation_id: 7,
                payment_ref: "pay-1".into()
            }
        );
        let other_key = "p1:another-payment-key-0123456789abcdef";
        let other_path = format!("/api/products/p1/reservations/{}/confirm", rid(8));
        for bad in [
            Req {
                signed: None,
                ..confirm(7, body, PAYMENT_KEYS, None)
            },
            confirm(7, body, other_key, None),
            confirm(7, body, PAYMENT_KEYS, Some(&other_path)),
            Req {
                body: b"{\"buyer_id\":\"alice\",\"payment_ref\":\"pay-2\"}".to_vec(),
                ..confirm(7, body, PAYMENT_KEYS, None)
            },
        ] {
            assert_eq!(code(&bad), ProblemCode::BadSignature);
        }
    }

    #[test]
    fn a_ticket_must_be_the_buyers_own_for_this_product() {
        let key = settings().ticket_key;
        let with = |ticket: String| Req {
            ticket: Some(ticket),
            ..req("POST", "/api/products/p1/reservations", b"{\"quantity\":1}")
        };
        let (own, claims) = key.issue("p1", "alice", &[1; 32], NOW - 1_000, 60_000, false);
        match run(&with(own)).unwrap() {
            Command::Reserve { ticket, .. } => assert_eq!(ticket, Some(claims.ticket())),
            other => panic!("{other:?}"),
        }
        let refused = [
            key.issue("p1", "bob", &[1; 32], NOW - 1_000, 60_000, false)
                .0,
            key.issue("p2", "alice", &[1; 32], NOW - 1_000, 60_000, false)
                .0,
            key.issue("p1", "alice", &[1; 32], NOW - 70_000, 60_000, false)
                .0,
            crate::edge::ticket::TicketKey::new(b"another-secret-of-thirty-two-byte")
                .issue("p1", "alice", &[1; 32], NOW - 1_000, 60_000, false)
                .0,
            "v1.e30.AAAA".into(),
        ];
        for t in refused {
            let p = run(&with(t.clone())).unwrap_err();
            assert_eq!(p.code, ProblemCode::TicketInvalid, "{t}");
        }
    }

    #[test]
    fn good_requests_become_commands() {
        let i = req("POST", "/api/products/p1/reservations", b"{\"quantity\":2}");
        assert_eq!(
            run(&i).unwrap(),
            Command::Reserve {
                product_id: "p1".into(),
                buyer: "alice".into(),
                idem_key: "k-1".into(),
                quantity: 2,
                ticket: None,
            }
        );
        let i = admin(
            "PUT",
            "/admin/products/p1",
            b"{\"stock_total\":100,\"opens_at_ms\":null,\"hold_ttl_ms\":2000}",
        );
        let cmd = run(&i).unwrap();
        let Command::Configure { patch, .. } = &cmd else {
            panic!("not an upsert: {cmd:?}")
        };
        assert_eq!(patch.stock_total, Some(100));
        assert_eq!(patch.opens_at_ms, Some(None));
        assert_eq!(patch.closes_at_ms, None);
        assert_eq!(patch.hold_ttl_ms, Some(2000));
        // The Worker sends the command to the Durable Object as JSON; a
        // cleared window must survive the trip as a clear, not as
        // "unchanged".
        let trip: Command = serde_json::from_str(&serde_json::to_string(&cmd).unwrap()).unwrap();
        assert_eq!(trip, cmd);
        let v = admin(
            "POST",
            &format!("/admin/products/p1/reservations/{}/void", rid(3)),
            b"",
        );
        assert_eq!(
            run(&v).unwrap(),
            Command::Void {
                product_id: "p1".into(),
                reservation_id: 3
            }
        );
    }

    #[test]
    fn routes_are_matched_from_the_table() {
        assert_eq!(route("GET", "/"), Ok(Route::Page(Page::List)));
        assert_eq!(route("GET", "/admin"), Ok(Route::Page(Page::Admin)));
        assert_eq!(
            route("GET", "/p/demo"),
            Ok(Route::Page(Page::Product("demo".into())))
        );
        assert_eq!(
            route("GET", "/p/no%20such").unwrap_err().code,
            ProblemCode::InvalidProductId
        );
        assert_eq!(route("GET", "/openapi.json"), Ok(Route::OpenApi));
        assert_eq!(route("POST", "/api/session"), Ok(Route::Session));
        let id = "00112233aabbccdd";
        assert_eq!(
            route("GET", &format!("/api/products/p1/reservations/{id}/")),
            Ok(Route::Api(ApiRoute::GetReservation("p1".into(), id.into())))
        );
        let p = route(
            "PUT",
            &format!("/api/products/p1/reservations/{id}/confirm"),
        )
        .unwrap_err();
        assert_eq!(p.code, ProblemCode::MethodNotAllowed);
        assert_eq!(p.header_value("allow"), Some("POST"));
        assert_eq!(
            route("GET", "/api/products/p1/extra").unwrap_err().code,
            ProblemCode::NotFound
        );
        for id in [
            "0",
            "1",
            "0011223344556677x",
            "00112233AABBCCDD",
            "-011223344556677",
        ] {
            let path = format!("/api/products/p1/reservations/{id}");
            assert_eq!(
                route("GET", &path).unwrap_err().code,
                ProblemCode::UnknownReservation,
                "{id}"
            );
        }
        // Every template in the table routes to its own kind.
        for &(method, template, kind) in ROUTES {
            let path = template
                .replace("{product_id}", "p1")
                .replace("{reservation_id}", id);
            let got = route(method, &path).unwrap();
            let same = match (&got, kind) {
                (Route::Page(Page::List), RouteKind::Page)
                | (Route::Page(Page::Product(_)), RouteKind::ProductPage)
                | (Route::Page(Page::Admin), RouteKind::AdminPage)
                | (Route::ListProducts, RouteKind::ListProducts)
                | (Route::AdminListProducts, RouteKind::AdminListProducts)
                | (Route::Live { .. }, RouteKind::Live)
                | (Route::OpenApi, RouteKind::OpenApi)
                | (Route::Session, RouteKind::Session) => true,
                (Route::Queue { join: true, .. }, RouteKind::JoinQueue)
                | (Route::Queue { join: false, .. }, RouteKind::QueueStatus)
                | (Route::QueueRecord { .. }, RouteKind::QueueRecord)
                | (Route::QueueChallenge { .. }, RouteKind::QueueChallenge)
                | (Route::Asset(_), RouteKind::Asset) => true,
                (Route::Api(a), k) => api_kind(a) == k,
                _ => false,
            };
            assert!(same, "{method} {template} routed to {got:?}");
        }
    }

    fn api_kind(a: &ApiRoute) -> RouteKind {
        match a {
            ApiRoute::GetProduct(_) => RouteKind::GetProduct,
            ApiRoute::Reserve(_) => RouteKind::Reserve,
            ApiRoute::GetReservation(..) => RouteKind::GetReservation,
            ApiRoute::Confirm(..) => RouteKind::Confirm,
            ApiRoute::Cancel(..) => RouteKind::Cancel,
            ApiRoute::AdminConfigure(_) => RouteKind::AdminConfigure,
            ApiRoute::AdminStats(_) => RouteKind::AdminStats,
            ApiRoute::AdminDrift(_) => RouteKind::AdminDrift,
            ApiRoute::AdminOrders(_) => RouteKind::AdminOrders,
            ApiRoute::AdminHistory(_) => RouteKind::AdminHistory,
            ApiRoute::AdminRestock(_) => RouteKind::AdminRestock,
            ApiRoute::AdminVoid(..) => RouteKind::AdminVoid,
        }
    }

    /// The orders query is copied into the origin's URL: digits only, each
    /// member once, the limit in its bounds; anything else is refused.
    #[test]
    fn the_orders_query_takes_digits_and_nothing_else() {
        use crate::limits::{ADMIN_ORDERS_PAGE_DEFAULT, ADMIN_ORDERS_PAGE_MAX};
        let p = "/admin/products/p1/orders";
        let ok = |q: &str| orders_query(&format!("{p}{q}"));
        assert_eq!(
            ok(""),
            Ok(OrdersQuery {
                after: None,
                limit: ADMIN_ORDERS_PAGE_DEFAULT
            })
        );
        assert_eq!(
            ok("?after=42&limit=5"),
            Ok(OrdersQuery {
                after: Some(42),
                limit: 5
            })
        );
        assert_eq!(
            ok(&format!("?limit={ADMIN_ORDERS_PAGE_MAX}")).map(|q| q.limit),
            Ok(ADMIN_ORDERS_PAGE_MAX)
        );
        for bad in [
            "?limit=0".to_string(),
            format!("?limit={}", ADMIN_ORDERS_PAGE_MAX + 1),
            "?limit=-1".into(),
            "?after=1&after=2".into(),
            "?after=".into(),
            "?after=1e3".into(),
            "?after=1%26product_id%3Dother".into(),
            "?after=1&product_id=other".into(),
            "?after=9999999999999999".into(),
            "?limit=5#x".into(),
        ] {
            let got = ok(&bad);
            assert_eq!(
                got.as_ref().map_err(|p| p.code),
                Err(ProblemCode::InvalidQuery),
                "{bad}: {got:?}"
            );
        }
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    /// The cases workers-rs checks its own `path_from_url` against.
    #[test]
    fn the_path_is_the_target_before_its_query() {
        for (url, want) in [
            ("https://example.com/", "/"),
            ("https://example.com/foo/bar", "/foo/bar"),
            ("https://example.com/foo?a=1&b=/x", "/foo"),
            ("https://example.com:8080/foo", "/foo"),
            ("https://example.com/a%3F%23%2Fb?c", "/a%3F%23%2Fb"),
            (
                "http://127.0.0.1:8787/api/products/p1?x=1",
                "/api/products/p1",
            ),
        ] {
            assert_eq!(path(path_and_query(url)), want, "{url}");
        }
    }
}
