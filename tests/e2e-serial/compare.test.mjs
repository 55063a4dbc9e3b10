// The side-by-side benchmark's smoke run (bench/compare.mjs --smoke): every
// system and every fault run, a few seconds each, checked for correctness,
// never for speed. Needs the machine's PostgreSQL, MariaDB, Redis and
// RabbitMQ, and the debug binaries of flashgate-load, flashgate-peers and
// the origin (scripts/test builds them).
import { test } from "node:test";
import assert from "node:assert/strict";

process.env.FLASHGATE_COMPARE_SMOKE = "1";
const { main, cpuColumns, costOf } = await import("../../bench/compare.mjs");

const VERDICT_PEERS = ["lua-mq", "redis-lock", "optimistic-pg", "optimistic-mariadb", "lock-table", "for-update", "zookeeper"];

test("the same sale against flashgate, the ceiling and every recipe; the article's faults beside flashgate's", { timeout: 900_000 }, async () => {
  const { rows, faults } = await main();
  const bySystem = Object.fromEntries(rows.map((r) => [r.system, r.runs[0].report]));
  const show = (r) => JSON.stringify({ outcomes: r.outcomes, verdict: r.verdict, seed: r.seed, product: r.product });

  const fg = bySystem.flashgate;
  assert.deepEqual(fg.verdict.violations, [], `flashgate: ${show(fg)}`);
  assert.equal(fg.outcomes.reserved, fg.stock_total, `every unit sold: ${show(fg)}`);
  // Database writes per click: at most stock / clicks + 1%.
  assert.ok(fg.db_writes_per_reserve <= fg.stock_total / fg.buyers + 0.01, `writes per reserve ${fg.db_writes_per_reserve}: ${show(fg)}`);
  assert.ok(fg.reached_object < 1, `some requests were answered at the edge: ${fg.reached_object}`);

  const k8 = bySystem["flashgate, K = 8"];
  assert.deepEqual(k8.verdict.violations, [], `flashgate at K = 8: ${show(k8)}`);
  assert.equal(k8.outcomes.reserved, k8.stock_total, `every unit sold at K = 8: ${show(k8)}`);

  // The CPU columns are filled for every row: every serving process and
  // every server the system uses has a figure, and flashgate's are not 0.
  for (const r of rows) {
    const cpu = r.runs[0].cpu;
    const figures = [...Object.values(cpu.own), ...Object.values(cpu.servers)];
    assert.ok(Object.keys(cpu.own).length > 0 && figures.every((ms) => Number.isFinite(ms) && ms >= 0), `${r.system}: ${JSON.stringify(cpu)}`);
    const { perBuyers, perRequests, cells } = cpuColumns(r);
    assert.ok(Number.isFinite(perBuyers) && Number.isFinite(perRequests), `${r.system}: ${cells}`);
    assert.equal(cells[2] === "-", Object.keys(cpu.servers).length === 0, `${r.system}: a server's column is filled when it has servers: ${cells}`);
    if (r.system.startsWith("flashgate")) assert.ok(cpu.own.workerd > 0 && perBuyers > 0, `${r.system}: ${JSON.stringify(cpu)}`);
  }
  // The cost model has every unit it prices: the objects counted their
  // requests and the rows they wrote.
  for (const [system, shards] of [["flashgate", 1], ["flashgate, K = 8", 8]]) {
    const run = rows.find((r) => r.system === system).runs[0];
    assert.ok(run.report.work.events > 0 && run.report.work.rows_written > 0, `${system}: ${JSON.stringify(run.report.work)}`);
    const cost = costOf(run, shards);
    assert.ok(Number.isFinite(cost.total) && cost.total > 0, `${system}: ${JSON.stringify(cost)}`);
  }

  for (const recipe of VERDICT_PEERS) {
    const r = bySystem[recipe];
    assert.deepEqual(r.verdict.violations, [], `${recipe}: ${show(r)}`);
    assert.equal(r.outcomes.reserved, r.stock_total, `${recipe} sold every unit: ${show(r)}`);
  }
  // Every peer that writes per attempt writes at least once per reserve.
  for (const recipe of ["optimistic-pg", "optimistic-mariadb", "lock-table", "naive"]) {
    assert.ok(bySystem[recipe].db_writes_per_reserve >= 1, `${recipe}: ${bySystem[recipe].db_writes_per_reserve}`);
  }
  const naive = bySystem.naive;
  assert.ok(naive.verdict.oversold_in_db_units > 0, `the naive recipe oversells: ${show(naive)}`);

  const fault = (prefix) => {
    const f = faults.find((x) => x.name.startsWith(prefix));
    assert.ok(f, prefix);
    return f.report;
  };
  const killed = fault("flashgate: kill -9");
  assert.deepEqual(killed.verdict.violations, [], `flashgate after kill -9: ${show(killed)}`);
  assert.ok((killed.endpoints.reserve.answers.network_error ?? 0) > 0, `the kill landed mid-burst: ${JSON.stringify(killed.endpoints)}`);
  assert.equal(killed.fates.pay, killed.outcomes.reserved, `every acknowledged hold was paid: ${JSON.stringify(killed.fates)}`);

  const consumer = fault("lua-mq: consumer killed");
  assert.deepEqual(consumer.verdict.violations, [], `lua-mq after its consumer died: ${show(consumer)}`);
  assert.notEqual(consumer.settle_ms, null, "the database caught up with Redis once the consumer was back");

  assert.ok(fault("redis-lock: every 20th holder stalls 500 ms, lease 200 ms, without").verdict.oversold_in_db_units > 0, "a stalled holder past its lease oversells");
  assert.deepEqual(fault("redis-lock: every 20th holder stalls 500 ms, lease 200 ms, with watchdog").verdict.violations, [], "the watchdog keeps the lease");
  assert.deepEqual(fault("lock-table").verdict.violations, [], "a dead holder blocks, but does not oversell");
});
