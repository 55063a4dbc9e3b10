//! Property tests, one group per operation. Proptest prints the shrunk input
//! of any failure.

use flashgate_core::NoArchive;
use flashgate_core::{
    AckOutcome, CancelOutcome, Change, Config, ConfirmOutcome, Gate, HoldState, ReserveOutcome, Row,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Reserve { buyer: u8, key: u8, qty: u32 },
    Confirm { id: u64, buyer: u8 },
    Cancel { id: u64, buyer: u8 },
    Advance(u64),
    Timeout,
    AddUnits(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..12, 0u32..5).prop_map(|(buyer, key, qty)| Op::Reserve { buyer, key, qty }),
        2 => (0u64..30, 0u8..8).prop_map(|(id, buyer)| Op::Confirm { id, buyer }),
        1 => (0u64..30, 0u8..8).prop_map(|(id, buyer)| Op::Cancel { id, buyer }),
        2 => (0u64..800).prop_map(Op::Advance),
        1 => Just(Op::Timeout),
        1 => (0u64..4).prop_map(Op::AddUnits),
    ]
}

fn config() -> impl Strategy<Value = (Config, u64)> {
    (1u32..6, 1u32..4, 100u64..1_500, 0u64..1_000, 0u64..25).prop_map(
        |(per_buyer_max, quantity_max, hold_ttl_ms, idem_window_ms, stock)| {
            let c = Config {
                per_buyer_max,
                quantity_max,
                hold_ttl_ms,
                idem_window_ms,
                ..Config::default()
            };
            (c, stock)
        },
    )
}

/// Applies one operation and checks the properties of that operation.
fn apply(g: &mut Gate, now: &mut u64, op: &Op) -> Result<(), TestCaseError> {
    // Settle first, so each property compares against a settled baseline.
    // The lazy settling inside each call is checked against the model by the
    // simulator.
    g.handle_timeout(*now);
    let before = g.stats(*now);
    match *op {
        Op::Reserve { buyer, key, qty } => {
            let b = format!("b{buyer}");
            let k = format!("k{key}");
            let out = g.handle_reserve(&NoArchive, *now, &b, &k, qty, None);
            let settled = g.stats(*now);
            match out {
                ReserveOutcome::Reserved {
                    quantity,
                    expires_at_ms,
                    reservation_id,
                } => {
                    prop_assert_eq!(quantity, qty);
                    prop_assert_eq!(expires_at_ms, *now + g.config().hold_ttl_ms);
                    prop_assert_eq!(settled.held, before.held + u64::from(qty));
                    prop_assert_eq!(settled.available + u64::from(qty), before.available);
                    let v = g.reservation(&NoArchive, *now, reservation_id, &b).unwrap();
                    prop_assert_eq!(v.state, HoldState::Held);
                    // Replaying it is answered from the record and takes nothing.
                    let again = g.handle_reserve(&NoArchive, *now, &b, &k, qty, None);
                    prop_assert_eq!(
                        again,
                        ReserveOutcome::Replayed {
                            reservation_id,
                            expires_at_ms,
                            quantity
                        }
                    );
                    prop_assert_eq!(g.stats(*now).available, settled.available);
                }
                _ => {
                    // A replay, a conflict or a refusal changes nothing but
                    // the outcome counters.
                    prop_assert_eq!(
                        (
                            settled.available,
                            settled.held,
                            settled.sold,
                            settled.live_holds
                        ),
                        (
                            before.available,
                            before.held,
                            before.sold,
                            before.live_holds
                        )
                    );
                }
            }
        }
        Op::Confirm { id, buyer } => {
            let b = format!("b{buyer}");
            let out = g.handle_confirm(&NoArchive, *now, id, &b, "pay");
            let after = g.stats(*now);
            let was_held = before.held != after.held;
            if let ConfirmOutcome::Confirmed(c) = &out {
                if was_held {
                    prop_assert_eq!(c.confirmed_at_ms, *now);
                    prop_assert_eq!(after.sold, before.sold + u64::from(c.quantity));
                    prop_assert_eq!(after.held + u64::from(c.quantity), before.held);
                    prop_assert_eq!(after.outbox_backlog, before.outbox_backlog + 1);
                } else {
                    prop_assert_eq!(after.sold, before.sold);
                }
                // Confirming again returns the same data and changes nothing.
                prop_assert_eq!(
                    g.handle_confirm(&NoArchive, *now, id, &b, "other"),
                    out.clone()
                );
                prop_assert_eq!(g.stats(*now).sold, after.sold);
            } else {
                prop_assert_eq!(after.sold, before.sold);
            }
        }
        Op::Cancel { id, buyer } => {
            let b = format!("b{buyer}");
            let held_before = g
                .reservation(&NoArchive, *now, id, &b)
                .filter(|v| v.state == HoldState::Held);
            let out = g.handle_cancel(&NoArchive, *now, id, &b);
            let after = g.stats(*now);
            if let (CancelOutcome::Cancelled { quantity }, Some(v)) = (out, held_before) {
                prop_assert_eq!(quantity, v.quantity);
                prop_assert_eq!(after.held + u64::from(quantity), before.held);
                prop_assert_eq!(after.available, before.available + u64::from(quantity));
            }
        }
        Op::Advance(ms) => *now += ms,
        Op::Timeout => {
            g.handle_timeout(*now);
            // No hold or tombstone is due any more (only the outbox, which
            // the shell drains, may want attention now), and a second call
            // is a no-op.
            let outbox_waits = g.stats(*now).outbox_backlog > 0;
            prop_assert!(outbox_waits || g.poll_timeout().is_none_or(|t| t > *now));
            let s = g.stats(*now);
            prop_assert_eq!(g.handle_timeout(*now), 0);
            prop_assert_eq!(g.stats(*now), s);
        }
        Op::AddUnits(n) => {
            prop_assert_eq!(g.restock(&NoArchive, *now, n), Ok(()));
            let after = g.stats(*now);
            prop_assert_eq!(after.stock_total, before.stock_total + n);
        }
    }
    g.audit(&NoArchive).map_err(TestCaseError::fail)?;
    let s = g.stats(*now);
    prop_assert_eq!(s.available + s.held + s.sold, s.stock_total);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any sequence of operations keeps every invariant (the audit runs after
    /// each step) and each operation's own property.
    #[test]
    fn operations_keep_invariants((cfg, stock) in config(), ops in prop::collection::vec(op(), 1..120)) {
        let mut g = Gate::new(0, cfg, stock).unwrap();
        let mut now = 0;
        for op in &ops {
            apply(&mut g, &mut now, op)?;
        }
    }

    /// Once every TTL has passed and timeouts ran, nothing is held and every
    /// unit not sold is available again.
    #[test]
    fn expiry_returns_every_held_unit((cfg, stock) in config(), ops in prop::collection::vec(op(), 1..80)) {
        let mut g = Gate::new(0, cfg.clone(), stock).unwrap();
        let mut now = 0;
        for op in &ops {
            apply(&mut g, &mut now, op)?;
        }
        now += cfg.hold_ttl_ms;
        g.handle_timeout(now);
        let s = g.stats(now);
        prop_assert_eq!(s.held, 0);
        prop_assert_eq!(s.live_holds, 0);
        prop_assert_eq!(s.available, s.stock_total - s.sold);
    }

    /// Rows written from `poll_changes` restore an identical gate, which then
    /// answers exactly as the original would.
    #[test]
    fn restore_is_identical((cfg, stock) in config(), ops in prop::collection::vec(op(), 1..100), tail in prop::collection::vec(op(), 1..30)) {
        let mut g = Gate::new(0, cfg, stock).unwrap();
        let mut storage = std::collections::BTreeMap::new();
        let mut now = 0;
        for op in &ops {
            apply(&mut g, &mut now, op)?;
            for c in g.poll_changes() {
                match c {
                    Change::Put(row) => { storage.insert(row.key(), row); }
                    Change::Delete(k) => { storage.remove(&k.into()); }
                }
            }
        }
        let mut r = Gate::restore(storage.values().cloned().collect::<Vec<Row>>()).unwrap();
        prop_assert_eq!(r.rows(), g.rows());
        let mut now_r = now;
        for op in &tail {
            apply(&mut g, &mut now, op)?;
            apply(&mut r, &mut now_r, op)?;
            prop_assert_eq!(r.rows(), g.rows());
        }
    }

    /// Whatever the order of polls, acks and nacks, every confirmation is
    /// handed out in sequence and none is lost: what was acked plus what is
    /// still in the outbox is every confirmation.
    #[test]
    fn outbox_loses_nothing(n in 1usize..40, steps in prop::collection::vec((0u8..4, 1usize..8, any::<u64>()), 1..200)) {
        let mut g = Gate::new(0, Config { per_buyer_max: 1, quantity_max: 1, ..Config::default() }, n as u64).unwrap();
        for i in 0..n {
            let b = format!("b{i}");
            let ReserveOutcome::Reserved { reservation_id, .. } = g.handle_reserve(&NoArchive, 0, &b, "k", 1, None) else {
                return Err(TestCaseError::fail("reserve refused"));
            };
            let confirmed = matches!(g.handle_confirm(&NoArchive, 1, reservation_id, &b, "p"), ConfirmOutcome::Confirmed(_));
            prop_assert!(confirmed);
        }
        let mut now = 2;
        let mut acked: Vec<u64> = Vec::new();
        let mut out: Vec<u64> = Vec::new();
        for (kind, batch, seed) in steps {
            match kind {
                0 => {
                    let got = g.poll_outbox(now, batch);
                    if !got.is_empty() {
                        // Batches start right after the last ack, in order.
                        prop_assert_eq!(got[0].seq, acked.len() as u64 + 1);
                        prop_assert!(got.windows(2).all(|w| w[1].seq == w[0].seq + 1));
                        out = got.iter().map(|e| e.seq).collect();
                    }
                }
                1 => {
                    if !out.is_empty() {
                        let k = batch.min(out.len());
                        let up_to = acked.len() as u64 + k as u64;
                        prop_assert_eq!(g.handle_ack(up_to), AckOutcome::Acked { entries: k as u64 });
                        acked.extend(out.drain(..k));
                        out.clear();
                    }
                }
                2 => {
                    if g.handle_nack(now, seed) {
                        out.clear();
                    }
                }
                _ => now += (seed % 70_000) + 1,
            }
        }
        // The product's creation is the first event (its stock), then one
        // order per confirmation.
        let pending = g.stats(now).outbox_backlog as usize;
        prop_assert_eq!(acked.len() + pending, n + 1);
        let want: Vec<u64> = (1..=acked.len() as u64).collect();
        prop_assert_eq!(acked, want);
    }
}
