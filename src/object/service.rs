//! What the Durable Object does with a validated command: one core call,
//! and the HTTP reply for its outcome.
//!
//! Pure and synchronous, like the core: the object gives it the product and
//! `now_ms`, then writes the gate's changes and sends the reply. That keeps
//! the mapping from outcomes to status codes testable natively.

use flashgate_core::{
    AdminRefusal, Archive, CancelOutcome, ConfirmOutcome, Gate, History, ReserveOutcome,
};

use crate::http::codes::{self, ProblemCode};
use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::http::time::rfc3339;
use crate::http::views::{self, ShellStatus};
use crate::ids::IdCodec;
use crate::protocol::buyer_filter::BuyerFilter;
use crate::protocol::{Command, HistoryAnswer, ShardOp};

/// The product an object holds: its id, its gate, and the codec of its
/// reservation ids, which exist together or not at all.
pub struct Product {
    pub id: String,
    pub gate: Gate,
    pub ids: IdCodec,
    /// At home, per shard, the buyers its last drain's answer named: what
    /// the snapshot's `sold_out` carries for the edge. Memory only: after a
    /// restart home drains again before it says the product is sold out.
    pub shard_buyers: Vec<Option<BuyerFilter>>,
    /// The sale over time (`flashgate_core::history`), noted after every
    /// event and written beside the gate's rows (`ProductObject`).
    pub history: History,
}

impl Product {
    /// `id` is the product's, also for a stock shard, whose codec writes
    /// ids that name it (`IdCodec::on_shard`).
    pub fn new(id: String, gate: Gate, id_secret: &[u8]) -> Product {
        let homes_shards = if gate.shard_index() == 0 {
            usize::from(gate.shards())
        } else {
            0
        };
        Product {
            ids: IdCodec::new(id_secret, &id).on_shard(gate.shard_index(), gate.shards()),
            id,
            gate,
            shard_buyers: vec![None; homes_shards],
            history: History::default(),
        }
    }
}

/// Applies one command. `product` is `None` until an admin creates it; an
/// upsert that creates it fills it in.
pub fn execute(
    product: &mut Option<Product>,
    cmd: &Command,
    now_ms: u64,
    delivery: &ShellStatus,
    id_secret: &[u8],
    archive: &dyn Archive,
) -> Reply {
    // A stock shard's operation. The shard was made by its first reserve's
    // call home (`ProductObject::report_home`); one that does not exist
    // holds no reservation, and is not made here.
    let shard_cmd;
    let cmd = match cmd {
        Command::Shard {
            product_id,
            operation,
            ..
        } => {
            if product.is_none() {
                return match operation {
                    // Its call home failed: nothing can be decided.
                    ShardOp::Reserve { .. } => Problem::unavailable(0.5).into(),
                    ShardOp::Void { .. } => admin_problem(AdminRefusal::UnknownReservation).into(),
                    // A shard never made has seen nothing.
                    ShardOp::History => history_reply(1, &History::default()),
                    _ => Problem::unknown_reservation().into(),
                };
            }
            shard_cmd = operation.command(product_id);
            &shard_cmd
        }
        cmd => cmd,
    };
    let p = match (product.as_mut(), cmd) {
        (Some(p), _) => p,
        (None, Command::Configure { product_id, patch }) => {
            return match Gate::create(now_ms, patch) {
                Ok(mut gate) => {
                    // The object writes every change it takes, so paid
                    // records leave memory for storage, as after a load.
                    gate.set_archived();
                    let body = views::product(&gate, product_id, now_ms);
                    *product = Some(Product::new(product_id.clone(), gate, id_secret));
                    Reply::ok(201, body)
                }
                Err(refusal) => admin_problem(refusal).into(),
            };
        }
        (None, cmd) => return Problem::unknown_product(cmd.product_id()).into(),
    };
    if let Command::History { .. } = cmd {
        let shards = if p.gate.shard_index() == 0 {
            p.gate.shards()
        } else {
            1
        };
        return history_reply(shards, &p.history);
    }
    let (id, ids) = (p.id.as_str(), &p.ids);
    let g = &mut p.gate;
    match cmd {
        // A watch is accepted by the shell, which reads the object's
        // `live_state` instead; run as a command it is a product read.
        Command::GetProduct { .. } | Command::Watch { .. } => {
            Reply::ok(200, views::product(g, id, now_ms))
        }
        Command::Reserve {
            buyer,
            idem_key,
            quantity,
            ticket,
            ..
        } => reserve_reply(
            ids,
            g.handle_reserve(archive, now_ms, buyer, idem_key, *quantity, *ticket),
        ),
        Command::GetReservation {
            buyer,
            reservation_id,
            ..
        } => match g.reservation(archive, now_ms, *reservation_id, buyer) {
            Some(v) => Reply::ok(200, views::reservation(ids, &v)),
            None => Problem::unknown_reservation().into(),
        },
        Command::Confirm {
            buyer,
            reservation_id,
            payment_ref,
            ..
        } => confirm_reply(
            ids,
            g.handle_confirm(archive, now_ms, *reservation_id, buyer, payment_ref),
        ),
        Command::Cancel {
            buyer,
            reservation_id,
            ..
        } => cancel_reply(
            ids,
            *reservation_id,
            g.handle_cancel(archive, now_ms, *reservation_id, buyer),
        ),
        Command::Configure { patch, .. } => match g.configure(archive, now_ms, patch) {
            Ok(()) => Reply::ok(200, views::product(g, id, now_ms)),
            Err(refusal) => admin_problem(refusal).into(),
        },
        Command::Restock { units, .. } => match g.restock(archive, now_ms, *units) {
            Ok(()) => Reply::ok(200, views::product(g, id, now_ms)),
            Err(refusal) => admin_problem(refusal).into(),
        },
        Command::Stats { .. } => Reply::ok(
            200,
            views::stats_value(id, &g.stats(now_ms), g.config().admit_per_s, delivery),
        ),
        Command::Sync { arrivals, .. } => {
            g.handle_arrivals(now_ms, arrivals);
            Reply::ok(200, views::snapshot(g, id, now_ms, &p.shard_buyers))
        }
        Command::Void { reservation_id, .. } => match g.void(archive, now_ms, *reservation_id) {
            Ok(v) => Reply::ok(200, views::voided(ids, &v)),
            Err(refusal) => admin_problem(refusal).into(),
        },
        // The shell answers these itself, outside any batch
        // (`ProductObject::answer_report`, `answer_push`); a shard's
        // operation was unwrapped above, and a history answered.
        Command::Report { .. }
        | Command::Push { .. }
        | Command::Shard { .. }
        | Command::History { .. } => Problem::internal().into(),
    }
}

/// An object's history, as the edge merges it (`HistoryAnswer`).
fn history_reply(shards: u16, history: &History) -> Reply {
    let answer = HistoryAnswer {
        shards,
        history: history.served(),
    };
    match serde_json::to_value(answer) {
        Ok(body) => Reply::ok(200, body),
        Err(_) => Problem::internal().into(),
    }
}

/// The code a refusal answers with: the one its kind names (`codes`). Each
/// reply below returns its successes, which name none, before it builds a
/// problem, so the `Internal` here is never sent.
fn refusal_code(code: Option<ProblemCode>) -> ProblemCode {
    code.unwrap_or(ProblemCode::Internal)
}

fn reserve_reply(ids: &IdCodec, outcome: ReserveOutcome) -> Reply {
    let code = refusal_code(codes::of_reserve(outcome.kind()));
    let problem = |detail: String| Problem::new(code, detail);
    let p = match outcome {
        ReserveOutcome::Reserved {
            reservation_id,
            expires_at_ms,
            quantity,
        } => {
            return Reply::ok(
                201,
                views::hold(ids, reservation_id, expires_at_ms, quantity),
            )
        }
        ReserveOutcome::Replayed {
            reservation_id,
            expires_at_ms,
            quantity,
        } => {
            return Reply {
                replayed: true,
                ..Reply::ok(
                    200,
                    views::hold(ids, reservation_id, expires_at_ms, quantity),
                )
            }
        }
        ReserveOutcome::IdempotencyConflict { reservation_id } => {
            problem("this Idempotency-Key was already used with a different request".into())
                .with("reservation_id", ids.encode(reservation_id))
        }
        ReserveOutcome::SoldOut => problem("every unit is held or sold".into()),
        ReserveOutcome::InsufficientStock { available } => {
            problem(format!("only {available} units are available")).with("available", available)
        }
        ReserveOutcome::BuyerLimitReached { remaining } => problem(format!(
            "you may reserve {remaining} more units of this product"
        ))
        .with("remaining", remaining),
        ReserveOutcome::NotOpen { opens_at_ms } => {
            problem(format!("the sale opens at {}", rfc3339(opens_at_ms)))
                .with("opens_at", rfc3339(opens_at_ms))
                .with("opens_at_ms", opens_at_ms)
        }
        ReserveOutcome::Closed => problem("the sale is over".into()),
        ReserveOutcome::Paused => problem("the sale is paused; try again later".into()),
        ReserveOutcome::InvalidQuantity { quantity_max } => problem(format!(
            "quantity must be from 1 to {quantity_max} for this product"
        ))
        .with("quantity_max", quantity_max),
        ReserveOutcome::InvalidInput(_) => {
            problem("the buyer id or Idempotency-Key is not acceptable".into())
        }
        ReserveOutcome::Overloaded { retry_after_ms } => {
            problem("the product keeps as many reservations as it may; retry later".into())
                .with("retry_after_ms", retry_after_ms)
                .retry_after_ms(retry_after_ms)
        }
        // The words of these two come from the builders other answers share;
        // the code is still the one the kind names.
        ReserveOutcome::RateLimited { retry_after_ms } => Problem {
            code,
            ..Problem::rate_limited(retry_after_ms)
        },
        ReserveOutcome::TicketRequired => {
            problem("this product has a waiting room: join it and send the ticket".into())
        }
        ReserveOutcome::TicketExpired => {
            problem("the waiting-room ticket has expired; join again".into())
        }
        ReserveOutcome::NotAdmitted { position } => Problem {
            code,
            ..Problem::not_admitted(position, None)
        },
        ReserveOutcome::Unavailable { retry_after_ms } => problem(
            "too few units here, and whether any is left elsewhere could not be told in time; retry (it is safe with the same Idempotency-Key)".into(),
        )
        .retry_after_ms(retry_after_ms),
    };
    p.into()
}

fn confirm_reply(ids: &IdCodec, outcome: ConfirmOutcome) -> Reply {
    let code = refusal_code(codes::of_confirm(outcome.kind()));
    let p = match &outcome {
        ConfirmOutcome::Confirmed(c) => return Reply::ok(200, views::confirmation(ids, c)),
        ConfirmOutcome::Expired => Problem::new(
            code,
            "the hold expired before the confirm arrived; its units went back on sale",
        ),
        ConfirmOutcome::Cancelled => Problem::new(code, "the reservation was cancelled"),
        ConfirmOutcome::Voided => {
            Problem::new(code, "the order was voided and its payment refunded")
        }
        ConfirmOutcome::Unknown => Problem {
            code,
            ..Problem::unknown_reservation()
        },
        ConfirmOutcome::InvalidInput(_) => Problem::new(code, "payment_ref is not acceptable"),
    };
    p.into()
}

fn cancel_reply(ids: &IdCodec, id: u64, outcome: CancelOutcome) -> Reply {
    let code = refusal_code(codes::of_cancel(outcome.kind()));
    let p = match outcome {
        CancelOutcome::Cancelled { quantity } => {
            return Reply::ok(200, views::cancelled(ids, id, quantity))
        }
        CancelOutcome::Voided => {
            Problem::new(code, "the order was voided and its payment refunded")
        }
        CancelOutcome::AlreadyConfirmed => {
            Problem::new(code, "a confirmed reservation cannot be cancelled here")
        }
        CancelOutcome::AlreadyExpired => {
            Problem::new(code, "the hold expired; its units are already back on sale")
        }
        CancelOutcome::Unknown => Problem {
            code,
            ..Problem::unknown_reservation()
        },
    };
    p.into()
}

fn admin_problem(refusal: AdminRefusal) -> Problem {
    let code = codes::of_admin(refusal.kind());
    match refusal {
        AdminRefusal::StockRequired => {
            Problem::new(code, "stock_total is required to create a product")
        }
        AdminRefusal::BelowCommitted { committed } => Problem::new(
            code,
            format!("{committed} units are held or sold; the total cannot be lower"),
        )
        .with("committed", committed),
        AdminRefusal::StockTooLarge => Problem::new(
            code,
            format!(
                "the total may be at most {}",
                flashgate_core::limits::STOCK_UNITS_MAX
            ),
        ),
        AdminRefusal::InvalidConfig(e) => Problem::new(code, e.describe()),
        AdminRefusal::BuyerAboveLimit { units } => Problem::new(
            code,
            format!("a buyer already has {units} units; per_buyer_max cannot be lower"),
        )
        .with("units", units),
        AdminRefusal::SaleClosed => Problem::new(code, "a closed sale stays closed"),
        AdminRefusal::UnknownReservation => Problem::new(code, "no reservation has this id"),
        AdminRefusal::NotConfirmed => Problem::new(
            code,
            "only a confirmed order can be voided; a hold is cancelled or expires",
        ),
        AdminRefusal::InvalidShards => Problem::new(
            code,
            format!(
                "shards must be from 1 to {}",
                flashgate_core::escrow::limits::SHARDS_MAX
            ),
        ),
        AdminRefusal::ShardsFixed => Problem::new(
            code,
            "a product's shards are set when it is created and cannot change",
        ),
        AdminRefusal::NotHome => Problem::new(
            code,
            "a stock shard takes no admin's change: the product's home does",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_core::ConfigPatch;
    use serde_json::json;

    fn reserve(buyer: &str, q: u32, key: &str) -> Command {
        Command::Reserve {
            product_id: "p1".into(),
            buyer: buyer.into(),
            idem_key: key.into(),
            quantity: q,
            ticket: None,
        }
    }

    fn upsert(patch: ConfigPatch) -> Command {
        Command::Configure {
            product_id: "p1".into(),
            patch,
        }
    }

    #[test]
    fn outcomes_map_to_statuses() {
        let d = ShellStatus::default();
        let mut product = None;
        let secret = b"0123456789abcdef0123456789abcdef";
        let run = |p: &mut Option<Product>, cmd: &Command, now| {
            execute(p, cmd, now, &d, secret, &flashgate_core::NoArchive)
        };
        assert_eq!(run(&mut product, &reserve("alice", 1, "k"), 0).status, 404);
        let missing = run(&mut product, &upsert(ConfigPatch::default()), 0);
        assert_eq!(
            (missing.status, &missing.body["code"]),
            (422, &json!("invalid_body"))
        );
        assert!(product.is_none(), "a refused create creates nothing");
        let create = upsert(ConfigPatch {
            stock_total: Some(2),
            per_buyer_max: Some(2),
            ..ConfigPatch::default()
        });
        assert_eq!(run(&mut product, &create, 0).status, 201);
        let r = run(&mut product, &reserve("alice", 1, "k1"), 0);
        assert_eq!(r.status, 201);
        let codec = IdCodec::new(secret, "p1");
        assert_eq!(r.body["reservation_id"], codec.encode(1));
        let again = run(&mut product, &reserve("alice", 1, "k1"), 1);
        assert_eq!((again.status, again.replayed), (200, true));
        assert_eq!(again.body, r.body);
        let conflict = run(&mut product, &reserve("alice", 2, "k1"), 1);
        assert_eq!(
            (conflict.status, &conflict.body["code"]),
            (422, &json!("idempotency_conflict"))
        );
        assert_eq!(
            run(&mut product, &reserve("alice", 2, "k2"), 1).body["code"],
            "buyer_limit"
        );
        assert_eq!(run(&mut product, &reserve("alice", 1, "k3"), 1).status, 201);
        let p = run(&mut product, &reserve("bob", 1, "k"), 2);
        assert_eq!(
            (p.status, p.problem, &p.body["code"]),
            (409, true, &json!("sold_out"))
        );
        assert_eq!(p.body["type"], "/problems/sold_out");
        assert_eq!(p.body["title"], "Sold out");
        // Another buyer's reservation reads as unknown.
        let read = Command::GetReservation {
            product_id: "p1".into(),
            buyer: "bob".into(),
            reservation_id: 1,
        };
        assert_eq!(
            run(&mut product, &read, 3).body["code"],
            "unknown_reservation"
        );
        // An admin update that would break I1 is refused whole.
        let shrink = upsert(ConfigPatch {
            stock_total: Some(1),
            per_buyer_max: Some(5),
            ..ConfigPatch::default()
        });
        assert_eq!(
            run(&mut product, &shrink, 3).body["code"],
            "below_committed"
        );
        let g = &product.as_ref().map(|p| &p.gate).unwrap();
        assert_eq!(g.config().per_buyer_max, 2);
        // A config out of range is an invalid body, and changes nothing.
        let bad = run(
            &mut product,
            &upsert(ConfigPatch {
                quantity_max: Some(0),
                ..ConfigPatch::default()
            }),
            3,
        );
        assert_eq!(
            (bad.status, &bad.body["code"]),
            (422, &json!("invalid_body"))
        );
        let stats = run(
            &mut product,
            &Command::Stats {
                product_id: "p1".into(),
            },
            4,
        );
        let typed: flashgate_wire::GateStats = serde_json::from_value(stats.body).unwrap();
        assert_eq!((typed.held, typed.available), (2, 0));
        assert_eq!(typed.counters.reserve["sold_out"], 1);
    }
}
