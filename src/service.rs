//! What the Durable Object does with a validated command: one core call,
//! and the HTTP reply for its outcome.
//!
//! Pure and synchronous, like the core: the shell gives it the gate and
//! `now_ms`, then writes the gate's changes and sends the reply. That keeps
//! the mapping from outcomes to status codes testable natively.

use flashgate_core::{
    AdminOutcome, CancelOutcome, Config, ConfirmOutcome, Confirmation, Gate, HoldState, Mode,
    ReserveOutcome, SetupError, Stats,
};
use serde_json::{json, Map, Value};

use crate::api::{Command, Settings};
use crate::problem::Problem;

/// An HTTP reply, before it becomes a `worker::Response`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// The body is an RFC 9457 problem document.
    pub problem: bool,
    pub retry_after_s: Option<u64>,
    pub allow: Option<&'static str>,
    /// The answer is a replay of an earlier one (`Idempotent-Replayed`).
    pub replayed: bool,
}

impl Reply {
    pub fn ok(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body,
            problem: false,
            retry_after_s: None,
            allow: None,
            replayed: false,
        }
    }
}

impl From<Problem> for Reply {
    fn from(p: Problem) -> Reply {
        Reply {
            status: p.status,
            body: p.body(),
            problem: true,
            retry_after_s: p.retry_after_s,
            allow: p.allow,
            replayed: false,
        }
    }
}

/// The product a command is for.
pub fn product_of(cmd: &Command) -> &str {
    match cmd {
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

/// Applies one command. `gate` is `None` until an admin creates the product.
pub fn execute(gate: &mut Option<Gate>, cmd: &Command, now_ms: u64) -> Reply {
    let product_id = product_of(cmd);
    if let Command::Upsert { settings, .. } = cmd {
        return upsert(gate, product_id, settings, now_ms);
    }
    let Some(g) = gate.as_mut() else {
        return Problem::unknown_product(product_id).into();
    };
    match cmd {
        Command::GetProduct { .. } => Reply::ok(200, product_view(g, product_id, now_ms)),
        Command::Reserve {
            buyer,
            idem_key,
            quantity,
            ..
        } => reserve_reply(g.reserve(now_ms, buyer, idem_key, *quantity)),
        Command::GetReservation {
            buyer,
            reservation_id,
            ..
        } => match g.reservation(*reservation_id, now_ms) {
            Some(v) if v.buyer == *buyer => {
                let mut body = json!({
                    "reservation_id": v.id.to_string(),
                    "state": v.state.as_str(),
                    "quantity": v.quantity,
                    "expires_at": rfc3339(v.expires_at_ms),
                    "expires_at_ms": v.expires_at_ms,
                });
                if let Some(c) = &v.confirmation {
                    body["confirmation"] = confirmation_view(c);
                }
                Reply::ok(200, body)
            }
            _ => unknown_reservation().into(),
        },
        Command::Confirm {
            buyer,
            reservation_id,
            payment_ref,
            ..
        } => match g.confirm(now_ms, *reservation_id, buyer, payment_ref) {
            ConfirmOutcome::Confirmed(c) => Reply::ok(200, confirmation_view(&c)),
            ConfirmOutcome::Expired => Problem::new(
                409,
                "expired",
                "Reservation expired",
                "the hold expired before the confirm arrived; its units went back on sale",
            )
            .into(),
            ConfirmOutcome::Cancelled => Problem::new(
                409,
                "cancelled",
                "Reservation cancelled",
                "the reservation was cancelled",
            )
            .into(),
            ConfirmOutcome::Unknown => unknown_reservation().into(),
            ConfirmOutcome::InvalidInput(_) => {
                Problem::invalid_body("payment_ref is not acceptable").into()
            }
        },
        Command::Cancel {
            buyer,
            reservation_id,
            ..
        } => match g.cancel(now_ms, *reservation_id, buyer) {
            CancelOutcome::Cancelled { quantity } => Reply::ok(
                200,
                json!({
                    "reservation_id": reservation_id.to_string(),
                    "state": "cancelled",
                    "quantity": quantity,
                }),
            ),
            CancelOutcome::AlreadyConfirmed => Problem::new(
                409,
                "already_confirmed",
                "Reservation already confirmed",
                "a confirmed reservation cannot be cancelled here",
            )
            .into(),
            CancelOutcome::AlreadyExpired => Problem::new(
                409,
                "already_expired",
                "Reservation already expired",
                "the hold expired; its units are already back on sale",
            )
            .into(),
            CancelOutcome::Unknown => unknown_reservation().into(),
        },
        Command::Restock { units, .. } => match g.add_units(now_ms, *units) {
            AdminOutcome::Done => Reply::ok(200, product_view(g, product_id, now_ms)),
            other => admin_problem(other).into(),
        },
        Command::Stats { .. } => Reply::ok(200, stats_view(product_id, &g.stats(now_ms))),
        Command::Upsert { .. } => unreachable!("handled above"),
    }
}

fn unknown_reservation() -> Problem {
    Problem::new(
        404,
        "unknown_reservation",
        "Unknown reservation",
        "no reservation of yours has this id",
    )
}

fn reserve_reply(outcome: ReserveOutcome) -> Reply {
    let held = |id: u64, expires_at_ms: u64, quantity: u32| {
        json!({
            "reservation_id": id.to_string(),
            "state": "held",
            "quantity": quantity,
            "expires_at": rfc3339(expires_at_ms),
            "expires_at_ms": expires_at_ms,
        })
    };
    match outcome {
        ReserveOutcome::Reserved {
            reservation_id,
            expires_at_ms,
            quantity,
        } => Reply::ok(201, held(reservation_id, expires_at_ms, quantity)),
        ReserveOutcome::Replayed {
            reservation_id,
            expires_at_ms,
            quantity,
        } => Reply {
            replayed: true,
            ..Reply::ok(200, held(reservation_id, expires_at_ms, quantity))
        },
        ReserveOutcome::IdempotencyConflict { reservation_id } => Problem::new(
            422,
            "idempotency_conflict",
            "Idempotency-Key reused",
            "this Idempotency-Key was already used with a different request",
        )
        .with("reservation_id", reservation_id.to_string())
        .into(),
        ReserveOutcome::SoldOut => {
            Problem::new(409, "sold_out", "Sold out", "every unit is held or sold").into()
        }
        ReserveOutcome::InsufficientStock { available } => Problem::new(
            409,
            "insufficient_stock",
            "Not enough stock",
            format!("only {available} units are available"),
        )
        .with("available", available)
        .into(),
        ReserveOutcome::BuyerLimitReached { remaining } => Problem::new(
            403,
            "buyer_limit",
            "Buyer limit reached",
            format!("you may reserve {remaining} more units of this product"),
        )
        .with("remaining", remaining)
        .into(),
        ReserveOutcome::NotOpen { opens_at_ms } => Problem::new(
            409,
            "not_open",
            "Sale not open yet",
            format!("the sale opens at {}", rfc3339(opens_at_ms)),
        )
        .with("opens_at", rfc3339(opens_at_ms))
        .with("opens_at_ms", opens_at_ms)
        .into(),
        ReserveOutcome::Closed => {
            Problem::new(409, "closed", "Sale closed", "the sale is over").into()
        }
        ReserveOutcome::Paused => Problem::new(
            409,
            "paused",
            "Sale paused",
            "the sale is paused; try again later",
        )
        .into(),
        ReserveOutcome::InvalidQuantity { quantity_max } => Problem::invalid_quantity(format!(
            "quantity must be from 1 to {quantity_max} for this product"
        ))
        .with("quantity_max", quantity_max)
        .into(),
        ReserveOutcome::InvalidInput(_) => {
            Problem::invalid_body("the buyer id or Idempotency-Key is not acceptable").into()
        }
        ReserveOutcome::Overloaded { retry_after_ms } => {
            let mut p = Problem::new(
                503,
                "overloaded",
                "Too many open reservations",
                "the product keeps as many reservations as it may; retry later",
            )
            .with("retry_after_ms", retry_after_ms);
            p.retry_after_s = Some(retry_after_ms.div_ceil(1000));
            p.into()
        }
    }
}

fn confirmation_view(c: &Confirmation) -> Value {
    json!({
        "reservation_id": c.reservation_id.to_string(),
        "state": HoldState::Confirmed.as_str(),
        "quantity": c.quantity,
        "payment_ref": c.payment_ref,
        "confirmed_at": rfc3339(c.confirmed_at_ms),
        "confirmed_at_ms": c.confirmed_at_ms,
    })
}

fn admin_problem(outcome: AdminOutcome) -> Problem {
    match outcome {
        AdminOutcome::Done => unreachable!("not a problem"),
        AdminOutcome::BelowCommitted { committed } => Problem::new(
            409,
            "below_committed",
            "Total below committed units",
            format!("{committed} units are held or sold; the total cannot be lower"),
        )
        .with("committed", committed),
        AdminOutcome::StockTooLarge => Problem::new(
            422,
            "stock_too_large",
            "Stock too large",
            format!(
                "the total may be at most {}",
                flashgate_core::limits::STOCK_UNITS_MAX
            ),
        ),
        AdminOutcome::InvalidConfig(e) => Problem::invalid_body(e.describe()),
        AdminOutcome::BuyerAboveLimit { units } => Problem::new(
            409,
            "buyer_above_limit",
            "per_buyer_max below a buyer's units",
            format!("a buyer already has {units} units; per_buyer_max cannot be lower"),
        )
        .with("units", units),
        AdminOutcome::SaleClosed => Problem::new(
            409,
            "sale_closed",
            "Sale closed",
            "a closed sale stays closed",
        ),
    }
}

fn merge(mut c: Config, s: &Settings) -> Config {
    if let Some(v) = s.per_buyer_max {
        c.per_buyer_max = v;
    }
    if let Some(v) = s.quantity_max {
        c.quantity_max = v;
    }
    if let Some(v) = s.hold_ttl_ms {
        c.hold_ttl_ms = v;
    }
    if let Some(v) = s.idem_window_ms {
        c.idem_window_ms = v;
    }
    if let Some(v) = s.opens_at_ms {
        c.opens_at_ms = v;
    }
    if let Some(v) = s.closes_at_ms {
        c.closes_at_ms = v;
    }
    if let Some(v) = s.reservations_max {
        c.reservations_max = v;
    }
    c
}

fn upsert(gate: &mut Option<Gate>, product_id: &str, s: &Settings, now_ms: u64) -> Reply {
    let mode = s.mode.as_deref().and_then(Mode::parse);
    match gate {
        Some(g) => {
            let config = merge(g.config().clone(), s);
            match g.update(now_ms, Some(config), s.stock_total, mode) {
                AdminOutcome::Done => Reply::ok(200, product_view(g, product_id, now_ms)),
                other => admin_problem(other).into(),
            }
        }
        None => {
            let Some(stock_total) = s.stock_total else {
                return Problem::invalid_body("stock_total is required to create a product").into();
            };
            let config = merge(Config::default(), s);
            let mut g = match Gate::new(config, stock_total) {
                Ok(g) => g,
                Err(SetupError::Config(e)) => return Problem::invalid_body(e.describe()).into(),
                Err(SetupError::StockTooLarge) => {
                    return admin_problem(AdminOutcome::StockTooLarge).into()
                }
            };
            if let Some(mode) = mode {
                // A new product is active; moving it to any mode is allowed.
                let done = g.update(now_ms, None, None, Some(mode));
                debug_assert_eq!(done, AdminOutcome::Done);
            }
            let body = product_view(&g, product_id, now_ms);
            *gate = Some(g);
            Reply::ok(201, body)
        }
    }
}

/// The public view of a product.
pub fn product_view(g: &Gate, product_id: &str, now_ms: u64) -> Value {
    let s = g.stats(now_ms);
    let c = g.config();
    json!({
        "product_id": product_id,
        "state": s.phase.as_str(),
        "stock_total": s.stock_total,
        "available": s.available,
        "held": s.held,
        "sold": s.sold,
        "opens_at": c.opens_at_ms.map(rfc3339),
        "opens_at_ms": c.opens_at_ms,
        "closes_at": c.closes_at_ms.map(rfc3339),
        "closes_at_ms": c.closes_at_ms,
        "per_buyer_max": c.per_buyer_max,
        "quantity_max": c.quantity_max,
        "hold_ttl_ms": c.hold_ttl_ms,
    })
}

pub fn stats_view(product_id: &str, s: &Stats) -> Value {
    let mut counters: Map<String, Value> = Map::new();
    for (op, code, n) in s.counters.iter() {
        let group = counters
            .entry(op.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        group[code] = n.into();
    }
    counters.insert("holds_expired".into(), s.counters.holds_expired.into());
    json!({
        "product_id": product_id,
        "state": s.phase.as_str(),
        "stock_total": s.stock_total,
        "available": s.available,
        "held": s.held,
        "sold": s.sold,
        "live_holds": s.live_holds,
        "tombstones": s.tombstones,
        "buyers": s.buyers,
        "outbox": {
            "backlog": s.outbox_backlog,
            "backlog_units": s.outbox_backlog_units,
            "acked_seq": s.outbox_acked_seq,
            "attempts": s.outbox_attempts,
            "retry_at_ms": s.outbox_retry_at_ms,
        },
        "next_deadline_ms": s.next_deadline_ms,
        "counters": counters,
    })
}

/// Epoch milliseconds as an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve(q: u32, key: &str) -> Command {
        Command::Reserve {
            product_id: "p1".into(),
            buyer: "alice".into(),
            idem_key: key.into(),
            quantity: q,
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_795_910_400_000), "2026-11-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_996_799_999), "2026-11-29T23:59:59.999Z");
    }

    #[test]
    fn outcomes_map_to_statuses() {
        let mut gate = None;
        assert_eq!(execute(&mut gate, &reserve(1, "k"), 0).status, 404);
        let create = Command::Upsert {
            product_id: "p1".into(),
            settings: Settings {
                stock_total: Some(2),
                per_buyer_max: Some(2),
                ..Settings::default()
            },
        };
        assert_eq!(execute(&mut gate, &create, 0).status, 201);
        let r = execute(&mut gate, &reserve(1, "k1"), 0);
        assert_eq!(r.status, 201);
        assert_eq!(r.body["reservation_id"], "1");
        let again = execute(&mut gate, &reserve(1, "k1"), 1);
        assert_eq!((again.status, again.replayed), (200, true));
        assert_eq!(again.body, r.body);
        let conflict = execute(&mut gate, &reserve(2, "k1"), 1);
        assert_eq!(
            (conflict.status, &conflict.body["code"]),
            (422, &json!("idempotency_conflict"))
        );
        assert_eq!(
            execute(&mut gate, &reserve(2, "k2"), 1).body["code"],
            "buyer_limit"
        );
        assert_eq!(execute(&mut gate, &reserve(1, "k3"), 1).status, 201);
        let sold_out = Command::Reserve {
            product_id: "p1".into(),
            buyer: "bob".into(),
            idem_key: "k".into(),
            quantity: 1,
        };
        let p = execute(&mut gate, &sold_out, 2);
        assert_eq!(
            (p.status, p.problem, &p.body["code"]),
            (409, true, &json!("sold_out"))
        );
        assert_eq!(p.body["type"], "/problems/sold_out");
        // An admin update that would break I1 is refused whole.
        let shrink = Command::Upsert {
            product_id: "p1".into(),
            settings: Settings {
                stock_total: Some(1),
                per_buyer_max: Some(5),
                ..Settings::default()
            },
        };
        assert_eq!(
            execute(&mut gate, &shrink, 3).body["code"],
            "below_committed"
        );
        assert_eq!(gate.as_ref().unwrap().config().per_buyer_max, 2);
    }
}
