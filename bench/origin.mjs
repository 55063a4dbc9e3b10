// Benchmark of the origin service (its release binary) and of the end-to-end
// drain. Prints figures; asserts nothing about time.
//
//   scripts/bench     (or: node bench/origin.mjs after building both)
//
// 1. Ingest throughput in orders/s at batch sizes 1, 50 and 500, on SQLite
//    and on PostgreSQL (a fresh database on the machine's server), with 4
//    concurrent senders, median of BENCH_RUNS runs.
// 2. Ingest latency under a read flood: batches of 50 orders from one
//    sender, p50 and p99, alone and while 48 clients read orders and
//    products as fast as the origin lets them, on SQLite; the ratio of the
//    two (the target is within 2x).
// 3. The time a backlog of BENCH_BACKLOG (10,000) confirmed orders takes to
//    drain from a gate's outbox into the origin, once the origin is up.
import { execFileSync } from "node:child_process";
import { Worker } from "node:worker_threads";
import { startOrigin } from "../tests/support/origin.mjs";
import { freePort, startGate } from "../tests/support/runtime.mjs";
import { client, pool, sleep } from "../tests/support/client.mjs";
import { FORWARD_KEYS, READ_TOKEN, signHeaders } from "../tests/support/keys.mjs";
import { median } from "./load.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 10_000);
const PG = process.env.FLASHGATE_TEST_PG ?? "postgres://root@127.0.0.1:5432/test";

/** Posts one batch as the gate's outbox does; resolves to its latency in ms. */
async function post(url, body) {
  const path = "/v1/batches";
  const headers = { "content-type": "application/json", ...signHeaders({ keys: FORWARD_KEYS, purpose: "forward", method: "POST", path, body }) };
  const t0 = performance.now();
  const r = await fetch(url + path, { method: "POST", headers, body });
  if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
  await r.arrayBuffer();
  return performance.now() - t0;
}

const hex16 = (n) => n.toString(16).padStart(16, "0");

/** The batches of `orders` orders of product `tag`, `batchSize` each, after
 * one batch holding the product's stock total (as the gate's outbox starts). */
function batchesOf(tag, orders, batchSize) {
  const out = [JSON.stringify({ product_id: tag, events: [{ kind: "stock", seq: 1, stock_total: 10_000_000, at_ms: Date.now() }] })];
  for (let i = 0; i < orders; i += batchSize) {
    const events = [];
    for (let j = i; j < Math.min(orders, i + batchSize); j++) {
      events.push({
        kind: "order",
        seq: j + 2,
        reservation_id: `${tag}:${hex16(j + 1)}`,
        buyer_id: `buyer-${j}`,
        quantity: 1,
        payment_ref: `pay-${j}`,
        confirmed_at_ms: Date.now(),
      });
    }
    out.push(JSON.stringify({ product_id: tag, events }));
  }
  return out;
}

async function ingestRate(origin, batchSize, orders, tag) {
  const [stock, ...batches] = batchesOf(tag, orders, batchSize);
  await post(origin.url, stock);
  const t0 = performance.now();
  await pool(batches.map((b) => () => post(origin.url, b)), 4);
  return orders / ((performance.now() - t0) / 1000);
}

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// The read flood runs in its own thread, so that its callbacks never delay
// the measured sender's: what is measured is the origin, not this process's
// event loop.
const FLOOD = `
const { workerData, parentPort } = require("node:worker_threads");
const http = require("node:http");
const { url, readers, paths, token } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: readers });
const reads = { ok: 0, shed: 0 };
let flooding = true;
parentPort.on("message", () => (flooding = false));
const reader = async (k) => {
  for (let i = k; flooding; i++) {
    const status = await new Promise((ok) => {
      const req = http.get(url + paths[i % paths.length], { agent, headers: { authorization: "Bearer " + token } }, (res) => {
        res.resume();
        res.on("end", () => ok(res.statusCode));
      });
      req.on("error", () => ok(0));
    });
    if (status === 200) reads.ok++;
    else if (status === 503) reads.shed++;
  }
};
Promise.all(Array.from({ length: readers }, (_, k) => reader(k))).then(() => {
  agent.destroy();
  parentPort.postMessage(reads);
});
`;

/** Batch latencies of one sender, with `readers` clients flooding reads. */
async function ingestUnderReads(readers, tag) {
  const origin = await startOrigin();
  let flood = null;
  try {
    const [stock, ...batches] = batchesOf(tag, 10_000, 50);
    await post(origin.url, stock);
    // Orders to read: the flood pages through real rows.
    for (const b of batches.slice(0, 20)) await post(origin.url, b);
    if (readers > 0) {
      flood = new Worker(FLOOD, { eval: true, workerData: { url: origin.url, readers, paths: [`/v1/orders?limit=1000`, `/v1/products/${tag}`], token: READ_TOKEN } });
      await sleep(300);
    }
    const t0 = performance.now();
    const latencies = [];
    for (const b of batches.slice(20, 120)) latencies.push(await post(origin.url, b));
    const seconds = (performance.now() - t0) / 1000;
    let reads = { ok: 0, shed: 0 };
    if (flood) {
      const done = new Promise((ok) => flood.once("message", ok));
      flood.postMessage("stop");
      reads = await done;
    }
    return { p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), readsPerS: reads.ok / seconds, shedPerS: reads.shed / seconds };
  } finally {
    await flood?.terminate();
    await origin.stop();
  }
}

async function floodBench() {
  console.log(`origin ingest latency under a read flood (SQLite, 100 batches of 50 orders, one sender), median of ${RUNS} runs:`);
  const quiet = [];
  const flooded = [];
  for (let run = 0; run < RUNS; run++) {
    quiet.push(await ingestUnderReads(0, `q${run}`));
    flooded.push(await ingestUnderReads(48, `f${run}`));
  }
  const m = (xs, k) => median(xs.map((x) => x[k]));
  const line = (label, xs) =>
    `  ${label.padEnd(24)} p50 ${m(xs, "p50").toFixed(1).padStart(6)} ms  p99 ${m(xs, "p99").toFixed(1).padStart(6)} ms`;
  console.log(line("alone:", quiet));
  console.log(`${line("with 48 readers:", flooded)}  (reads served ${m(flooded, "readsPerS").toFixed(0)}/s, shed ${m(flooded, "shedPerS").toFixed(0)}/s)`);
  console.log(`  ratio flooded/alone:     p50 ${(m(flooded, "p50") / m(quiet, "p50")).toFixed(2)}x  p99 ${(m(flooded, "p99") / m(quiet, "p99")).toFixed(2)}x  (target: within 2x)`);
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
  const gate = await startGate({ originUrl: `http://127.0.0.1:${port}` });
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
    console.log(`end-to-end drain: ${before} outbox events, ${BACKLOG} of them orders (bought in ${buySeconds.toFixed(1)} s, ${(2 * BACKLOG / buySeconds).toFixed(0)} req/s reserve+confirm)`);
    console.log(`  first batch stored ${((first - up) / 1000).toFixed(1)} s after the origin came up (the gate's retry backoff)`);
    console.log(`  backlog drained ${((end - first) / 1000).toFixed(2)} s after the first batch: ${(before / ((end - first) / 1000)).toFixed(0)} events/s; origin sold ${stored}`);
  } finally {
    await gate.stop();
    await origin?.stop();
  }
}

// BENCH_ORIGIN_PARTS picks parts, e.g. `flood` or `ingest,drain`.
const parts = (process.env.BENCH_ORIGIN_PARTS ?? "ingest,flood,drain").split(",");
if (parts.includes("ingest")) await ingestBench();
if (parts.includes("flood")) await floodBench();
if (parts.includes("drain")) await drainBench();
