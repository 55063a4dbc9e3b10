//! Data-driven scenarios for the edge cases, all run through one `check`.
//!
//! Each scenario is a config line, a script of `now_ms operation` lines,
//! and the full transcript it must produce: every line of the script with
//! the complete `Debug` form of its outcome (or a stats line) after `->`.
//! The transcript is an `expect-test` snapshot, so it is compared whole;
//! `UPDATE_EXPECT=1 cargo test -p flashgate-core --test scenarios` rewrites
//! it after a deliberate change, and the diff shows what changed. A change of
//! API touches `run_op`, not the scenarios. Between steps the rows from
//! `poll_changes` are written to a map, and the `restore` operation rebuilds
//! the gate from that map alone. Lines starting with `#` are comments and are
//! copied into the transcript.

use std::collections::BTreeMap;

use expect_test::{expect, Expect};
use flashgate_core::NoArchive;
use flashgate_core::{Change, Config, Gate, Mode, OutboxEvent, Row, RowKey};

fn parse_config(line: &str) -> (Config, u64) {
    let mut c = Config {
        per_buyer_max: 5,
        quantity_max: 5,
        hold_ttl_ms: 1_000,
        idem_window_ms: 500,
        ..Config::default()
    };
    let mut stock = 10;
    for pair in line.split_whitespace() {
        let (k, v) = pair.split_once('=').expect("key=value");
        let n: u64 = v.parse().expect("number");
        match k {
            "stock" => stock = n,
            "per_buyer_max" => c.per_buyer_max = n as u32,
            "quantity_max" => c.quantity_max = n as u32,
            "ttl" => c.hold_ttl_ms = n,
            "window" => c.idem_window_ms = n,
            "opens" => c.opens_at_ms = Some(n),
            "closes" => c.closes_at_ms = Some(n),
            "reservations_max" => c.reservations_max = n as u32,
            other => panic!("unknown config key {other}"),
        }
    }
    (c, stock)
}

struct Harness {
    gate: Gate,
    storage: BTreeMap<RowKey, Row>,
}

impl Harness {
    fn flush(&mut self) {
        for change in self.gate.poll_changes() {
            match change {
                Change::Put(row) => {
                    self.storage.insert(row.key(), row);
                }
                Change::Delete(key) => {
                    self.storage.remove(&key.into());
                }
            }
        }
    }

    fn run_op(&mut self, now: u64, op: &str) -> String {
        let w: Vec<&str> = op.split_whitespace().collect();
        let num = |i: usize| -> u64 { w[i].parse().expect("number") };
        let g = &mut self.gate;
        match w[0] {
            "reserve" => format!(
                "{:?}",
                g.handle_reserve(&NoArchive, now, w[1], w[2], num(3) as u32, None)
            ),
            "confirm" => format!(
                "{:?}",
                g.handle_confirm(&NoArchive, now, num(1), w[2], w[3])
            ),
            "cancel" => format!("{:?}", g.handle_cancel(&NoArchive, now, num(1), w[2])),
            "timeout" => format!("expired {}", g.handle_timeout(now)),
            "next" => format!("{:?}", g.poll_timeout()),
            "add" => format!("{:?}", g.restock(&NoArchive, now, num(1))),
            "total" => format!("{:?}", g.set_total(&NoArchive, now, num(1))),
            "pause" => format!("{:?}", g.set_mode(now, Mode::Paused)),
            "resume" => format!("{:?}", g.set_mode(now, Mode::Active)),
            "close" => format!("{:?}", g.set_mode(now, Mode::Closed)),
            "state" => format!(
                "{:?}",
                g.reservation(&NoArchive, now, num(1), w[2])
                    .map(|v| v.state)
            ),
            "poll" => {
                let batch = g.poll_outbox(now, num(1) as usize);
                let events: Vec<String> = batch
                    .iter()
                    .map(|e| match &e.event {
                        OutboxEvent::Stock { stock_total, .. } => {
                            format!("{}:stock {stock_total}", e.seq)
                        }
                        OutboxEvent::Order { reservation_id, .. } => {
                            format!("{}:order {reservation_id}", e.seq)
                        }
                        OutboxEvent::Void { reservation_id, .. } => {
                            format!("{}:void {reservation_id}", e.seq)
                        }
                    })
                    .collect();
                format!("{events:?}")
            }
            "void" => format!("{:?}", g.void(&NoArchive, now, num(1))),
            "ack" => format!("{:?}", g.handle_ack(num(1))),
            "nack" => format!("{:?}", g.handle_nack(now, num(1))),
            "stats" => {
                let s = g.stats(now);
                format!(
                    "available={} held={} sold={} live={} backlog={} backlog_units={}",
                    s.available,
                    s.held,
                    s.sold,
                    s.live_holds,
                    s.outbox_backlog,
                    s.outbox_backlog_units
                )
            }
            "restore" => {
                self.flush();
                let rows: Vec<Row> = self.storage.values().cloned().collect();
                let restored = Gate::restore(rows).expect("restore");
                assert_eq!(restored.rows(), self.gate.rows());
                self.gate = restored;
                "restored".into()
            }
            other => panic!("unknown operation {other}"),
        }
    }
}

/// Runs `script` on a gate made from `config` and compares the transcript
/// with `want`. The audit runs after every step.
fn check(config: &str, script: &str, want: Expect) {
    let (config, stock) = parse_config(config);
    let gate = Gate::new(0, config, stock).expect("valid scenario config");
    let mut h = Harness {
        gate,
        storage: BTreeMap::new(),
    };
    let mut transcript = String::new();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            transcript.push_str(line);
            transcript.push('\n');
            continue;
        }
        let (now, op) = line.split_once(' ').expect("`now_ms operation`");
        let now: u64 = now.parse().expect("now_ms");
        let got = h.run_op(now, op);
        h.gate
            .audit(&NoArchive)
            .unwrap_or_else(|e| panic!("after `{line}`: {e}"));
        h.flush();
        transcript.push_str(&format!("{line} -> {got}\n"));
    }
    want.assert_eq(&transcript);
}

/// Confirm after expiry is refused and the units are back.
#[test]
fn confirm_after_expiry_is_refused_and_the_units_are_back() {
    check(
        "ttl=1000",
        "
        0 reserve alice k1 2
        1200 confirm 1 alice pay-1
        1200 stats
        # After the idempotency window the reservation is forgotten.
        1500 confirm 1 alice pay-1
        ",
        expect![[r#"
            0 reserve alice k1 2 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 2 }
            1200 confirm 1 alice pay-1 -> Expired
            1200 stats -> available=10 held=0 sold=0 live=0 backlog=1 backlog_units=0
            # After the idempotency window the reservation is forgotten.
            1500 confirm 1 alice pay-1 -> Unknown
        "#]],
    );
}

/// Confirm at exactly the expiry instant is refused, before it succeeds.
#[test]
fn confirm_at_exactly_the_expiry_instant_is_refused_before_it_succeeds() {
    check(
        "ttl=1000",
        "
        0 reserve alice k1 1
        0 reserve bob k1 1
        999 confirm 1 alice pay-1
        # No timeout was handled: the confirm itself sees the deadline.
        1000 confirm 2 bob pay-2
        1000 stats
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            0 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 1000, quantity: 1 }
            999 confirm 1 alice pay-1 -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "pay-1", confirmed_at_ms: 999, outbox_seq: 2 })
            # No timeout was handled: the confirm itself sees the deadline.
            1000 confirm 2 bob pay-2 -> Expired
            1000 stats -> available=9 held=0 sold=1 live=0 backlog=2 backlog_units=1
        "#]],
    );
}

/// Double confirm returns the same data.
#[test]
fn double_confirm_returns_the_same_data() {
    check(
        "",
        "
        0 reserve alice k1 1
        10 confirm 1 alice pay-1
        20 confirm 1 alice pay-2
        20 restore
        30 confirm 1 alice pay-1
        30 stats
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            10 confirm 1 alice pay-1 -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "pay-1", confirmed_at_ms: 10, outbox_seq: 2 })
            20 confirm 1 alice pay-2 -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "pay-1", confirmed_at_ms: 10, outbox_seq: 2 })
            20 restore -> restored
            30 confirm 1 alice pay-1 -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "pay-1", confirmed_at_ms: 10, outbox_seq: 2 })
            30 stats -> available=9 held=0 sold=1 live=0 backlog=2 backlog_units=1
        "#]],
    );
}

/// Cancel after confirm is refused; cancel twice is idempotent.
#[test]
fn cancel_after_confirm_is_refused_cancel_twice_is_idempotent() {
    check(
        "",
        "
        0 reserve alice k1 1
        0 reserve alice k2 2
        5 confirm 1 alice p
        6 cancel 1 alice
        7 cancel 2 alice
        8 cancel 2 alice
        8 confirm 2 alice p
        8 stats
        2000 cancel 1 alice
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            0 reserve alice k2 2 -> Reserved { reservation_id: 2, expires_at_ms: 1000, quantity: 2 }
            5 confirm 1 alice p -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "p", confirmed_at_ms: 5, outbox_seq: 2 })
            6 cancel 1 alice -> AlreadyConfirmed
            7 cancel 2 alice -> Cancelled { quantity: 2 }
            8 cancel 2 alice -> Cancelled { quantity: 2 }
            8 confirm 2 alice p -> Cancelled
            8 stats -> available=9 held=0 sold=1 live=0 backlog=2 backlog_units=1
            2000 cancel 1 alice -> AlreadyConfirmed
        "#]],
    );
}

/// A replay with a different body is a conflict; keys are per buyer.
#[test]
fn a_replay_with_a_different_body_is_a_conflict_keys_are_per_buyer() {
    check(
        "",
        "
        0 reserve alice k1 1
        1 reserve alice k1 2
        2 reserve alice k1 1
        3 reserve bob k1 1
        3 stats
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1 reserve alice k1 2 -> IdempotencyConflict { reservation_id: 1 }
            2 reserve alice k1 1 -> Replayed { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            3 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 1003, quantity: 1 }
            3 stats -> available=8 held=2 sold=0 live=2 backlog=1 backlog_units=0
        "#]],
    );
}

/// A replay after expiry gets its first answer until the window ends.
#[test]
fn a_replay_after_expiry_gets_its_first_answer_until_the_window_ends() {
    check(
        "ttl=1000 window=500",
        "
        0 reserve alice k1 1
        1200 reserve alice k1 1
        1200 state 1 alice
        1499 reserve alice k1 1
        1500 reserve alice k1 1
        1500 state 1 alice
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1200 reserve alice k1 1 -> Replayed { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1200 state 1 alice -> Some(Expired)
            1499 reserve alice k1 1 -> Replayed { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1500 reserve alice k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 2500, quantity: 1 }
            1500 state 1 alice -> None
        "#]],
    );
}

/// Quantity zero, above quantity_max, and above available.
#[test]
fn quantity_zero_above_quantity_max_and_above_available() {
    check(
        "stock=3 quantity_max=4 per_buyer_max=10",
        "
        0 reserve alice k1 0
        0 reserve alice k2 5
        0 reserve alice k3 4
        0 stats
        0 reserve alice k4 3
        0 reserve bob k1 1
        ",
        expect![[r#"
            0 reserve alice k1 0 -> InvalidQuantity { quantity_max: 4 }
            0 reserve alice k2 5 -> InvalidQuantity { quantity_max: 4 }
            0 reserve alice k3 4 -> InsufficientStock { available: 3 }
            0 stats -> available=3 held=0 sold=0 live=0 backlog=1 backlog_units=0
            0 reserve alice k4 3 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 3 }
            0 reserve bob k1 1 -> SoldOut
        "#]],
    );
}

/// A sale not yet open, then open, then past its window.
#[test]
fn a_sale_not_yet_open_then_open_then_past_its_window() {
    check(
        "opens=5000 closes=8000",
        "
        0 reserve alice k1 1
        4999 reserve alice k1 1
        5000 reserve alice k1 1
        7500 reserve bob k1 1
        8000 reserve alice k2 1
        # A hold made in the window can still be paid after it closes.
        8100 confirm 2 bob p
        ",
        expect![[r#"
            0 reserve alice k1 1 -> NotOpen { opens_at_ms: 5000 }
            4999 reserve alice k1 1 -> NotOpen { opens_at_ms: 5000 }
            5000 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 6000, quantity: 1 }
            7500 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 8500, quantity: 1 }
            8000 reserve alice k2 1 -> Closed
            # A hold made in the window can still be paid after it closes.
            8100 confirm 2 bob p -> Confirmed(Confirmation { reservation_id: 2, quantity: 1, payment_ref: "p", confirmed_at_ms: 8100, outbox_seq: 2 })
        "#]],
    );
}

/// An admin close is final, a pause is not.
#[test]
fn an_admin_close_is_final_a_pause_is_not() {
    check(
        "",
        "
        0 reserve alice k1 1
        1 pause
        2 reserve alice k2 1
        3 confirm 1 alice p
        4 resume
        5 reserve alice k3 1
        6 close
        7 reserve alice k4 1
        8 resume
        9 cancel 2 alice
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1 pause -> Ok(())
            2 reserve alice k2 1 -> Paused
            3 confirm 1 alice p -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "p", confirmed_at_ms: 3, outbox_seq: 2 })
            4 resume -> Ok(())
            5 reserve alice k3 1 -> Reserved { reservation_id: 2, expires_at_ms: 1005, quantity: 1 }
            6 close -> Ok(())
            7 reserve alice k4 1 -> Closed
            8 resume -> Err(SaleClosed)
            9 cancel 2 alice -> Cancelled { quantity: 1 }
        "#]],
    );
}

/// Per_buyer_max holds across several reservations.
#[test]
fn per_buyer_max_holds_across_several_reservations() {
    check(
        "per_buyer_max=3 quantity_max=2",
        "
        0 reserve alice k1 2
        0 reserve alice k2 2
        0 reserve alice k3 1
        0 reserve alice k4 1
        1 confirm 2 alice p
        # A confirmed unit still counts; a cancelled hold frees its units.
        2 cancel 1 alice
        3 reserve alice k5 2
        4 reserve alice k6 1
        # Expiry frees units too.
        1003 reserve alice k7 2
        1003 reserve bob k1 2
        ",
        expect![[r#"
            0 reserve alice k1 2 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 2 }
            0 reserve alice k2 2 -> BuyerLimitReached { remaining: 1 }
            0 reserve alice k3 1 -> Reserved { reservation_id: 2, expires_at_ms: 1000, quantity: 1 }
            0 reserve alice k4 1 -> BuyerLimitReached { remaining: 0 }
            1 confirm 2 alice p -> Confirmed(Confirmation { reservation_id: 2, quantity: 1, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 2 })
            # A confirmed unit still counts; a cancelled hold frees its units.
            2 cancel 1 alice -> Cancelled { quantity: 2 }
            3 reserve alice k5 2 -> Reserved { reservation_id: 3, expires_at_ms: 1003, quantity: 2 }
            4 reserve alice k6 1 -> BuyerLimitReached { remaining: 0 }
            # Expiry frees units too.
            1003 reserve alice k7 2 -> Reserved { reservation_id: 4, expires_at_ms: 2003, quantity: 2 }
            1003 reserve bob k1 2 -> Reserved { reservation_id: 5, expires_at_ms: 2003, quantity: 2 }
        "#]],
    );
}

/// Expiry restocks exactly the held units, driven by timeouts.
#[test]
fn expiry_restocks_exactly_the_held_units_driven_by_timeouts() {
    check(
        "ttl=1000",
        "
        0 reserve alice k1 2
        100 reserve bob k1 3
        200 reserve carol k1 1
        200 confirm 3 carol p
        200 next
        200 poll 10
        200 next
        200 ack 2
        999 timeout
        1000 timeout
        1000 stats
        1000 timeout
        1100 timeout
        1100 stats
        # The tombstones age out after the window: nothing is left to do.
        1600 timeout
        1600 next
        ",
        expect![[r#"
            0 reserve alice k1 2 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 2 }
            100 reserve bob k1 3 -> Reserved { reservation_id: 2, expires_at_ms: 1100, quantity: 3 }
            200 reserve carol k1 1 -> Reserved { reservation_id: 3, expires_at_ms: 1200, quantity: 1 }
            200 confirm 3 carol p -> Confirmed(Confirmation { reservation_id: 3, quantity: 1, payment_ref: "p", confirmed_at_ms: 200, outbox_seq: 2 })
            200 next -> Some(0)
            200 poll 10 -> ["1:stock 10", "2:order 3"]
            200 next -> Some(1000)
            200 ack 2 -> Acked { entries: 2 }
            999 timeout -> expired 0
            1000 timeout -> expired 1
            1000 stats -> available=6 held=3 sold=1 live=1 backlog=0 backlog_units=0
            1000 timeout -> expired 0
            1100 timeout -> expired 1
            1100 stats -> available=9 held=0 sold=1 live=0 backlog=0 backlog_units=0
            # The tombstones age out after the window: nothing is left to do.
            1600 timeout -> expired 0
            1600 next -> None
        "#]],
    );
}

/// A total below held plus sold is refused.
#[test]
fn a_total_below_held_plus_sold_is_refused() {
    check(
        "",
        "
        0 reserve alice k1 3
        1 confirm 1 alice p
        2 reserve bob k1 2
        3 total 4
        3 stats
        4 total 5
        4 stats
        5 reserve carol k1 1
        6 add 2
        6 reserve carol k1 1
        7 total 1000000001
        ",
        expect![[r#"
            0 reserve alice k1 3 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 3 }
            1 confirm 1 alice p -> Confirmed(Confirmation { reservation_id: 1, quantity: 3, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 2 })
            2 reserve bob k1 2 -> Reserved { reservation_id: 2, expires_at_ms: 1002, quantity: 2 }
            3 total 4 -> Err(BelowCommitted { committed: 5 })
            3 stats -> available=5 held=2 sold=3 live=1 backlog=2 backlog_units=3
            4 total 5 -> Ok(())
            4 stats -> available=0 held=2 sold=3 live=1 backlog=3 backlog_units=3
            5 reserve carol k1 1 -> SoldOut
            6 add 2 -> Ok(())
            6 reserve carol k1 1 -> Reserved { reservation_id: 3, expires_at_ms: 1006, quantity: 1 }
            7 total 1000000001 -> Err(StockTooLarge)
        "#]],
    );
}

/// At the record limit new reserves wait for the oldest tombstone.
#[test]
fn at_the_record_limit_new_reserves_wait_for_the_oldest_tombstone() {
    check(
        "reservations_max=2 ttl=1000 window=500",
        "
        0 reserve alice k1 1
        10 reserve bob k1 1
        20 reserve carol k1 1
        30 cancel 1 alice
        # The tombstone is kept for replay: still two records.
        40 reserve carol k1 1
        40 reserve alice k1 1
        1500 reserve carol k1 1
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            10 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 1010, quantity: 1 }
            20 reserve carol k1 1 -> Overloaded { retry_after_ms: 1480 }
            30 cancel 1 alice -> Cancelled { quantity: 1 }
            # The tombstone is kept for replay: still two records.
            40 reserve carol k1 1 -> Overloaded { retry_after_ms: 1460 }
            40 reserve alice k1 1 -> Replayed { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1500 reserve carol k1 1 -> Reserved { reservation_id: 3, expires_at_ms: 2500, quantity: 1 }
        "#]],
    );
}

/// Unknown reservations, and another buyer's reservation.
#[test]
fn unknown_reservations_and_another_buyer_s_reservation() {
    check(
        "",
        "
        0 confirm 99 alice p
        0 cancel 99 alice
        0 reserve alice k1 1
        1 confirm 1 mallory p
        1 cancel 1 mallory
        1 stats
        ",
        expect![[r#"
            0 confirm 99 alice p -> Unknown
            0 cancel 99 alice -> Unknown
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1 confirm 1 mallory p -> Unknown
            1 cancel 1 mallory -> Unknown
            1 stats -> available=9 held=1 sold=0 live=1 backlog=1 backlog_units=0
        "#]],
    );
}

/// The outbox redelivers after a nack, never after an ack.
#[test]
fn the_outbox_redelivers_after_a_nack_never_after_an_ack() {
    check(
        "",
        "
        0 reserve alice k1 1
        0 reserve bob k1 1
        0 reserve carol k1 1
        1 confirm 1 alice p
        1 confirm 2 bob p
        1 confirm 3 carol p
        2 poll 2
        2 poll 2
        3 nack 7
        3 poll 2
        600 poll 2
        601 restore
        # The lease was not persisted: the batch goes out again.
        601 poll 5
        602 ack 2
        602 ack 2
        603 poll 5
        603 ack 5
        603 ack 4
        604 poll 5
        604 stats
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            0 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 1000, quantity: 1 }
            0 reserve carol k1 1 -> Reserved { reservation_id: 3, expires_at_ms: 1000, quantity: 1 }
            1 confirm 1 alice p -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 2 })
            1 confirm 2 bob p -> Confirmed(Confirmation { reservation_id: 2, quantity: 1, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 3 })
            1 confirm 3 carol p -> Confirmed(Confirmation { reservation_id: 3, quantity: 1, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 4 })
            2 poll 2 -> ["1:stock 10", "2:order 1"]
            2 poll 2 -> []
            3 nack 7 -> true
            3 poll 2 -> []
            600 poll 2 -> ["1:stock 10", "2:order 1"]
            601 restore -> restored
            # The lease was not persisted: the batch goes out again.
            601 poll 5 -> ["1:stock 10", "2:order 1", "3:order 2", "4:order 3"]
            602 ack 2 -> Acked { entries: 2 }
            602 ack 2 -> Stale
            603 poll 5 -> ["3:order 2", "4:order 3"]
            603 ack 5 -> NotHandedOut
            603 ack 4 -> Acked { entries: 2 }
            604 poll 5 -> []
            604 stats -> available=7 held=0 sold=3 live=0 backlog=0 backlog_units=0
        "#]],
    );
}

/// A lapsed lease hands the batch out again.
#[test]
fn a_lapsed_lease_hands_the_batch_out_again() {
    check(
        "",
        "
        0 reserve alice k1 1
        1 confirm 1 alice p
        2 poll 1
        2 next
        30001 poll 1
        30002 poll 1
        ",
        expect![[r#"
            0 reserve alice k1 1 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }
            1 confirm 1 alice p -> Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: "p", confirmed_at_ms: 1, outbox_seq: 2 })
            2 poll 1 -> ["1:stock 10"]
            2 next -> Some(30002)
            30001 poll 1 -> []
            30002 poll 1 -> ["1:stock 10"]
        "#]],
    );
}

/// A void refunds a confirmed order: the units come back, the buyer may buy
/// again, and the void follows the order through the outbox; a restock
/// travels the outbox too.
#[test]
fn a_void_returns_the_units_and_travels_the_outbox_after_its_order() {
    check(
        "stock=3 per_buyer_max=2",
        "
        0 reserve alice k1 2
        1 void 1
        1 confirm 1 alice pay-1
        2 reserve bob k1 1
        3 reserve carol k1 1
        4 void 1
        4 stats
        4 void 1
        5 confirm 1 alice pay-1
        5 cancel 1 alice
        5 state 1 alice
        6 reserve alice k2 2
        7 add 2
        8 void 99
        8 poll 10
        9 restore
        9 poll 10
        9 ack 4
        10 poll 10
        11 stats
        ",
        expect![[r#"
            0 reserve alice k1 2 -> Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 2 }
            1 void 1 -> Err(NotConfirmed)
            1 confirm 1 alice pay-1 -> Confirmed(Confirmation { reservation_id: 1, quantity: 2, payment_ref: "pay-1", confirmed_at_ms: 1, outbox_seq: 2 })
            2 reserve bob k1 1 -> Reserved { reservation_id: 2, expires_at_ms: 1002, quantity: 1 }
            3 reserve carol k1 1 -> SoldOut
            4 void 1 -> Ok(Voided { reservation_id: 1, quantity: 2, voided_at_ms: 4 })
            4 stats -> available=2 held=1 sold=0 live=1 backlog=3 backlog_units=0
            4 void 1 -> Ok(Voided { reservation_id: 1, quantity: 2, voided_at_ms: 4 })
            5 confirm 1 alice pay-1 -> Voided
            5 cancel 1 alice -> Voided
            5 state 1 alice -> Some(Voided)
            6 reserve alice k2 2 -> Reserved { reservation_id: 3, expires_at_ms: 1006, quantity: 2 }
            7 add 2 -> Ok(())
            8 void 99 -> Err(UnknownReservation)
            8 poll 10 -> ["1:stock 3", "2:order 1", "3:void 1", "4:stock 5"]
            9 restore -> restored
            9 poll 10 -> ["1:stock 3", "2:order 1", "3:void 1", "4:stock 5"]
            9 ack 4 -> Acked { entries: 4 }
            10 poll 10 -> []
            11 stats -> available=2 held=3 sold=0 live=2 backlog=0 backlog_units=0
        "#]],
    );
}
