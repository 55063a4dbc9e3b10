// One reserve-heavy sale, and where its CPU goes: flashgate-load's buyers
// (each reserves one unit and pays) against a fresh bare workerd and a
// fresh origin on PostgreSQL (a database of its own on the machine's
// server), with each process's CPU over the run (user + system, from
// /proc): workerd's, the origin's and PostgreSQL's (its postmaster's tree,
// counted as `scripts/bench-compare` counts it). workerd's is also printed over time, so
// a cold start or a tail after the last buyer shows. Prints figures;
// asserts nothing about time.
//
//   node bench/sale.mjs
//   BENCH_SHARDS=8 BENCH_BUYERS=20000 node bench/sale.mjs
//   FLASHGATE_ORIGIN_BIN=/path/to/another/flashgate-origin node bench/sale.mjs   another origin build, to compare
import { load, pgDatabase, serverCpu, serverCpuSince } from "./compare.mjs";
import { cpuUs } from "./load.mjs";
import * as keys from "../tests/support/keys.mjs";
import { originBinary, startOrigin } from "../tests/support/origin.mjs";
import { cargoBinary, exitUnlessBuilt, GATE_BUILT, startGate } from "../tests/support/runtime.mjs";

const SHARDS = Number(process.env.BENCH_SHARDS ?? 1);
const BUYERS = Number(process.env.BENCH_BUYERS ?? 20_000);
// The load tool of `scripts/bench-compare` (its profile, release unless
// FLASHGATE_BENCH_PROFILE says otherwise); its own CPU is not counted.
exitUnlessBuilt([cargoBinary("flashgate-load", process.env.FLASHGATE_BENCH_PROFILE ?? "release"), originBinary(), ...GATE_BUILT]);

const db = pgDatabase(`flashgate_sale_${process.pid}`);
const origin = await startOrigin({ databaseUrl: db.url });
const gate = await startGate({ originUrl: origin.url });
const t0 = performance.now();
const workerd0 = cpuUs(gate.proc.pid) / 1000;
const origin0 = cpuUs(origin.proc.pid) / 1000;
const postgres0 = serverCpu(["postgres"]);
const series = [];
const sampler = setInterval(() => series.push([(performance.now() - t0) / 1000, cpuUs(gate.proc.pid) / 1000 - workerd0]), 1000);
const args = [
  "--system", "flashgate", "--url", gate.url, "--product", "sale", "--stock", "1000000", "--shards", String(SHARDS),
  "--shares", "100,0,0", "--payment-keys", keys.PAYMENT_KEYS, "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  "--buyers", String(BUYERS), "--connections", "256", "--seed", "1000", "--buyer-keys", keys.BUYER_TOKEN_KEYS,
];
// flashgate-load exits non-zero when its verdict on the sale fails.
const { report, code } = await load(args);
clearInterval(sampler);
const workerd = cpuUs(gate.proc.pid) / 1000 - workerd0;
const originMs = cpuUs(origin.proc.pid) / 1000 - origin0;
const postgres = serverCpuSince(postgres0, serverCpu(["postgres"])).postgres;
await gate.stop();
await origin.stop();
db.drop();

const per1000 = (ms) => ((ms * 1000) / report.buyers).toFixed(1);
console.log(`a reserve-heavy sale: ${report.buyers} buyers, ${report.requests} requests, K = ${SHARDS}, ${((performance.now() - t0) / 1000).toFixed(1)} s, verdict ${code === 0 ? "PASS" : `FAIL (flashgate-load exited ${code})`}; ${JSON.stringify(report.verdict)}`);
console.log(`CPU ms per 1,000 buyers: workerd ${per1000(workerd)} (${((workerd * 1000) / report.requests).toFixed(0)} us a request), origin ${per1000(originMs)}, PostgreSQL ${per1000(postgres)}; all ${per1000(workerd + originMs + postgres)}`);
console.log(`workerd's CPU ms so far, each second: ${series.map(([s, ms]) => `${s.toFixed(0)}s ${ms.toFixed(0)}`).join(", ")}, end ${workerd.toFixed(0)}`);
process.exit(code === 0 ? 0 : 1);
