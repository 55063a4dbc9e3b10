// What a buyer's read of its hold cannot avoid, in JS: the ceiling's DO hop
// (bench/baseline/ceiling.js's /hop) beside the same hop after the two rate
// limiter calls the read makes, and beside a JS read that also sends its
// command as the gate does and has the object parse it and answer JSON
// (bench/floor.js), on bare workerd with the limiter as wrangler dev gives
// it, alternated run by run. The read's target is 0.8 of the hop by CPU;
// the hop over each is what JS doing that much reaches here. Prints
// figures; asserts nothing about time.
//
//   node bench/floor.mjs            (BENCH_SECONDS=5 BENCH_RUNS=3 BENCH_CONNECTIONS=64)
import { startCeiling } from "./ceiling.mjs";
import { load, median } from "./load.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);

const w = await startCeiling({ worker: "bench/floor.js", limiters: true, readyPath: "/limited" });
const PATHS = ["hop", "limited", "command"];
const runs = Object.fromEntries(PATHS.map((p) => [p, []]));
// Stopped on every way out: a failed run must not leave workerd serving.
try {
  for (let i = 0; i < RUNS; i++) {
    for (const path of PATHS) {
      const r = await load({ url: w.url, pid: w.proc.pid, connections: CONNECTIONS, durationMs: SECONDS * 1000, request: () => ({ path: `/${path}` }) });
      const bad = Object.keys(r.statuses).filter((s) => s !== "200");
      if (bad.length) throw new Error(`/${path} answered ${JSON.stringify(r.statuses)}`);
      runs[path].push(r);
      console.log(`run ${i + 1} /${path.padEnd(8)} ${r.rps.toFixed(0).padStart(6)} req/s  cpu ${r.cpuPerRequestUs.toFixed(1).padStart(6)} us/req`);
    }
  }
} finally {
  w.stop();
}
const cpu = (path) => median(runs[path].map((r) => r.cpuPerRequestUs));
console.log(`workerd CPU per request, medians of ${RUNS}: the hop ${cpu("hop").toFixed(1)} us, after the two limiter calls ${cpu("limited").toFixed(1)} us, the JS read with its command ${cpu("command").toFixed(1)} us`);
for (const path of ["limited", "command"]) {
  const perRun = runs.hop.map((r, i) => (r.cpuPerRequestUs / runs[path][i].cpuPerRequestUs).toFixed(2)).join(", ");
  console.log(`the hop / ${path}: ${(cpu("hop") / cpu(path)).toFixed(2)} (per run ${perRun}; the read's target 0.8)`);
}
