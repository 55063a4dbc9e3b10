// Benchmark of the origin service (its release binary) and of the end-to-end
// drain. Prints figures; asserts nothing about time.
//
//   scripts/bench     (or: node bench/origin.mjs after building both)
//
// 1. Ingest throughput in orders/s at batch sizes 1, 50 and 500, on SQLite
//    and on PostgreSQL (a fresh database on the machine's server), with 4
//    concurrent senders, median of BENCH_RUNS runs.
// 2. The time a backlog of BENCH_BACKLOG (10,000) confirmed orders takes to
//    drain from a gate's outbox into the origin, once the origin is up.
import { createHmac } from "node:crypto";
import { execFileSync } from "node:child_process";
import { startOrigin, ORIGIN_SECRET } from "../tests/support/origin.mjs";
import { freePort, startGate } from "../tests/support/runtime.mjs";
import { client, pool, sleep } from "../tests/support/client.mjs";
import { median } from "./load.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 10_000);
const PG = process.env.FLASHGATE_TEST_PG ?? "postgres://root@127.0.0.1:5432/test";

function sign(ts, body) {
  return "v1=" + createHmac("sha256", ORIGIN_SECRET).update(`${ts}.${body}`).digest("hex");
}

async function post(url, body) {
  const ts = Date.now();
  const r = await fetch(`${url}/v1/reservations/batch`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-flashgate-timestamp": String(ts), "x-flashgate-signature": sign(ts, body) },
    body,
  });
  if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

async function ingestRate(origin, batchSize, orders, tag) {
  const batches = [];
  for (let i = 0; i < orders; i += batchSize) {
    const batch = [];
    for (let j = i; j < Math.min(orders, i + batchSize); j++) {
      batch.push({
        reservation_id: `${tag}:${j}`,
        product_id: tag,
        buyer_id: `buyer-${j}`,
        quantity: 1,
        payment_ref: `pay-${j}`,
        confirmed_at_ms: Date.now(),
        stock_total: 10_000_000,
      });
    }
    batches.push(JSON.stringify({ orders: batch }));
  }
  const t0 = performance.now();
  await pool(batches.map((b) => () => post(origin.url, b)), 4);
  return orders / ((performance.now() - t0) / 1000);
}

function pgDatabase(name) {
  const admin = PG;
  const psql = (sql) => execFileSync("psql", [admin, "-qc", sql], { env: { ...process.env, PGOPTIONS: "-c client_min_messages=warning" } });
  psql(`DROP DATABASE IF EXISTS ${name}`);
  psql(`CREATE DATABASE ${name}`);
  return { url: admin.replace(/\/[^/]*$/, `/${name}`), drop: () => psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

async function ingestBench() {
  console.log(`origin ingest, 4 concurrent senders, median of ${RUNS} runs:`);
  for (const backend of ["sqlite", "postgres"]) {
    for (const size of [1, 50, 500]) {
      const orders = size === 1 ? 2_000 : 20_000;
      const rates = [];
      for (let run = 0; run < RUNS; run++) {
        const db = backend === "postgres" ? pgDatabase(`flashgate_bench_${process.pid}`) : null;
        const origin = await startOrigin({ databaseUrl: db?.url });
        try {
          rates.push(await ingestRate(origin, size, orders, `b${size}r${run}`));
        } finally {
          await origin.stop();
          db?.drop();
        }
      }
      console.log(`  ${backend.padEnd(8)} batch ${String(size).padStart(3)}: ${median(rates).toFixed(0).padStart(7)} orders/s  (runs: ${rates.map((r) => r.toFixed(0)).join(", ")})`);
    }
  }
}

async function drainBench() {
  const port = await freePort();
  const gate = await startGate({ originUrl: `http://127.0.0.1:${port}`, originSecret: ORIGIN_SECRET });
  const api = client(gate.url);
  let origin;
  try {
    await api.put("drain", { stock_total: BACKLOG, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_600_000 });
    const t0 = performance.now();
    await pool(
      Array.from({ length: BACKLOG }, (_, i) => async () => {
        const r = await api.reserve("drain", `d${i}`, 1);
        if (r.status !== 201) throw new Error(JSON.stringify(r.body));
        const c = await api.confirm("drain", `d${i}`, r.body.reservation_id);
        if (c.status !== 200) throw new Error(JSON.stringify(c.body));
      }),
      32,
    );
    const buySeconds = (performance.now() - t0) / 1000;
    const before = (await api.stats("drain")).body.outbox.backlog;
    origin = await startOrigin({ port });
    const up = performance.now();
    let first = null;
    let s;
    for (;;) {
      s = (await api.stats("drain")).body;
      if (first === null && s.outbox.backlog < before) first = performance.now();
      if (s.outbox.backlog === 0) break;
      if (performance.now() - up > 180_000) throw new Error(`not drained: ${JSON.stringify(s.outbox)}`);
      await sleep(50);
    }
    const end = performance.now();
    const stored = (await origin.product("drain")).sold;
    console.log(`end-to-end drain: ${before} confirmed orders (bought in ${buySeconds.toFixed(1)} s, ${(2 * BACKLOG / buySeconds).toFixed(0)} req/s reserve+confirm)`);
    console.log(`  first batch stored ${((first - up) / 1000).toFixed(1)} s after the origin came up (the gate's retry backoff)`);
    console.log(`  backlog drained ${((end - first) / 1000).toFixed(2)} s after the first batch: ${(before / ((end - first) / 1000)).toFixed(0)} orders/s; origin sold ${stored}`);
  } finally {
    await gate.stop();
    await origin?.stop();
  }
}

await ingestBench();
await drainBench();
