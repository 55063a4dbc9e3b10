// The waiting room's proof of work (edge/pow.rs, wire/src/altcha.rs): what
// it costs the edge and what it costs a buyer.
//
//   node bench/pow.mjs          BENCH_RUNS rounds (default 5), medians
//   BENCH_POW_LEVELS=1,2,3 node bench/pow.mjs
//
// - The edge: workerd's CPU per join, measured in the same run for joins
//   of a room with no proof of work, joins carrying a valid payload
//   (the verify: one PBKDF2 derivation), and joins refused (a forged
//   payload: the signature check, and a fresh challenge signed). The
//   differences are the verify's and the refusal's cost in the Worker.
//   Beside it, the same verify natively (wire/examples/altcha.rs).
// - A buyer: the solve time in headless Chromium at each level, by the
//   product page's own code (the ALTCHA widget in its Web Workers, as a
//   click on Buy runs it), against a script's native single-threaded solve.
//
// Never fails on speed; exits non-zero only when a run could not be made.
import { execFileSync } from "node:child_process";
import { cpus } from "node:os";
import { pbkdf2, solveChallenge } from "altcha/lib";
import { cpuUs, median } from "./load.mjs";
import { client, pool } from "../tests/support/client.mjs";
import { launch } from "../tests/support/browser.mjs";
import { ROOT, startGate } from "../tests/support/runtime.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const LEVELS = (process.env.BENCH_POW_LEVELS ?? "1,2,3,4").split(",").map(Number);
// Enough joins that the CPU, read in clock ticks of 10 ms, is exact to a
// few per cent.
const JOINS = 2000;
const CONCURRENCY = 16;

const gate = await startGate({});
const api = client(gate.url);
console.log(`machine: ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; workerd pid ${gate.proc.pid}; ${new Date().toISOString()}`);

async function payloadFor(product, buyer) {
  const c = await api.challenge(product, buyer);
  if (c.status !== 200) throw new Error(`challenge: ${c.status} ${JSON.stringify(c.body)}`);
  const solution = await solveChallenge({ challenge: c.body, deriveKey: pbkdf2.deriveKey });
  return btoa(JSON.stringify({ challenge: { parameters: c.body.parameters, signature: c.body.signature }, solution }));
}

/** workerd's CPU µs per join of `buyers`, each with `headers(i)`. */
async function cpuPerJoin(product, buyers, headers, expect) {
  const before = cpuUs(gate.proc.pid);
  const statuses = {};
  await pool(buyers.map((b, i) => async () => {
    const r = await api.join(product, b, headers(i));
    statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  }), CONCURRENCY);
  const cpu = cpuUs(gate.proc.pid) - before;
  if (statuses[expect] !== buyers.length) throw new Error(`${product}: ${JSON.stringify(statuses)}`);
  return cpu / buyers.length;
}

try {
  // ----- the edge -----
  await api.put("bench-free", { stock_total: 1000, admit_per_s: 100_000 });
  await api.put("bench-pow", { stock_total: 1000, admit_per_s: 100_000, pow: { mode: "fixed", level: 1 } });
  const buyers = Array.from({ length: JOINS }, (_, i) => `b${i}`);
  const payloads = [];
  for (const b of buyers) payloads.push(await payloadFor("bench-pow", b));
  const forged = (i) => {
    const p = JSON.parse(atob(payloads[i]));
    p.challenge.signature = "0".repeat(64);
    return btoa(JSON.stringify(p));
  };
  // Warm both paths, then alternate.
  await cpuPerJoin("bench-free", buyers.slice(0, 50), () => ({}), 201);
  await cpuPerJoin("bench-pow", buyers.slice(0, 50), (i) => ({ "flashgate-pow": payloads[i] }), 201);
  const free = [], valid = [], refused = [];
  for (let r = 0; r < RUNS; r++) {
    free.push(await cpuPerJoin("bench-free", buyers, () => ({}), 201));
    valid.push(await cpuPerJoin("bench-pow", buyers, (i) => ({ "flashgate-pow": payloads[i] }), 201));
    refused.push(await cpuPerJoin("bench-pow", buyers, (i) => ({ "flashgate-pow": forged(i) }), 403));
  }
  const native = execFileSync("cargo", ["run", "-q", "--release", "-p", "flashgate-wire", "--example", "altcha", "--", "250", String(Math.min(4, Math.max(...LEVELS))), "5"], { cwd: ROOT, encoding: "utf8" })
    .trim().split("\n").map((l) => JSON.parse(l));
  const [{ verify_us: nativeVerify, cost }, ...nativeSolves] = native;
  const m = (v) => median(v).toFixed(0);
  console.log(`\nThe edge (workerd CPU per join, ${JOINS} joins × ${RUNS} rounds, medians; PBKDF2 cost ${cost}):`);
  console.log("| join | workerd CPU µs/join | over a free join |");
  console.log("|---|---|---|");
  console.log(`| no proof of work | ${m(free)} | - |`);
  console.log(`| a valid payload (verify) | ${m(valid)} | +${(median(valid) - median(free)).toFixed(0)} µs |`);
  console.log(`| a forged payload (refused, fresh challenge) | ${m(refused)} | +${(median(refused) - median(free)).toFixed(0)} µs |`);
  console.log(`native verify (this machine, not wasm): ${nativeVerify.toFixed(1)} µs`);

  // ----- a buyer -----
  const browser = await launch();
  const rows = [];
  for (const level of LEVELS) {
    const product = `bench-level-${level}`;
    await api.put(product, { stock_total: 1000, admit_per_s: 100_000, pow: { mode: "fixed", level } });
    const runs = RUNS;
    const times = [];
    for (let r = 0; r < runs; r++) {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      page.on("console", (m) => console.error(`  page: ${m.text()}`));
      page.on("crash", () => console.error("  page crashed"));
      await page.goto(`${gate.url}/p/${product}`);
      await page.waitForFunction(() => typeof info === "object" && info !== null);
      const ms = await page.evaluate(async () => {
        await ensureSession();
        const c = await call("GET", `/api/products/${product}/queue/challenge`);
        const t0 = performance.now();
        const payload = await proveWork(c.data, c.data.expected_tries);
        const took = performance.now() - t0;
        const j = await call("POST", `/api/products/${product}/queue`, undefined, undefined, "", { "flashgate-pow": payload });
        if (j.status !== 201) throw new Error(`join ${j.status}`);
        return took;
      });
      times.push(ms);
      console.error(`level ${level}, run ${r + 1}: ${ms.toFixed(0)} ms`);
      await ctx.close();
    }
    const n = nativeSolves.find((s) => s.level === level);
    rows.push({ level, tries: 16 ** level, chromium: median(times), runs, native: n?.native_solve_ms });
  }
  await browser.close();
  console.log(`\nA buyer (headless Chromium, the page's own solve: the ALTCHA widget, ${cpus().length} Web Workers at most; medians):`);
  console.log("| level | expected tries | Chromium solve ms | runs | native single-thread solve ms |");
  console.log("|---|---|---|---|---|");
  for (const r of rows) {
    console.log(`| ${r.level} | ${r.tries.toLocaleString("en")} | ${r.chromium.toFixed(0)} | ${r.runs} | ${r.native === undefined ? "-" : r.native.toFixed(0)} |`);
  }
} finally {
  await gate.stop();
}
