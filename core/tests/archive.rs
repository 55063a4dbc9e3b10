//! An archived gate over storage held as rows: paying buyers leave nothing
//! in memory, and a restock that outgrows the paying buyers' filter
//! rebuilds it from storage without losing anyone.

use std::collections::BTreeMap;

use flashgate_core::{Change, Config, ConfirmOutcome, Gate, ReserveOutcome, Row, RowKey};

fn write(gate: &mut Gate, storage: &mut BTreeMap<RowKey, Row>) {
    for change in gate.poll_changes() {
        match change {
            Change::Put(row) => {
                storage.insert(row.key(), row);
            }
            Change::Delete(key) => {
                storage.remove(&key.into());
            }
        }
    }
}

#[test]
fn a_restock_rebuilds_the_paying_buyers_filter_from_storage() {
    let config = Config {
        per_buyer_max: 2,
        quantity_max: 2,
        hold_ttl_ms: 60_000,
        ..Config::default()
    };
    let mut gate = Gate::new(0, config, 100).unwrap();
    gate.set_archived();
    let mut storage = BTreeMap::new();
    write(&mut gate, &mut storage);
    let buyers: Vec<String> = (0..50).map(|i| format!("payer-{i}")).collect();
    for b in &buyers {
        let ReserveOutcome::Reserved { reservation_id, .. } =
            gate.handle_reserve(&storage, 1, b, "first", 1, None)
        else {
            panic!("{b} could not reserve");
        };
        write(&mut gate, &mut storage);
        let paid = gate.handle_confirm(&storage, 2, reservation_id, b, "pay");
        assert!(matches!(paid, ConfirmOutcome::Confirmed(_)), "{paid:?}");
        write(&mut gate, &mut storage);
    }
    // Nothing of them stays in memory: no record, no slot.
    assert!(gate
        .rows()
        .iter()
        .all(|r| !matches!(r, Row::Reservation(_))));
    assert_eq!(gate.stats(3).buyers, 50);
    let before = gate.buyers_filter().bytes().len();

    // Far past what the filter was sized for: it is rebuilt, larger.
    gate.restock(&storage, 3, 1_000_000).unwrap();
    write(&mut gate, &mut storage);
    let after = gate.buyers_filter();
    assert!(
        after.bytes().len() > before,
        "{} after {before}",
        after.bytes().len()
    );
    for b in &buyers {
        assert!(after.may_contain(b), "{b} fell out of the filter");
        // Their keys still replay, and their paid unit still counts.
        let replay = gate.handle_reserve(&storage, 4, b, "first", 1, None);
        assert!(
            matches!(replay, ReserveOutcome::Replayed { .. }),
            "{b}: {replay:?}"
        );
        let over = gate.handle_reserve(&storage, 4, b, "second", 2, None);
        assert_eq!(
            over,
            ReserveOutcome::BuyerLimitReached { remaining: 1 },
            "{b}"
        );
    }
    gate.audit(&storage).unwrap();
}
