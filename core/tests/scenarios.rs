//! Data-driven scenarios for the edge cases, all run through one `check`.
//!
//! Each scenario is a config line and a list of `(now_ms, operation,
//! expected)` steps. The expected text is the outcome's `Debug` form (or a
//! prefix of it), or a stats line. A change of API touches `run_op`, not the
//! scenarios. Between steps the rows from `take_changes` are written to a map,
//! and the `restore` operation rebuilds the gate from that map alone.

use std::collections::BTreeMap;

use flashgate_core::{Change, Config, Gate, Row, RowKey};

struct Scenario {
    name: &'static str,
    /// `key=value` pairs over `Config::default()`, plus `stock=N`.
    config: &'static str,
    steps: &'static [(u64, &'static str, &'static str)],
}

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
        for change in self.gate.take_changes() {
            match change {
                Change::Put(row) => {
                    self.storage.insert(row.key(), row);
                }
                Change::Delete(key) => {
                    self.storage.remove(&key);
                }
            }
        }
    }

    fn run_op(&mut self, now: u64, op: &str) -> String {
        let w: Vec<&str> = op.split_whitespace().collect();
        let num = |i: usize| -> u64 { w[i].parse().expect("number") };
        let g = &mut self.gate;
        match w[0] {
            "reserve" => format!("{:?}", g.reserve(now, w[1], w[2], num(3) as u32)),
            "confirm" => format!("{:?}", g.confirm(now, num(1), w[2], w[3])),
            "cancel" => format!("{:?}", g.cancel(now, num(1), w[2])),
            "timeout" => format!("expired {}", g.handle_timeout(now)),
            "next" => format!("{:?}", g.poll_timeout()),
            "add" => format!("{:?}", g.add_units(now, num(1))),
            "total" => format!("{:?}", g.set_total(now, num(1))),
            "pause" => format!("{:?}", g.pause(now)),
            "resume" => format!("{:?}", g.resume(now)),
            "close" => format!("{:?}", g.close(now)),
            "state" => format!("{:?}", g.reservation(num(1), now).map(|v| v.state)),
            "poll" => {
                let batch = g.poll_outbox(now, num(1) as usize);
                let ids: Vec<u64> = batch.iter().map(|e| e.reservation_id).collect();
                format!("{ids:?}")
            }
            "ack" => format!("{:?}", g.ack_outbox(num(1))),
            "nack" => format!("{:?}", g.nack_outbox(now, num(1))),
            "stats" => {
                let s = g.stats(now);
                format!(
                    "available={} held={} sold={} live={} backlog={}",
                    s.available, s.held, s.sold, s.live_holds, s.outbox_backlog
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

fn check(s: &Scenario) {
    let (config, stock) = parse_config(s.config);
    let gate = Gate::new(config, stock).expect("valid scenario config");
    let mut h = Harness {
        gate,
        storage: BTreeMap::new(),
    };
    for (i, &(now, op, want)) in s.steps.iter().enumerate() {
        let got = h.run_op(now, op);
        assert!(
            got.starts_with(want),
            "scenario '{}', step {i} (t={now} {op}):\n  want {want}\n  got  {got}",
            s.name
        );
        h.gate
            .audit()
            .unwrap_or_else(|e| panic!("scenario '{}', step {i}: {e}", s.name));
        h.flush();
    }
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "confirm after expiry is refused and the units are back",
        config: "ttl=1000",
        steps: &[
            (0, "reserve alice k1 2", "Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 2 }"),
            (1200, "confirm 1 alice pay-1", "Expired"),
            (1200, "stats", "available=10 held=0 sold=0 live=0 backlog=0"),
            // After the idempotency window the reservation is forgotten.
            (1500, "confirm 1 alice pay-1", "Unknown"),
        ],
    },
    Scenario {
        name: "confirm at exactly the expiry instant is refused, before it succeeds",
        config: "ttl=1000",
        steps: &[
            (0, "reserve alice k1 1", "Reserved { reservation_id: 1"),
            (0, "reserve bob k1 1", "Reserved { reservation_id: 2"),
            (999, "confirm 1 alice pay-1", "Confirmed"),
            // No timeout was handled: the confirm itself sees the deadline.
            (1000, "confirm 2 bob pay-2", "Expired"),
            (1000, "stats", "available=9 held=0 sold=1 live=0 backlog=1"),
        ],
    },
    Scenario {
        name: "double confirm returns the same data",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (10, "confirm 1 alice pay-1", "Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: \"pay-1\", confirmed_at_ms: 10, outbox_seq: 1 })"),
            (20, "confirm 1 alice pay-2", "Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: \"pay-1\", confirmed_at_ms: 10, outbox_seq: 1 })"),
            (20, "restore", "restored"),
            (30, "confirm 1 alice pay-1", "Confirmed(Confirmation { reservation_id: 1, quantity: 1, payment_ref: \"pay-1\", confirmed_at_ms: 10, outbox_seq: 1 })"),
            (30, "stats", "available=9 held=0 sold=1 live=0 backlog=1"),
        ],
    },
    Scenario {
        name: "cancel after confirm is refused; cancel twice is idempotent",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (0, "reserve alice k2 2", "Reserved"),
            (5, "confirm 1 alice p", "Confirmed"),
            (6, "cancel 1 alice", "AlreadyConfirmed"),
            (7, "cancel 2 alice", "Cancelled { quantity: 2 }"),
            (8, "cancel 2 alice", "Cancelled { quantity: 2 }"),
            (8, "confirm 2 alice p", "Cancelled"),
            (8, "stats", "available=9 held=0 sold=1 live=0 backlog=1"),
            (2000, "cancel 1 alice", "AlreadyConfirmed"),
        ],
    },
    Scenario {
        name: "a replay with a different body is a conflict; keys are per buyer",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }"),
            (1, "reserve alice k1 2", "IdempotencyConflict { reservation_id: 1 }"),
            (2, "reserve alice k1 1", "Replayed { reservation_id: 1, expires_at_ms: 1000, quantity: 1 }"),
            (3, "reserve bob k1 1", "Reserved { reservation_id: 2"),
            (3, "stats", "available=8 held=2 sold=0 live=2 backlog=0"),
        ],
    },
    Scenario {
        name: "a replay after expiry gets its first answer until the window ends",
        config: "ttl=1000 window=500",
        steps: &[
            (0, "reserve alice k1 1", "Reserved { reservation_id: 1, expires_at_ms: 1000"),
            (1200, "reserve alice k1 1", "Replayed { reservation_id: 1, expires_at_ms: 1000"),
            (1200, "state 1", "Some(Expired)"),
            (1499, "reserve alice k1 1", "Replayed { reservation_id: 1"),
            (1500, "reserve alice k1 1", "Reserved { reservation_id: 2"),
            (1500, "state 1", "None"),
        ],
    },
    Scenario {
        name: "quantity zero, above quantity_max, and above available",
        config: "stock=3 quantity_max=4 per_buyer_max=10",
        steps: &[
            (0, "reserve alice k1 0", "InvalidQuantity { quantity_max: 4 }"),
            (0, "reserve alice k2 5", "InvalidQuantity { quantity_max: 4 }"),
            (0, "reserve alice k3 4", "InsufficientStock { available: 3 }"),
            (0, "stats", "available=3 held=0 sold=0 live=0 backlog=0"),
            (0, "reserve alice k4 3", "Reserved"),
            (0, "reserve bob k1 1", "SoldOut"),
        ],
    },
    Scenario {
        name: "a sale not yet open, then open, then past its window",
        config: "opens=5000 closes=8000",
        steps: &[
            (0, "reserve alice k1 1", "NotOpen { opens_at_ms: 5000 }"),
            (4999, "reserve alice k1 1", "NotOpen { opens_at_ms: 5000 }"),
            (5000, "reserve alice k1 1", "Reserved"),
            (7500, "reserve bob k1 1", "Reserved { reservation_id: 2"),
            (8000, "reserve alice k2 1", "Closed"),
            // A hold made in the window can still be paid after it closes.
            (8100, "confirm 2 bob p", "Confirmed"),
        ],
    },
    Scenario {
        name: "an admin close is final, a pause is not",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (1, "pause", "Done"),
            (2, "reserve alice k2 1", "Paused"),
            (3, "confirm 1 alice p", "Confirmed"),
            (4, "resume", "Done"),
            (5, "reserve alice k3 1", "Reserved"),
            (6, "close", "Done"),
            (7, "reserve alice k4 1", "Closed"),
            (8, "resume", "SaleClosed"),
            (9, "cancel 2 alice", "Cancelled { quantity: 1 }"),
        ],
    },
    Scenario {
        name: "per_buyer_max holds across several reservations",
        config: "per_buyer_max=3 quantity_max=2",
        steps: &[
            (0, "reserve alice k1 2", "Reserved { reservation_id: 1"),
            (0, "reserve alice k2 2", "BuyerLimitReached { remaining: 1 }"),
            (0, "reserve alice k3 1", "Reserved { reservation_id: 2"),
            (0, "reserve alice k4 1", "BuyerLimitReached { remaining: 0 }"),
            (1, "confirm 2 alice p", "Confirmed"),
            // A confirmed unit still counts; a cancelled hold frees its units.
            (2, "cancel 1 alice", "Cancelled { quantity: 2 }"),
            (3, "reserve alice k5 2", "Reserved { reservation_id: 3"),
            (4, "reserve alice k6 1", "BuyerLimitReached { remaining: 0 }"),
            // Expiry frees units too.
            (1003, "reserve alice k7 2", "Reserved { reservation_id: 4"),
            (1003, "reserve bob k1 2", "Reserved"),
        ],
    },
    Scenario {
        name: "expiry restocks exactly the held units, driven by timeouts",
        config: "ttl=1000",
        steps: &[
            (0, "reserve alice k1 2", "Reserved"),
            (100, "reserve bob k1 3", "Reserved"),
            (200, "reserve carol k1 1", "Reserved"),
            (200, "confirm 3 carol p", "Confirmed"),
            (200, "next", "Some(0)"),
            (200, "poll 10", "[3]"),
            (200, "next", "Some(1000)"),
            (200, "ack 1", "Acked { entries: 1 }"),
            (999, "timeout", "expired 0"),
            (1000, "timeout", "expired 1"),
            (1000, "stats", "available=6 held=3 sold=1 live=1 backlog=0"),
            (1000, "timeout", "expired 0"),
            (1100, "timeout", "expired 1"),
            (1100, "stats", "available=9 held=0 sold=1 live=0 backlog=0"),
            // The tombstones age out after the window: nothing is left to do.
            (1600, "timeout", "expired 0"),
            (1600, "next", "None"),
        ],
    },
    Scenario {
        name: "a total below held plus sold is refused",
        config: "",
        steps: &[
            (0, "reserve alice k1 3", "Reserved"),
            (1, "confirm 1 alice p", "Confirmed"),
            (2, "reserve bob k1 2", "Reserved"),
            (3, "total 4", "BelowCommitted { committed: 5 }"),
            (3, "stats", "available=5 held=2 sold=3 live=1 backlog=1"),
            (4, "total 5", "Done"),
            (4, "stats", "available=0 held=2 sold=3 live=1 backlog=1"),
            (5, "reserve carol k1 1", "SoldOut"),
            (6, "add 2", "Done"),
            (6, "reserve carol k1 1", "Reserved"),
            (7, "total 1000000001", "StockTooLarge"),
        ],
    },
    Scenario {
        name: "at the record limit new reserves wait for the oldest tombstone",
        config: "reservations_max=2 ttl=1000 window=500",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (10, "reserve bob k1 1", "Reserved"),
            (20, "reserve carol k1 1", "Overloaded { retry_after_ms: 1480 }"),
            (30, "cancel 1 alice", "Cancelled"),
            // The tombstone is kept for replay: still two records.
            (40, "reserve carol k1 1", "Overloaded { retry_after_ms: 1460 }"),
            (40, "reserve alice k1 1", "Replayed"),
            (1500, "reserve carol k1 1", "Reserved"),
        ],
    },
    Scenario {
        name: "unknown reservations, and another buyer's reservation",
        config: "",
        steps: &[
            (0, "confirm 99 alice p", "Unknown"),
            (0, "cancel 99 alice", "Unknown"),
            (0, "reserve alice k1 1", "Reserved"),
            (1, "confirm 1 mallory p", "Unknown"),
            (1, "cancel 1 mallory", "Unknown"),
            (1, "stats", "available=9 held=1 sold=0 live=1 backlog=0"),
        ],
    },
    Scenario {
        name: "the outbox redelivers after a nack, never after an ack",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (0, "reserve bob k1 1", "Reserved"),
            (0, "reserve carol k1 1", "Reserved"),
            (1, "confirm 1 alice p", "Confirmed"),
            (1, "confirm 2 bob p", "Confirmed"),
            (1, "confirm 3 carol p", "Confirmed"),
            (2, "poll 2", "[1, 2]"),
            (2, "poll 2", "[]"),
            (3, "nack 7", "true"),
            (3, "poll 2", "[]"),
            (600, "poll 2", "[1, 2]"),
            (601, "restore", "restored"),
            // The lease was not persisted: the batch goes out again.
            (601, "poll 5", "[1, 2, 3]"),
            (602, "ack 2", "Acked { entries: 2 }"),
            (602, "ack 2", "Stale"),
            (603, "poll 5", "[3]"),
            (603, "ack 4", "NotHandedOut"),
            (603, "ack 3", "Acked { entries: 1 }"),
            (604, "poll 5", "[]"),
            (604, "stats", "available=7 held=0 sold=3 live=0 backlog=0"),
        ],
    },
    Scenario {
        name: "a lapsed lease hands the batch out again",
        config: "",
        steps: &[
            (0, "reserve alice k1 1", "Reserved"),
            (1, "confirm 1 alice p", "Confirmed"),
            (2, "poll 1", "[1]"),
            (2, "next", "Some(30002)"),
            (30001, "poll 1", "[]"),
            (30002, "poll 1", "[1]"),
        ],
    },
];

#[test]
fn scenarios() {
    for s in SCENARIOS {
        check(s);
    }
}
