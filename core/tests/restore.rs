//! Restore refuses an outbox that disagrees with the records it forwards:
//! an order or void must name its reservation, which must name it back by
//! the same sequence number, and repeat the record's buyer, quantity,
//! payment and times. Each corruption is tried on both restores: every
//! record in memory, and paid records left in storage (archived).

use flashgate_core::{
    Config, ConfirmOutcome, Gate, NoArchive, OutboxEvent, ReserveOutcome, RestoreError, Row,
};

/// A product with one paid order, one voided order and one hold, none of
/// their outbox entries acked: the rows as stored.
fn stored() -> Vec<Row> {
    let mut g = Gate::new(0, Config::default(), 10).unwrap();
    let mut paid = |buyer: &str, now: u64| {
        let ReserveOutcome::Reserved { reservation_id, .. } =
            g.handle_reserve(&NoArchive, now, buyer, "k", 2, None)
        else {
            panic!("reserved")
        };
        let confirmed = g.handle_confirm(&NoArchive, now + 1, reservation_id, buyer, "pay-1");
        assert!(matches!(confirmed, ConfirmOutcome::Confirmed(_)));
        reservation_id
    };
    paid("alice", 10);
    let voided = paid("bob", 20);
    g.void(&NoArchive, 30, voided).unwrap();
    let held = g.handle_reserve(&NoArchive, 40, "holder", "h", 1, None);
    assert!(matches!(held, ReserveOutcome::Reserved { .. }));
    g.rows()
}

fn restores(rows: &[Row]) -> [Result<(), RestoreError>; 2] {
    [
        Gate::restore(rows.to_vec()).map(drop),
        Gate::restore_archived(rows.to_vec()).map(drop),
    ]
}

/// `rows` with the outbox entry `pick` finds changed by `change`.
fn corrupt(
    rows: &[Row],
    pick: impl Fn(&OutboxEvent) -> bool,
    change: impl Fn(&mut OutboxEvent),
) -> Vec<Row> {
    let mut out = rows.to_vec();
    let entry = out
        .iter_mut()
        .find_map(|r| match r {
            Row::Outbox(e) if pick(&e.event) => Some(e),
            _ => None,
        })
        .expect("the entry is there");
    change(&mut entry.event);
    out
}

#[test]
fn an_untouched_store_restores_both_ways() {
    for r in restores(&stored()) {
        r.unwrap();
    }
}

#[test]
fn an_order_or_void_that_disagrees_with_its_record_is_refused() {
    let rows = stored();
    let order =
        |e: &OutboxEvent| matches!(e, OutboxEvent::Order { buyer, .. } if &**buyer == "alice");
    let void = |e: &OutboxEvent| matches!(e, OutboxEvent::Void { .. });
    let cases: Vec<(&str, Vec<Row>)> = vec![
        (
            "another buyer",
            corrupt(&rows, order, |e| {
                if let OutboxEvent::Order { buyer, .. } = e {
                    *buyer = "mallory".into();
                }
            }),
        ),
        (
            "another quantity",
            corrupt(&rows, order, |e| {
                if let OutboxEvent::Order { quantity, .. } = e {
                    *quantity = 7;
                }
            }),
        ),
        (
            "another payment",
            corrupt(&rows, order, |e| {
                if let OutboxEvent::Order { payment_ref, .. } = e {
                    *payment_ref = "pay-2".into();
                }
            }),
        ),
        (
            "another confirmation time",
            corrupt(&rows, order, |e| {
                if let OutboxEvent::Order {
                    confirmed_at_ms, ..
                } = e
                {
                    *confirmed_at_ms += 1;
                }
            }),
        ),
        (
            "a void of another quantity",
            corrupt(&rows, void, |e| {
                if let OutboxEvent::Void { quantity, .. } = e {
                    *quantity = 1;
                }
            }),
        ),
        (
            "a void at another time",
            corrupt(&rows, void, |e| {
                if let OutboxEvent::Void { voided_at_ms, .. } = e {
                    *voided_at_ms += 5;
                }
            }),
        ),
    ];
    for (name, rows) in cases {
        for (how, r) in ["in memory", "archived"].iter().zip(restores(&rows)) {
            assert!(
                matches!(r, Err(RestoreError::BadReservation(_, _))),
                "{name}, {how}: {r:?}"
            );
        }
    }
}
