//! Benchmark of the core gate. Prints figures; asserts nothing about time.
//!
//!     cargo run --release -p flashgate-core --example bench
//!
//! `BENCH_HOLDS` sets the number of live holds (default 1,000,000) and
//! `BENCH_RUNS` the repetitions whose median is quoted (default 5). Buyer ids
//! are 20 bytes and idempotency keys 36 (a UUID's text), as the edge sends.
//! Memory is the growth of the process's resident set while the holds are
//! made, so it includes the allocator's own overhead.

use std::hint::black_box;
use std::time::Instant;

use flashgate_core::NoArchive;
use flashgate_core::{limits, Config, Gate, ReserveOutcome};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

/// Resident and peak resident set, in bytes, from /proc (Linux only).
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn buyer(i: usize) -> String {
    format!("buyer-{i:014}")
}

fn key(i: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i as u32, i)
}

fn config(hold_ttl_ms: u64, idem_window_ms: u64) -> Config {
    Config {
        per_buyer_max: 1,
        quantity_max: 1,
        hold_ttl_ms,
        idem_window_ms,
        reservations_max: limits::RESERVATIONS_MAX_MAX,
        ..Config::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Fills a gate with `n` live holds, one per buyer, one per millisecond.
/// Returns the gate and the time the fill took. Changes are taken (rendered
/// as rows) after every request, as the Durable Object shell does.
fn fill(n: usize, ttl_ms: u64, buyers: &[String], keys: &[String], render: bool) -> (Gate, f64) {
    let mut gate = Gate::new(0, config(ttl_ms, 0), 2 * n as u64).unwrap();
    gate.poll_changes();
    let start = Instant::now();
    for i in 0..n {
        let out = gate.handle_reserve(&NoArchive, i as u64, &buyers[i], &keys[i], 1, None);
        debug_assert!(matches!(out, ReserveOutcome::Reserved { .. }));
        if render {
            black_box(gate.poll_changes());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Without rendering, the rows are still taken, outside the timing.
    gate.poll_changes();
    (gate, secs)
}

fn main() {
    let n = env_usize("BENCH_HOLDS", limits::RESERVATIONS_MAX_MAX as usize);
    let runs = env_usize("BENCH_RUNS", 5);
    let buyers: Vec<String> = (0..2 * n).map(buyer).collect();
    let keys: Vec<String> = (0..2 * n).map(key).collect();
    println!("flashgate-core bench: {n} live holds, median of {runs} runs");

    // 1. Memory per live hold: resident growth while the holds are made.
    let (rss_before, _) = rss();
    let (gate, _) = fill(n, 10 * n as u64, &buyers, &keys, true);
    let (rss_after, peak) = rss();
    let per_hold = (rss_after.saturating_sub(rss_before)) as f64 / n as f64;
    let s = gate.stats(n as u64);
    assert_eq!(s.live_holds as usize, n);
    drop(gate);

    // 2. Reserve decisions per second that succeed, filling toward n holds:
    // the decision alone, and the decision plus rendering its rows.
    let (mut decide, mut render) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (gate, secs) = fill(n, 10 * n as u64, &buyers, &keys, false);
        decide.push(n as f64 / secs);
        drop(gate);
        let (gate, secs) = fill(n, 10 * n as u64, &buyers, &keys, true);
        render.push(n as f64 / secs);
        drop(gate);
    }

    // 3. Reserve decisions per second that refuse: a sold-out product with n
    // live holds, hammered by buyers with fresh keys (the hot path of a sale
    // once the stock is gone).
    let (mut gate, _) = fill(n, 10 * n as u64, &buyers, &keys, false);
    gate.set_total(&NoArchive, n as u64, n as u64)
        .expect("the total covers every hold");
    gate.poll_changes();
    let mut refusals = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        for i in n..2 * n {
            let out = gate.handle_reserve(&NoArchive, n as u64, &buyers[i], &keys[i], 1, None);
            debug_assert_eq!(out, ReserveOutcome::SoldOut);
            black_box(out);
        }
        refusals.push(n as f64 / start.elapsed().as_secs_f64());
    }
    drop(gate);

    // 4. Reserve-then-expire cycles with n live holds: at each millisecond
    // one new hold is made and the oldest one expires (and, with a zero
    // window, is forgotten), so the gate stays at n live holds.
    let ttl = n as u64;
    let (mut gate, _) = fill(n, ttl, &buyers, &keys, false);
    let mut cycles = Vec::new();
    let per_run = n / runs.max(1);
    for r in 0..runs {
        let start = Instant::now();
        for j in 0..per_run {
            let i = n + r * per_run + j;
            let now = i as u64;
            let expired = gate.handle_timeout(now);
            debug_assert_eq!(expired, 1);
            let out = gate.handle_reserve(&NoArchive, now, &buyers[i], &keys[i], 1, None);
            debug_assert!(matches!(out, ReserveOutcome::Reserved { .. }));
            black_box(gate.poll_changes());
        }
        cycles.push(per_run as f64 / start.elapsed().as_secs_f64());
    }
    assert_eq!(gate.stats(2 * n as u64).live_holds as usize, n);
    gate.audit(&NoArchive)
        .expect("invariants hold after the benchmark");
    drop(gate);

    // 5. One event's worth of settling: n holds all due at once, settled an
    // event at a time (expiries, rows rendered, as the alarm does); the
    // slowest event's time is what SETTLE_PER_EVENT_MAX bounds.
    let mut slowest = Vec::new();
    for _ in 0..runs {
        let (mut gate, _) = fill(n, 10 * n as u64, &buyers, &keys, false);
        let due_at = 20 * n as u64;
        let mut worst = 0f64;
        let mut events = 0;
        loop {
            let start = Instant::now();
            let expired = gate.handle_timeout(due_at);
            black_box(gate.poll_changes());
            worst = worst.max(start.elapsed().as_secs_f64());
            events += 1;
            if expired == 0 {
                break;
            }
            assert!(expired <= limits::SETTLE_PER_EVENT_MAX);
        }
        assert!(events > 1 || n <= limits::SETTLE_PER_EVENT_MAX as usize);
        slowest.push(worst);
    }

    println!(
        "reserve decisions/s (succeeding):                {:>12.0}",
        median(decide)
    );
    println!(
        "reserve decisions/s (succeeding, rows rendered): {:>12.0}",
        median(render)
    );
    println!(
        "reserve decisions/s (sold out, {n} live holds):  {:>12.0}",
        median(refusals)
    );
    println!(
        "reserve-then-expire cycles/s ({n} live holds):   {:>12.0}",
        median(cycles)
    );
    println!(
        "slowest event settling {} due holds (native):  {:>9.2} ms",
        limits::SETTLE_PER_EVENT_MAX,
        median(slowest) * 1000.0
    );
    println!("bytes per live hold (resident growth):           {per_hold:>12.1}");
    println!(
        "peak resident set:                               {:>12.1} MiB",
        peak as f64 / (1024.0 * 1024.0)
    );
}
