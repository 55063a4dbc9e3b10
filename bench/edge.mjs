// Benchmark of the edge gate on bare `workerd serve` (not the wrangler dev
// proxy), beside the JavaScript ceiling DO (bench/baseline/ceiling.js, a
// copy of the project's yardstick) measured in the same run, on the same
// load. Prints figures; asserts nothing about time.
//
//   scripts/bench            (builds first)
//   BENCH_SECONDS=5 BENCH_RUNS=3 BENCH_CONNECTIONS=64 node bench/edge.mjs
//
// Figures: reserve throughput, p50/p99 latency and workerd's CPU time per
// request (every request a fresh buyer with its own signed token, verified
// at the edge, and a fresh key, so every one is a durable write), sold-out
// refusals (answered at the edge), waiting-room polls (answered at the
// edge), product reads, the gate's least answer (a path it has no route
// for: the head read, the route and a 404, with no limit and no wait,
// which every answer of the wasm gate costs at least), buyers' reads of
// their own holds (they reach the object, which writes nothing), the ceiling's /each (one durable put per
// request), /hop (a DO hop, no storage) and /plain (the Worker alone),
// the ratios, the share of a sale's requests that reach the object (100
// units, 20,000 clicks), the wasm size raw and gzipped, cold start,
// workerd's peak memory, and the client-side errors (connection resets) of
// every row, the ceiling's included.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { exitUnlessBuilt, GATE_BUILT, ROOT, startGate } from "../tests/support/runtime.mjs";
import { client, pool } from "../tests/support/client.mjs";
import { buyerToken } from "../tests/support/keys.mjs";
import { load, median } from "./load.mjs";
import { startCeiling } from "./ceiling.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);

function peakRssMiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

const fmt = (r) => `${r.rps.toFixed(0).padStart(6)} req/s   p50 ${r.p50.toFixed(2).padStart(6)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms   cpu ${r.cpu.toFixed(0).padStart(4)} us/req`;

async function main() {
  exitUnlessBuilt(GATE_BUILT);
  const wasm = readFileSync(join(ROOT, "build/index_bg.wasm"));
  const js = readFileSync(join(ROOT, "build/index.js"));
  console.log(`flashgate edge bench: bare workerd, ${CONNECTIONS} connections, ${SECONDS} s x ${RUNS} runs (median)`);
  console.log(`wasm: ${(wasm.length / 1024).toFixed(1)} KiB raw, ${(gzipSync(wasm, { level: 9 }).length / 1024).toFixed(1)} KiB gzipped; index.js ${(js.length / 1024).toFixed(1)} KiB`);

  // Cold start: process start to the first answer, then the first request
  // that instantiates a Durable Object and creates its tables.
  const colds = [];
  const firstDo = [];
  for (let i = 0; i < 3; i++) {
    const t0 = Date.now();
    const g = await startGate();
    colds.push(Date.now() - t0);
    const t1 = Date.now();
    await client(g.url).put("cold", { stock_total: 10 });
    firstDo.push(Date.now() - t1);
    await g.stop();
  }
  console.log(`cold start: ${median(colds)} ms to the first answer; first Durable Object request ${median(firstDo)} ms`);

  const gate = await startGate();
  const api = client(gate.url);
  const ceiling = await startCeiling();
  const results = { reserve: [], soldOut: [], polls: [], reads: [], least: [], objectReads: [], each: [], group: [], hop: [], plain: [], unreadBody: [] };
  // Tokens are signed before each run, so that the load generator's own
  // HMACs do not compete with workerd for the CPU during the measurement
  // (the ceiling's requests carry none).
  const TOKENS_PER_RUN = 60_000;
  const tokensFor = (prefix) => Array.from({ length: TOKENS_PER_RUN }, (_, n) => buyerToken(`${prefix}-${n}`));
  const tokenAt = (tokens, prefix, n) => tokens[n] ?? buyerToken(`${prefix}-${n}`);
  // A waiting room with a crowd already in it: every poll is answered at
  // the edge from the snapshot.
  const room = "room";
  await api.put(room, { stock_total: 1_000_000, admit_per_s: 10, per_buyer_max: 1, quantity_max: 1 });
  const crowd = [];
  for (let i = 0; i < 500; i++) {
    const b = `waiting-${i}`;
    const r = await api.join(room, b);
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
    crowd.push({ token: api.tokenOf(b), ticket: r.body.ticket });
  }
  try {
    let run = 0;
    for (let i = 0; i < RUNS; i++) {
      // A fresh product per run, with stock that cannot run out in the run.
      const product = `bench-${i}`;
      await api.put(product, { stock_total: 10_000_000, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_600_000, reservations_max: 200_000 });
      const reserveTokens = tokensFor(`b${run}`);
      const reserve = await load({
        url: gate.url, pid: gate.proc.pid,
        connections: CONNECTIONS,
        durationMs: SECONDS * 1000,
        request: (n) => ({
          method: "POST",
          path: `/api/products/${product}/reservations`,
          headers: { "content-type": "application/json", authorization: `Bearer ${tokenAt(reserveTokens, `b${run}`, n)}`, "idempotency-key": `"k${run}-${n}"` },
          body: '{"quantity":1}',
        }),
      });
      run++;
      results.reserve.push(reserve);
      const s = (await api.stats(product)).body;
      if (s.available + s.held + s.sold !== s.stock_total) throw new Error(`I1 broken: ${JSON.stringify(s)}`);

      // Reads of buyers' own holds: each reaches the object, which writes
      // nothing.
      const owners = [];
      for (let c = 0; c < CONNECTIONS; c++) {
        const buyer = `reader-${i}-${c}`;
        const r = await api.reserve(product, buyer, 1);
        if (r.status !== 201) throw new Error(JSON.stringify(r.body));
        owners.push({ path: `/api/products/${product}/reservations/${r.body.reservation_id}`, headers: { authorization: `Bearer ${api.tokenOf(buyer)}` } });
      }
      results.objectReads.push(await load({ url: gate.url, pid: gate.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: (n) => owners[n % owners.length] }));

      const sold = `soldout-${i}`;
      await api.put(sold, { stock_total: 0 });
      const soldTokens = tokensFor(`s${i}`);
      results.soldOut.push(
        await load({
          url: gate.url, pid: gate.proc.pid,
          connections: CONNECTIONS,
          durationMs: SECONDS * 1000,
          request: (n) => ({
            method: "POST",
            path: `/api/products/${sold}/reservations`,
            headers: { "content-type": "application/json", authorization: `Bearer ${tokenAt(soldTokens, `s${i}`, n)}`, "idempotency-key": `"s${i}-${n}"` },
            body: '{"quantity":1}',
          }),
        }),
      );
      results.polls.push(
        await load({
          url: gate.url, pid: gate.proc.pid,
          connections: CONNECTIONS,
          durationMs: SECONDS * 1000,
          request: (n) => {
            const c = crowd[n % crowd.length];
            return { path: `/api/products/${room}/queue`, headers: { authorization: `Bearer ${c.token}`, "flashgate-ticket": c.ticket } };
          },
        }),
      );
      // Buyer pages polling the product: answered from the edge's snapshot.
      results.reads.push(await load({ url: gate.url, pid: gate.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => ({ path: `/api/products/${sold}` }) }));
      results.least.push(await load({ url: gate.url, pid: gate.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => ({ path: "/api/no-such-route" }) }));
      for (const [name, path] of [["each", "/each"], ["group", "/group"], ["hop", "/hop"], ["plain", "/plain"]]) {
        results[name].push(await load({ url: ceiling.url, pid: ceiling.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => ({ path }) }));
      }
      // The runtime's own resets: the ceiling answers a POST without
      // reading its body, and workerd then resets the keep-alive
      // connection for the next request. flashgate reads every body it
      // answers, so its rows above show none.
      results.unreadBody.push(
        await load({ url: ceiling.url, pid: ceiling.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => ({ method: "POST", path: "/group", headers: { "content-type": "application/json" }, body: '{"quantity":1}' }) }),
      );
    }
  } finally {
    const peak = peakRssMiB(gate.proc.pid);
    await gate.stop();
    ceiling.stop();
    console.log(`workerd peak resident memory (flashgate process): ${peak.toFixed(1)} MiB`);
  }
  const med = (rs) => ({
    rps: median(rs.map((r) => r.rps)),
    p50: median(rs.map((r) => r.p50)),
    p99: median(rs.map((r) => r.p99)),
    cpu: median(rs.map((r) => r.cpuPerRequestUs)),
    errors: rs.reduce((a, r) => a + r.errors, 0),
    statuses: rs.map((r) => JSON.stringify(r.statuses)).join(" "),
  });
  const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, med(v)]));
  console.log("");
  console.log(`flashgate reserve (201, durable)  ${fmt(m.reserve)}   statuses ${m.reserve.statuses}`);
  console.log(`flashgate reserve on sold out     ${fmt(m.soldOut)}   statuses ${m.soldOut.statuses}`);
  console.log(`flashgate waiting-room polls      ${fmt(m.polls)}   statuses ${m.polls.statuses}`);
  console.log(`flashgate product reads (edge)    ${fmt(m.reads)}`);
  console.log(`flashgate least answer (404)     ${fmt(m.least)}   statuses ${m.least.statuses}`);
  console.log(`flashgate own-hold reads (object) ${fmt(m.objectReads)}`);
  console.log(`ceiling /each (JS, put/request)   ${fmt(m.each)}`);
  console.log(`ceiling /group (JS, group commit) ${fmt(m.group)}`);
  console.log(`ceiling /hop (JS, no storage)     ${fmt(m.hop)}`);
  console.log(`ceiling /plain (JS Worker alone)  ${fmt(m.plain)}`);
  console.log(`ceiling /group, POST body unread  ${fmt(m.unreadBody)}   client errors ${m.unreadBody.errors} (the runtime resets the connection after an unread body)`);
  console.log("");
  console.log(`ratio reserve / ceiling-each:  ${(m.reserve.rps / m.each.rps).toFixed(2)}  (per-run: ${results.reserve.map((r, i) => (r.rps / results.each[i].rps).toFixed(2)).join(", ")}; target 1.0)`);
  console.log(`ratio reserve / ceiling-group: ${(m.reserve.rps / m.group.rps).toFixed(2)}  (per-run: ${results.reserve.map((r, i) => (r.rps / results.group[i].rps).toFixed(2)).join(", ")}; target 0.9)`);
  console.log(`ratio object reads / ceiling-hop: ${(m.objectReads.rps / m.hop.rps).toFixed(2)}  (reach the object, write nothing; target 0.8)`);
  console.log(`ratio sold-out / ceiling-hop:  ${(m.soldOut.rps / m.hop.rps).toFixed(2)}`);
  console.log(`ratio sold-out / ceiling-plain: ${(m.soldOut.rps / m.plain.rps).toFixed(2)}  (answered at the edge; target 0.8)`);
  console.log(`ratio polls / ceiling-plain:    ${(m.polls.rps / m.plain.rps).toFixed(2)}  (answered at the edge; target 0.8)`);
  console.log(`ratio reads / ceiling-plain:    ${(m.reads.rps / m.plain.rps).toFixed(2)}`);
  // The same comparisons by cost: the ceiling's workerd CPU time per
  // request over the gate's (each process measured alone, medians), which
  // moves less with the machine's other work than throughput does.
  console.log("");
  const cpuRatio = (gate, ceiling) => `${(ceiling.cpu / gate.cpu).toFixed(2)}  (${gate.cpu.toFixed(0)} against ${ceiling.cpu.toFixed(0)} us)`;
  console.log(`cpu ratio reserve / ceiling-each:      ${cpuRatio(m.reserve, m.each)}`);
  console.log(`cpu ratio reserve / ceiling-group:     ${cpuRatio(m.reserve, m.group)}`);
  console.log(`cpu ratio object reads / ceiling-hop:  ${cpuRatio(m.objectReads, m.hop)}`);
  console.log(`cpu ratio sold-out / ceiling-plain:    ${cpuRatio(m.soldOut, m.plain)}`);
  console.log(`cpu ratio polls / ceiling-plain:       ${cpuRatio(m.polls, m.plain)}`);
  console.log(`cpu ratio reads / ceiling-plain:       ${cpuRatio(m.reads, m.plain)}  (product reads at the edge; target 0.8)`);
  console.log(`cpu ratio least answer / ceiling-plain: ${cpuRatio(m.least, m.plain)}  (a 404 with no limit and no wait: the most any edge answer can reach)`);
  const kinds = (rs) => JSON.stringify(rs.reduce((a, r) => { for (const [k, v] of Object.entries(r.errorKinds)) a[k] = (a[k] ?? 0) + v; return a; }, {}));
  // Client-side errors (connection resets and the like), for every row, so
  // that the gate's can be told from the runtime's.
  console.log(`client errors (all runs): ${Object.entries(results).map(([k, rs]) => `${k} ${rs.reduce((a, r) => a + r.errors, 0)} ${kinds(rs)}`).join(", ")}`);
}

/** A sale of 100 units to 20,000 clicks from 20,000 buyers at 64 at a time:
 * how many of those requests the object itself answered. */
async function sale() {
  const gate = await startGate();
  try {
    const api = client(gate.url);
    await api.put("sale", { stock_total: 100, per_buyer_max: 1, quantity_max: 1 });
    const clicks = 20_000;
    const t0 = performance.now();
    const answers = await pool(Array.from({ length: clicks }, (_, i) => () => api.reserve("sale", `click-${i}`, 1)), 64);
    const seconds = (performance.now() - t0) / 1000;
    const s = (await api.stats("sale")).body;
    const reserves = Object.values(s.counters.reserve).reduce((a, b) => a + b, 0);
    const statuses = {};
    for (const a of answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
    console.log("");
    console.log(`a sale of 100 units, ${clicks} clicks (64 at a time, ${(clicks / seconds).toFixed(0)} req/s): statuses ${JSON.stringify(statuses)}, sold out at the edge after the first ${reserves} reserves`);
    console.log(`  requests that reached the object: ${reserves} reserves + ${s.snapshots} snapshots = ${(((reserves + s.snapshots) / clicks) * 100).toFixed(2)}% of the clicks`);
  } finally {
    await gate.stop();
  }
}

await main();
await sale();
