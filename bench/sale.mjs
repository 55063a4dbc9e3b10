// One reserve-heavy sale, and where its CPU goes: flashgate-load's buyers
// (each reserves one unit and pays) against a fresh bare workerd and a
// fresh origin on PostgreSQL (a database of its own on the machine's
// server), with each process's CPU over the run (user + system, from
// /proc): workerd's, the origin's and PostgreSQL's (every postgres process,
// and what the postmaster reaped). workerd's is also printed over time, so
// a cold start or a tail after the last buyer shows. Prints figures;
// asserts nothing about time.
//
//   node bench/sale.mjs
//   BENCH_SHARDS=8 BENCH_BUYERS=20000 node bench/sale.mjs
//   FLASHGATE_ORIGIN_BIN=/path/to/another/flashgate-origin node bench/sale.mjs   another origin build, to compare
import { execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { cpuUs } from "./load.mjs";
import * as keys from "../tests/support/keys.mjs";
import { originBinary, startOrigin } from "../tests/support/origin.mjs";
import { cargoBinary, exitUnlessBuilt, GATE_BUILT, startGate } from "../tests/support/runtime.mjs";

const SHARDS = Number(process.env.BENCH_SHARDS ?? 1);
const BUYERS = Number(process.env.BENCH_BUYERS ?? 20_000);
const PG = process.env.FLASHGATE_TEST_PG ?? "postgres://root@127.0.0.1:5432/test";
const LOAD = cargoBinary("flashgate-load", process.env.FLASHGATE_BENCH_PROFILE ?? "debug");
exitUnlessBuilt([LOAD, originBinary(), ...GATE_BUILT]);

/** Clock ticks a second, as /proc counts CPU time (Linux's USER_HZ). */
const TICKS_PER_S = 100;

/** CPU ms of every postgres process, and of the children the postmaster reaped. */
function postgresCpuMs() {
  let ticks = 0;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue;
    }
    if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) !== "postgres") continue;
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  }
  return (ticks * 1000) / TICKS_PER_S;
}

const database = `flashgate_sale_${process.pid}`;
const psql = (sql) => execFileSync("psql", [PG, "-qc", sql], { env: { ...process.env, PGOPTIONS: "-c client_min_messages=warning" } });
psql(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
psql(`CREATE DATABASE ${database}`);
const origin = await startOrigin({ databaseUrl: PG.replace(/\/[^/]*$/, `/${database}`) });
const gate = await startGate({ originUrl: origin.url });
const t0 = performance.now();
const workerd0 = cpuUs(gate.proc.pid) / 1000;
const origin0 = cpuUs(origin.proc.pid) / 1000;
const postgres0 = postgresCpuMs();
const series = [];
const sampler = setInterval(() => series.push([(performance.now() - t0) / 1000, cpuUs(gate.proc.pid) / 1000 - workerd0]), 1000);
const args = [
  "--system", "flashgate", "--url", gate.url, "--product", "sale", "--stock", "1000000", "--shards", String(SHARDS),
  "--shares", "100,0,0", "--payment-keys", keys.PAYMENT_KEYS, "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  "--buyers", String(BUYERS), "--connections", "256", "--seed", "1000", "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--json",
];
// flashgate-load exits non-zero when its verdict on the sale fails.
const { out, code } = await new Promise((ok, fail) => {
  let text = "";
  const proc = spawn(LOAD[0], args, { env: { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN }, stdio: ["ignore", "pipe", "inherit"] });
  proc.stdout.on("data", (d) => (text += d));
  proc.on("exit", (code) => (text ? ok({ out: text, code }) : fail(new Error(`flashgate-load exited ${code} without a report`))));
});
clearInterval(sampler);
const workerd = cpuUs(gate.proc.pid) / 1000 - workerd0;
const originMs = cpuUs(origin.proc.pid) / 1000 - origin0;
const postgres = postgresCpuMs() - postgres0;
const report = JSON.parse(out);
await gate.stop();
await origin.stop();
psql(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);

const per1000 = (ms) => ((ms * 1000) / report.buyers).toFixed(1);
console.log(`a reserve-heavy sale: ${report.buyers} buyers, ${report.requests} requests, K = ${SHARDS}, ${((performance.now() - t0) / 1000).toFixed(1)} s, verdict ${code === 0 ? "PASS" : `FAIL (flashgate-load exited ${code})`}; ${JSON.stringify(report.verdict)}`);
console.log(`CPU ms per 1,000 buyers: workerd ${per1000(workerd)} (${((workerd * 1000) / report.requests).toFixed(0)} us a request), origin ${per1000(originMs)}, PostgreSQL ${per1000(postgres)}; all ${per1000(workerd + originMs + postgres)}`);
console.log(`workerd's CPU ms so far, each second: ${series.map(([s, ms]) => `${s.toFixed(0)}s ${ms.toFixed(0)}`).join(", ")}, end ${workerd.toFixed(0)}`);
process.exit(code === 0 ? 0 : 1);
