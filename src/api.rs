//! The public HTTP API at the edge: the route table, routing, and the
//! validation of a request into a `Command`.
//!
//! This module is pure (no `worker` types), so it is tested natively. The
//! Worker hands it the method, path, the few headers it reads and the body;
//! it returns either a `Command` for the product's Durable Object or the
//! `Problem` to answer with. The Durable Object never sees malformed input.
//! `ROUTES` is the only list of the gate's routes: the router walks it, and a
//! test checks it against `openapi.yaml`.

use flashgate_core::{limits, ConfigPatch};
use flashgate_wire::bounds;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::problem::Problem;

/// The largest request body the edge reads.
pub const BODY_BYTES_MAX: usize = 4 * 1024;

/// What a route does, before its path parameters are filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    Page,
    OpenApi,
    GetProduct,
    Reserve,
    GetReservation,
    Confirm,
    Cancel,
    AdminPut,
    AdminStats,
    AdminRestock,
}

/// Every route of the gate: method, path template, and what it does. Path
/// parameters are `{product_id}` and `{reservation_id}`.
pub const ROUTES: &[(&str, &str, RouteKind)] = &[
    ("GET", "/", RouteKind::Page),
    ("GET", "/index.html", RouteKind::Page),
    ("GET", "/openapi.json", RouteKind::OpenApi),
    ("GET", "/api/products/{product_id}", RouteKind::GetProduct),
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
    ("PUT", "/admin/products/{product_id}", RouteKind::AdminPut),
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
];

/// Where a request goes, decided from the method and path alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The buyer page, served by the Worker itself.
    Page,
    /// The OpenAPI document, served by the Worker itself.
    OpenApi,
    /// A request for a product's Durable Object.
    Api(ApiRoute),
}

/// A route that a product's Durable Object answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRoute {
    GetProduct(String),
    Reserve(String),
    GetReservation(String, u64),
    Confirm(String, u64),
    Cancel(String, u64),
    AdminPut(String),
    AdminStats(String),
    AdminRestock(String),
}

impl ApiRoute {
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            ApiRoute::AdminPut(_) | ApiRoute::AdminStats(_) | ApiRoute::AdminRestock(_)
        )
    }

    pub fn product_id(&self) -> &str {
        match self {
            ApiRoute::GetProduct(p)
            | ApiRoute::Reserve(p)
            | ApiRoute::GetReservation(p, _)
            | ApiRoute::Confirm(p, _)
            | ApiRoute::Cancel(p, _)
            | ApiRoute::AdminPut(p)
            | ApiRoute::AdminStats(p)
            | ApiRoute::AdminRestock(p) => p,
        }
    }
}

/// A validated request for a product's Durable Object. The buyer or admin
/// identity has been checked by the edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    GetProduct {
        product_id: String,
    },
    Reserve {
        product_id: String,
        buyer: String,
        idem_key: String,
        quantity: u32,
    },
    GetReservation {
        product_id: String,
        buyer: String,
        reservation_id: u64,
    },
    Confirm {
        product_id: String,
        buyer: String,
        reservation_id: u64,
        payment_ref: String,
    },
    Cancel {
        product_id: String,
        buyer: String,
        reservation_id: u64,
    },
    Upsert {
        product_id: String,
        patch: ConfigPatch,
    },
    Restock {
        product_id: String,
        units: u64,
    },
    Stats {
        product_id: String,
    },
}

impl Command {
    /// The product the command is for.
    pub fn product_id(&self) -> &str {
        match self {
            Command::GetProduct { product_id }
            | Command::Reserve { product_id, .. }
            | Command::GetReservation { product_id, .. }
            | Command::Confirm { product_id, .. }
            | Command::Cancel { product_id, .. }
            | Command::Upsert { product_id, .. }
            | Command::Restock { product_id, .. }
            | Command::Stats { product_id } => product_id,
        }
    }
}

/// The parts of a request the edge reads.
pub struct Incoming<'a> {
    pub content_type: Option<&'a str>,
    pub buyer: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub body: &'a [u8],
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

/// Reservation ids are decimal, without sign or leading zeros, as the gate
/// issues them. Anything else names no reservation.
fn reservation_id(s: &str) -> Option<u64> {
    let digits = !s.is_empty() && s.len() <= 20 && s.bytes().all(|c| c.is_ascii_digit());
    let n: u64 = s.parse().ok().filter(|_| digits)?;
    (n > 0 && n.to_string() == s).then_some(n)
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
    let reservation = || -> Result<u64, Problem> {
        params
            .reservation_id
            .and_then(reservation_id)
            .ok_or_else(Problem::invalid_reservation_id)
    };
    Ok(match kind {
        RouteKind::Page => Route::Page,
        RouteKind::OpenApi => Route::OpenApi,
        RouteKind::GetProduct => Route::Api(ApiRoute::GetProduct(product()?)),
        RouteKind::Reserve => Route::Api(ApiRoute::Reserve(product()?)),
        RouteKind::GetReservation => {
            Route::Api(ApiRoute::GetReservation(product()?, reservation()?))
        }
        RouteKind::Confirm => Route::Api(ApiRoute::Confirm(product()?, reservation()?)),
        RouteKind::Cancel => Route::Api(ApiRoute::Cancel(product()?, reservation()?)),
        RouteKind::AdminPut => Route::Api(ApiRoute::AdminPut(product()?)),
        RouteKind::AdminStats => Route::Api(ApiRoute::AdminStats(product()?)),
        RouteKind::AdminRestock => Route::Api(ApiRoute::AdminRestock(product()?)),
    })
}

/// Compares in time independent of where the inputs differ, so the admin
/// token cannot be guessed byte by byte from response times.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn check_admin(authorization: Option<&str>, admin_token: &str) -> Result<(), Problem> {
    let given = authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    // An empty configured token disables admin access rather than letting an
    // empty bearer in.
    if admin_token.is_empty() || !constant_time_eq(given.as_bytes(), admin_token.as_bytes()) {
        return Err(Problem::unauthorized());
    }
    Ok(())
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
    payment_ref: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestockBody {
    units: Option<Value>,
}

fn buyer(inc: &Incoming) -> Result<String, Problem> {
    match inc.buyer.map(str::trim) {
        Some(b) if bounds::valid_buyer_id(b) => Ok(b.to_string()),
        _ => Err(Problem::buyer_missing()),
    }
}

/// Validates a routed request into a command. `admin_token` is the
/// configured secret.
pub fn parse(inc: &Incoming, route: ApiRoute, admin_token: &str) -> Result<Command, Problem> {
    if inc.body.len() > BODY_BYTES_MAX {
        return Err(Problem::body_too_large(BODY_BYTES_MAX));
    }
    if route.is_admin() {
        check_admin(inc.authorization, admin_token)?;
    }
    Ok(match route {
        ApiRoute::GetProduct(product_id) => Command::GetProduct { product_id },
        ApiRoute::Reserve(product_id) => {
            let buyer = buyer(inc)?;
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
            Command::Reserve {
                product_id,
                buyer,
                idem_key,
                quantity,
            }
        }
        ApiRoute::GetReservation(product_id, reservation_id) => Command::GetReservation {
            product_id,
            buyer: buyer(inc)?,
            reservation_id,
        },
        ApiRoute::Confirm(product_id, reservation_id) => {
            let buyer = buyer(inc)?;
            let body: ConfirmBody = json_body(inc, "a confirm")?;
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
                product_id,
                buyer,
                reservation_id,
                payment_ref,
            }
        }
        ApiRoute::Cancel(product_id, reservation_id) => Command::Cancel {
            product_id,
            buyer: buyer(inc)?,
            reservation_id,
        },
        ApiRoute::AdminPut(product_id) => Command::Upsert {
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
        ApiRoute::AdminStats(product_id) => Command::Stats { product_id },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::ProblemCode;

    struct Req<'a> {
        method: &'a str,
        path: &'a str,
        inc: Incoming<'a>,
    }

    fn inc<'a>(method: &'a str, path: &'a str, body: &'a [u8]) -> Req<'a> {
        Req {
            method,
            path,
            inc: Incoming {
                content_type: Some("application/json"),
                buyer: Some("alice"),
                idempotency_key: Some("\"k-1\""),
                authorization: Some("Bearer secret"),
                body,
            },
        }
    }

    fn run_with(r: &Req, admin_token: &str) -> Result<Command, Problem> {
        match route(r.method, r.path)? {
            Route::Api(api) => parse(&r.inc, api, admin_token),
            other => panic!("{} {} is {other:?}", r.method, r.path),
        }
    }

    fn run(r: &Req) -> Result<Command, Problem> {
        run_with(r, "secret")
    }

    #[test]
    fn bad_input_table() {
        let long_id = format!("/api/products/{}", "p".repeat(65));
        let big = vec![b' '; BODY_BYTES_MAX + 1];
        let cases: Vec<(Req, u16, &str)> = vec![
            (
                inc("POST", "/api/products/p1/reservations", b"{"),
                400,
                "malformed_json",
            ),
            (
                inc("POST", "/api/products/p1/reservations", b"[1]"),
                422,
                "invalid_body",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations",
                    b"{\"quantity\":\"2\"}",
                ),
                422,
                "invalid_body",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations",
                    b"{\"quantity\":-1}",
                ),
                422,
                "invalid_quantity",
            ),
            (
                inc("POST", "/api/products/p1/reservations", b"{\"quantity\":0}"),
                422,
                "invalid_quantity",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations",
                    b"{\"quantity\":1.5}",
                ),
                422,
                "invalid_quantity",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations",
                    b"{\"quantity\":1e30}",
                ),
                422,
                "invalid_quantity",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations",
                    b"{\"quantity\":1,\"x\":1}",
                ),
                422,
                "invalid_body",
            ),
            (
                inc("POST", "/api/products/p1/reservations", &big),
                413,
                "body_too_large",
            ),
            (
                inc("DELETE", "/api/products/p1/reservations", b""),
                405,
                "method_not_allowed",
            ),
            (inc("GET", "/nope", b""), 404, "not_found"),
            (inc("GET", &long_id, b""), 400, "invalid_product_id"),
            (
                inc("GET", "/api/products/p%201", b""),
                400,
                "invalid_product_id",
            ),
            (
                inc("GET", "/api/products/p1/reservations/01", b""),
                404,
                "unknown_reservation",
            ),
            (
                inc("PUT", "/admin/products/p1", b"{\"stock_total\":-5}"),
                422,
                "invalid_body",
            ),
            (
                inc("PUT", "/admin/products/p1", b"{\"mode\":\"open\"}"),
                422,
                "invalid_body",
            ),
            (
                inc(
                    "POST",
                    "/api/products/p1/reservations/1/confirm",
                    b"{\"payment_ref\":\"\"}",
                ),
                422,
                "invalid_body",
            ),
        ];
        for (i, status, code) in cases {
            let err = run(&i).expect_err(i.path);
            assert_eq!(
                (err.status(), err.code.as_str()),
                (status, code),
                "{} {}",
                i.method,
                i.path
            );
        }
    }

    #[test]
    fn headers_are_checked() {
        let body = b"{\"quantity\":1}";
        let mut i = inc("POST", "/api/products/p1/reservations", body);
        let code = |r: &Req| run(r).unwrap_err().code;
        i.inc.idempotency_key = None;
        assert_eq!(code(&i), ProblemCode::IdempotencyKeyMissing);
        let long = "k".repeat(65);
        i.inc.idempotency_key = Some(&long);
        assert_eq!(code(&i), ProblemCode::IdempotencyKeyInvalid);
        i.inc.idempotency_key = Some("\"unterminated");
        assert_eq!(code(&i), ProblemCode::IdempotencyKeyInvalid);
        i.inc.idempotency_key = Some("bare-token");
        assert!(run(&i).is_ok());
        i.inc.buyer = None;
        assert_eq!(code(&i), ProblemCode::BuyerMissing);
        i.inc.buyer = Some("alice");
        i.inc.content_type = Some("text/plain");
        assert_eq!(code(&i), ProblemCode::UnsupportedMediaType);
        i.inc.content_type = Some("application/json; charset=utf-8");
        assert!(run(&i).is_ok());

        let mut a = inc("GET", "/admin/products/p1/stats", b"");
        a.inc.authorization = None;
        assert_eq!(code(&a), ProblemCode::Unauthorized);
        a.inc.authorization = Some("Bearer wrong");
        assert_eq!(code(&a), ProblemCode::Unauthorized);
        a.inc.authorization = Some("Bearer secret");
        assert!(run(&a).is_ok());
        // An empty configured token never admits anyone.
        a.inc.authorization = Some("Bearer ");
        assert_eq!(
            run_with(&a, "").unwrap_err().code,
            ProblemCode::Unauthorized
        );
    }

    #[test]
    fn good_requests_become_commands() {
        let i = inc("POST", "/api/products/p1/reservations", b"{\"quantity\":2}");
        assert_eq!(
            run(&i).unwrap(),
            Command::Reserve {
                product_id: "p1".into(),
                buyer: "alice".into(),
                idem_key: "k-1".into(),
                quantity: 2
            }
        );
        let i = inc(
            "PUT",
            "/admin/products/p1",
            b"{\"stock_total\":100,\"opens_at_ms\":null,\"hold_ttl_ms\":2000}",
        );
        let cmd = run(&i).unwrap();
        let Command::Upsert { patch, .. } = &cmd else {
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
    }

    #[test]
    fn routes_are_matched_from_the_table() {
        assert_eq!(route("GET", "/"), Ok(Route::Page));
        assert_eq!(route("GET", "/openapi.json"), Ok(Route::OpenApi));
        assert_eq!(
            route("GET", "/api/products/p1/reservations/7/"),
            Ok(Route::Api(ApiRoute::GetReservation("p1".into(), 7)))
        );
        let p = route("PUT", "/api/products/p1/reservations/7/confirm").unwrap_err();
        assert_eq!(p.code, ProblemCode::MethodNotAllowed);
        assert_eq!(p.allow.as_deref(), Some("POST"));
        assert_eq!(
            route("GET", "/api/products/p1/extra").unwrap_err().code,
            ProblemCode::NotFound
        );
        for id in ["0", "01", "-1", "+1", "1.0", "18446744073709551616"] {
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
                .replace("{reservation_id}", "9");
            let got = route(method, &path).unwrap();
            let same = match (&got, kind) {
                (Route::Page, RouteKind::Page) | (Route::OpenApi, RouteKind::OpenApi) => true,
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
            ApiRoute::AdminPut(_) => RouteKind::AdminPut,
            ApiRoute::AdminStats(_) => RouteKind::AdminStats,
            ApiRoute::AdminRestock(_) => RouteKind::AdminRestock,
        }
    }
}
