//! The public HTTP API at the edge: routing and validation.
//!
//! This module is pure (no `worker` types), so it is tested natively. The
//! Worker hands it the method, path, the few headers it reads and the body;
//! it returns either a `Command` for the product's Durable Object or the
//! `Problem` to answer with. The Durable Object never sees malformed input.

use flashgate_core::limits;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::problem::Problem;

/// The largest request body the edge reads.
pub const BODY_BYTES_MAX: usize = 4 * 1024;
pub const PRODUCT_ID_BYTES_MAX: usize = 64;

/// Where a request goes, decided from the method and path alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The buyer page.
    Page,
    GetProduct(String),
    Reserve(String),
    GetReservation(String, u64),
    Confirm(String, u64),
    Cancel(String, u64),
    AdminPut(String),
    AdminStats(String),
    AdminRestock(String),
}

impl Route {
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            Route::AdminPut(_) | Route::AdminStats(_) | Route::AdminRestock(_)
        )
    }

    pub fn product_id(&self) -> Option<&str> {
        match self {
            Route::Page => None,
            Route::GetProduct(p)
            | Route::Reserve(p)
            | Route::GetReservation(p, _)
            | Route::Confirm(p, _)
            | Route::Cancel(p, _)
            | Route::AdminPut(p)
            | Route::AdminStats(p)
            | Route::AdminRestock(p) => Some(p),
        }
    }

    /// Whether the route takes a JSON body.
    fn takes_body(&self) -> bool {
        matches!(
            self,
            Route::Reserve(_) | Route::Confirm(..) | Route::AdminPut(_) | Route::AdminRestock(_)
        )
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
        settings: Settings,
    },
    Restock {
        product_id: String,
        units: u64,
    },
    Stats {
        product_id: String,
    },
}

/// What an admin `PUT` may set. Absent fields keep their value (or the
/// default, for a new product). `opens_at_ms` / `closes_at_ms` take `null`
/// to clear the window, so they are doubly optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub stock_total: Option<u64>,
    pub per_buyer_max: Option<u32>,
    pub quantity_max: Option<u32>,
    pub hold_ttl_ms: Option<u64>,
    pub idem_window_ms: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub opens_at_ms: Option<Option<u64>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub closes_at_ms: Option<Option<u64>>,
    pub reservations_max: Option<u32>,
    /// `active`, `paused` or `closed`.
    pub mode: Option<String>,
}

/// A field that is present, possibly as `null`: `Some(None)` means "clear".
/// An absent field is `None` through `#[serde(default)]`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// The parts of a request the edge reads.
pub struct Incoming<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub content_type: Option<&'a str>,
    pub buyer: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub body: &'a [u8],
}

fn id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

pub fn valid_product_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= PRODUCT_ID_BYTES_MAX && id.bytes().all(id_char)
}

pub fn valid_buyer_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= limits::BUYER_ID_BYTES_MAX
        && id.bytes().all(|c| id_char(c) || c == b'.')
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

/// Routes by method and path. Unknown paths are 404, known paths with the
/// wrong method 405, and malformed ids 400 (product) or 404 (reservation).
pub fn route(method: &str, path: &str) -> Result<Route, Problem> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let allow = |allowed: &'static str, route: Route| {
        if allowed.split(", ").any(|m| m == method) {
            Ok(route)
        } else {
            Err(Problem::method_not_allowed(allowed))
        }
    };
    let product = |id: &str| {
        if valid_product_id(id) {
            Ok(id.to_string())
        } else {
            Err(Problem::invalid_product_id())
        }
    };
    let reservation = |id: &str| -> Result<u64, Problem> {
        // Ids are decimal, without sign or leading zeros, as the gate issues.
        let ok = !id.is_empty() && id.len() <= 19 && id.bytes().all(|c| c.is_ascii_digit());
        match id.parse::<u64>() {
            Ok(n) if ok && n > 0 && n.to_string() == id => Ok(n),
            _ => Err(Problem::invalid_reservation_id()),
        }
    };
    match parts.as_slice() {
        [""] | ["", "index.html"] => allow("GET", Route::Page),
        ["", "api", "products", id] => allow("GET", Route::GetProduct(product(id)?)),
        ["", "api", "products", id, "reservations"] => allow("POST", Route::Reserve(product(id)?)),
        ["", "api", "products", id, "reservations", rid] => allow(
            "GET",
            Route::GetReservation(product(id)?, reservation(rid)?),
        ),
        ["", "api", "products", id, "reservations", rid, "confirm"] => {
            allow("POST", Route::Confirm(product(id)?, reservation(rid)?))
        }
        ["", "api", "products", id, "reservations", rid, "cancel"] => {
            allow("POST", Route::Cancel(product(id)?, reservation(rid)?))
        }
        ["", "admin", "products", id] => allow("PUT", Route::AdminPut(product(id)?)),
        ["", "admin", "products", id, "stats"] => allow("GET", Route::AdminStats(product(id)?)),
        ["", "admin", "products", id, "restock"] => {
            allow("POST", Route::AdminRestock(product(id)?))
        }
        _ => Err(Problem::not_found(format!("no route for {path}"))),
    }
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

fn json_object(inc: &Incoming, route: &Route) -> Result<Map<String, Value>, Problem> {
    let ct = inc.content_type.unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(Problem::unsupported_media_type());
    }
    let value: Value = serde_json::from_slice(inc.body)
        .map_err(|e| Problem::malformed_json(format!("the body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Problem::invalid_body(format!(
            "the body of {} must be a JSON object",
            route_name(route)
        ))),
    }
}

fn route_name(route: &Route) -> &'static str {
    match route {
        Route::Reserve(_) => "a reserve",
        Route::Confirm(..) => "a confirm",
        Route::AdminPut(_) => "a product update",
        Route::AdminRestock(_) => "a restock",
        _ => "this request",
    }
}

fn no_unknown_fields(map: &Map<String, Value>, known: &[&str]) -> Result<(), Problem> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(Problem::invalid_body(format!(
            "unknown field {k:?}; expected {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// An integer field in `lo..=hi`, or a clear error naming the field.
fn int_field(v: &Value, name: &str, lo: u64, hi: u64) -> Result<u64, Problem> {
    match v.as_u64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(Problem::invalid_body(format!(
            "{name} must be an integer from {lo} to {hi}"
        ))),
    }
}

fn buyer(inc: &Incoming) -> Result<String, Problem> {
    match inc.buyer.map(str::trim) {
        Some(b) if valid_buyer_id(b) => Ok(b.to_string()),
        _ => Err(Problem::buyer_missing()),
    }
}

/// Validates a routed request into a command. `admin_token` is the
/// configured secret.
pub fn parse(inc: &Incoming, route: Route, admin_token: &str) -> Result<Command, Problem> {
    if inc.body.len() > BODY_BYTES_MAX {
        return Err(Problem::body_too_large(BODY_BYTES_MAX));
    }
    if route.is_admin() {
        check_admin(inc.authorization, admin_token)?;
    }
    let body = if route.takes_body() {
        Some(json_object(inc, &route)?)
    } else {
        None
    };
    let body = body.unwrap_or_default();
    Ok(match route {
        Route::Page => unreachable!("the page is served without a command"),
        Route::GetProduct(product_id) => Command::GetProduct { product_id },
        Route::Reserve(product_id) => {
            let buyer = buyer(inc)?;
            let idem_key = match inc.idempotency_key {
                None => return Err(Problem::idempotency_key_missing()),
                Some(raw) => parse_idempotency_key(raw)?,
            };
            no_unknown_fields(&body, &["quantity"])?;
            let q = body
                .get("quantity")
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
        Route::GetReservation(product_id, reservation_id) => Command::GetReservation {
            product_id,
            buyer: buyer(inc)?,
            reservation_id,
        },
        Route::Confirm(product_id, reservation_id) => {
            let buyer = buyer(inc)?;
            no_unknown_fields(&body, &["payment_ref"])?;
            let payment_ref = match body.get("payment_ref") {
                Some(Value::String(s))
                    if !s.is_empty()
                        && s.len() <= limits::PAYMENT_REF_BYTES_MAX
                        && !s.chars().any(char::is_control) =>
                {
                    s.clone()
                }
                _ => {
                    return Err(Problem::invalid_body(format!(
                        "payment_ref must be a string of 1 to {} bytes without control characters",
                        limits::PAYMENT_REF_BYTES_MAX
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
        Route::Cancel(product_id, reservation_id) => Command::Cancel {
            product_id,
            buyer: buyer(inc)?,
            reservation_id,
        },
        Route::AdminPut(product_id) => Command::Upsert {
            product_id,
            settings: parse_settings(&body)?,
        },
        Route::AdminRestock(product_id) => {
            no_unknown_fields(&body, &["units"])?;
            let units = body
                .get("units")
                .ok_or_else(|| Problem::invalid_body("units is required"))?;
            Command::Restock {
                product_id,
                units: int_field(units, "units", 1, limits::STOCK_UNITS_MAX)?,
            }
        }
        Route::AdminStats(product_id) => Command::Stats { product_id },
    })
}

fn parse_settings(body: &Map<String, Value>) -> Result<Settings, Problem> {
    const KNOWN: &[&str] = &[
        "stock_total",
        "per_buyer_max",
        "quantity_max",
        "hold_ttl_ms",
        "idem_window_ms",
        "opens_at_ms",
        "closes_at_ms",
        "reservations_max",
        "mode",
    ];
    no_unknown_fields(body, KNOWN)?;
    let get = |name: &str, lo: u64, hi: u64| -> Result<Option<u64>, Problem> {
        body.get(name)
            .map(|v| int_field(v, name, lo, hi))
            .transpose()
    };
    // Instants are epoch milliseconds; 2^53 keeps them exact in JavaScript.
    const INSTANT_MAX: u64 = (1 << 53) - 1;
    let instant = |name: &str| -> Result<Option<Option<u64>>, Problem> {
        match body.get(name) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(v) => int_field(v, name, 0, INSTANT_MAX).map(|n| Some(Some(n))),
        }
    };
    let u32_max = u64::from(u32::MAX);
    let mode = match body.get("mode") {
        None => None,
        Some(Value::String(s)) if flashgate_core::Mode::parse(s).is_some() => Some(s.clone()),
        Some(_) => {
            return Err(Problem::invalid_body(
                "mode must be \"active\", \"paused\" or \"closed\"",
            ))
        }
    };
    Ok(Settings {
        stock_total: get("stock_total", 0, limits::STOCK_UNITS_MAX)?,
        per_buyer_max: get("per_buyer_max", 1, u32_max)?.map(|n| n as u32),
        quantity_max: get("quantity_max", 1, u64::from(limits::QUANTITY_MAX_MAX))?
            .map(|n| n as u32),
        hold_ttl_ms: get(
            "hold_ttl_ms",
            limits::HOLD_TTL_MS_MIN,
            limits::HOLD_TTL_MS_MAX,
        )?,
        idem_window_ms: get("idem_window_ms", 0, limits::IDEM_WINDOW_MS_MAX)?,
        opens_at_ms: instant("opens_at_ms")?,
        closes_at_ms: instant("closes_at_ms")?,
        reservations_max: get(
            "reservations_max",
            1,
            u64::from(limits::RESERVATIONS_MAX_MAX),
        )?
        .map(|n| n as u32),
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc<'a>(method: &'a str, path: &'a str, body: &'a [u8]) -> Incoming<'a> {
        Incoming {
            method,
            path,
            content_type: Some("application/json"),
            buyer: Some("alice"),
            idempotency_key: Some("\"k-1\""),
            authorization: Some("Bearer secret"),
            body,
        }
    }

    fn run(i: &Incoming) -> Result<Command, Problem> {
        let r = route(i.method, i.path)?;
        parse(i, r, "secret")
    }

    #[test]
    fn bad_input_table() {
        let long_id = format!("/api/products/{}", "p".repeat(65));
        let big = vec![b' '; BODY_BYTES_MAX + 1];
        let cases: Vec<(Incoming, u16, &str)> = vec![
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
                (err.status, err.code),
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
        i.idempotency_key = None;
        assert_eq!(run(&i).unwrap_err().code, "idempotency_key_missing");
        let long = "k".repeat(65);
        i.idempotency_key = Some(&long);
        assert_eq!(run(&i).unwrap_err().code, "idempotency_key_invalid");
        i.idempotency_key = Some("\"unterminated");
        assert_eq!(run(&i).unwrap_err().code, "idempotency_key_invalid");
        i.idempotency_key = Some("bare-token");
        assert!(run(&i).is_ok());
        i.buyer = None;
        assert_eq!(run(&i).unwrap_err().code, "buyer_missing");
        i.buyer = Some("alice");
        i.content_type = Some("text/plain");
        assert_eq!(run(&i).unwrap_err().code, "unsupported_media_type");
        i.content_type = Some("application/json; charset=utf-8");
        assert!(run(&i).is_ok());

        let mut a = inc("GET", "/admin/products/p1/stats", b"");
        a.authorization = None;
        assert_eq!(run(&a).unwrap_err().status, 401);
        a.authorization = Some("Bearer wrong");
        assert_eq!(run(&a).unwrap_err().status, 401);
        a.authorization = Some("Bearer secret");
        assert!(run(&a).is_ok());
        // An empty configured token never admits anyone.
        a.authorization = Some("Bearer ");
        let r = route(a.method, a.path).unwrap();
        assert_eq!(parse(&a, r, "").unwrap_err().status, 401);
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
        let Command::Upsert { settings, .. } = run(&i).unwrap() else {
            panic!("not an upsert")
        };
        assert_eq!(settings.stock_total, Some(100));
        assert_eq!(settings.opens_at_ms, Some(None));
        assert_eq!(settings.closes_at_ms, None);
        assert_eq!(settings.hold_ttl_ms, Some(2000));
        // The Worker sends settings to the Durable Object as JSON; a cleared
        // window must survive the trip as a clear, not as "unchanged".
        let trip: Settings =
            serde_json::from_str(&serde_json::to_string(&settings).unwrap()).unwrap();
        assert_eq!(trip, settings);
    }
}
