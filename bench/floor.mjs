// What JS reaches doing what the gate's answers cannot leave out
// (bench/floor.js), on bare workerd with the rate limiter as wrangler dev
// gives it, each path alternated run by run. Against the ceiling's DO hop
// (bench/baseline/ceiling.js's /hop): the hop after the two limiter calls
// a buyer's read of its hold makes; a JS read that also sends its command
// as the gate does and has the object parse it and answer JSON, by fetch
// and by Durable Object RPC; and that read with the gate's own duties (the
// token verified, the id decoded and encoded again). Against the plain
// Worker: a product read and a sold-out refusal, each with its limits,
// token and checks. The gate's targets by CPU: the own read 0.8 of the hop,
// the product read 0.8 and the sold-out refusal 0.6 of the plain Worker.
// Prints figures; asserts nothing about time.
//
//   node bench/floor.mjs            (BENCH_SECONDS=5 BENCH_RUNS=3 BENCH_CONNECTIONS=64)
import { startFloor } from "./ceiling.mjs";
import { load, median } from "./load.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);

const w = await startFloor();
const REQUESTS = w.requests;
const PATHS = Object.keys(REQUESTS);
const runs = Object.fromEntries(PATHS.map((p) => [p, []]));
// Stopped on every way out: a failed run must not leave workerd serving.
try {
  for (let i = 0; i < RUNS; i++) {
    for (const path of PATHS) {
      const r = await load({ url: w.url, pid: w.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => REQUESTS[path] });
      const want = path === "soldout" ? "409" : "200";
      const bad = Object.keys(r.statuses).filter((s) => s !== want);
      if (bad.length) throw new Error(`/${path} answered ${JSON.stringify(r.statuses)}`);
      runs[path].push(r);
      console.log(`run ${i + 1} /${path.padEnd(8)} ${r.rps.toFixed(0).padStart(6)} req/s  cpu ${r.cpuPerRequestUs.toFixed(1).padStart(6)} us/req`);
    }
  }
} finally {
  w.stop();
}
const cpu = (path) => median(runs[path].map((r) => r.cpuPerRequestUs));
console.log(`workerd CPU per request, medians of ${RUNS}: ${PATHS.map((p) => `/${p} ${cpu(p).toFixed(1)} us`).join(", ")}`);
// Each path over the ceiling it is measured against, with the gate's
// target for the answer it stands for.
const RATIOS = [
  ["hop", "limited", "the hop after the limits"],
  ["hop", "command", "the read with its command"],
  ["hop", "rpc", "the read with its command over RPC"],
  ["hop", "duties", "the read with the gate's duties; the own read's target 0.8"],
  ["plain", "product", "the product read; its target 0.8"],
  ["plain", "soldout", "the sold-out refusal; its target 0.6"],
];
for (const [ceiling, path, what] of RATIOS) {
  const perRun = runs[ceiling].map((r, i) => (r.cpuPerRequestUs / runs[path][i].cpuPerRequestUs).toFixed(2)).join(", ");
  console.log(`/${ceiling} over /${path}: ${(cpu(ceiling) / cpu(path)).toFixed(2)} (per run ${perRun}; ${what})`);
}
