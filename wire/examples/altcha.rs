//! The proof of work's costs, natively: the edge's verify of one payload
//! (what the Worker runs, compiled for this machine instead of wasm32) and
//! a script's solve at each level, single-threaded, with this crate's
//! solver. `bench/pow.mjs` runs it beside the same figures measured in
//! workerd and in headless Chromium.
//!
//! `cargo run --release -p flashgate-wire --example altcha -- COST LEVEL_MAX RUNS`

use std::time::Instant;

use flashgate_wire::altcha::{expected_tries, payload, solve, Binding, PowSecret};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let (cost, level_max, runs) = match args[..] {
        [c, l, r] => (c as u32, l as u8, r as usize),
        _ => (250, 4, 5),
    };
    let key = PowSecret::new("0123456789abcdef".repeat(4));
    let binding = |level| Binding {
        buyer: "alice".into(),
        level,
        product: "p1".into(),
    };
    // Verify: a level-1 payload, checked many times.
    let c = key.issue(binding(1), cost, &[9; 32], u64::MAX / 2000);
    let text = payload(&c, &solve(&c, 1 << 20).expect("solves"));
    let n = 2_000;
    let t = Instant::now();
    for _ in 0..n {
        key.verify(&text, &binding(1), cost, 0).expect("valid");
    }
    let verify_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{{\"verify_us\": {verify_us:.1}, \"cost\": {cost}}}");
    for level in 1..=level_max {
        let mut ms = Vec::new();
        let mut tries = Vec::new();
        for run in 0..runs {
            let mut random = [0u8; 32];
            random[0] = level;
            random[1] = run as u8;
            let c = key.issue(binding(level), cost, &random, u64::MAX / 2000);
            let t = Instant::now();
            let s = solve(&c, u64::MAX).expect("solves");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            tries.push(f64::from(s.counter) + 1.0);
        }
        println!(
            "{{\"level\": {level}, \"expected_tries\": {}, \"native_solve_ms\": {:.1}, \"tries_median\": {:.0}}}",
            expected_tries(level),
            median(ms),
            median(tries)
        );
    }
}
