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
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, RATELIMIT_MODULE, rateLimitBindings, requireBuilt, ROOT, UNLIMITED, WORKERD } from "../tests/support/runtime.mjs";
import { load, median } from "./load.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);

async function start() {
  requireBuilt([[WORKERD, "npm ci"]]);
  const dir = mkdtempSync(join(tmpdir(), "flashgate-floor-"));
  mkdirSync(join(dir, "do-state"));
  copyFileSync(join(ROOT, "bench/floor.js"), join(dir, "floor.js"));
  copyFileSync(RATELIMIT_MODULE, join(dir, "ratelimit.worker.js"));
  const port = await freePort();
  writeFileSync(
    join(dir, "floor.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .floorWorker), (name = "disk", disk = (path = "do-state", writable = true)) ],
  sockets = [ ( name = "http", address = "127.0.0.1:${port}", http = (), service = "main" ) ],
  extensions = [(
    modules = [(name = "flashgate-internal:ratelimit", internal = true, esModule = embed "ratelimit.worker.js")],
  )],
);
const floorWorker :Workerd.Worker = (
  modules = [ (name = "floor.js", esModule = embed "floor.js") ],
  compatibilityDate = "2025-09-01",
  durableObjectNamespaces = [ (className = "Ceiling", uniqueKey = "ceiling", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [
    (name = "CEILING", durableObjectNamespace = "Ceiling"),
${rateLimitBindings(UNLIMITED).join("\n")}
  ],
);
`,
  );
  const proc = spawn(WORKERD, ["serve", "floor.capnp", "--experimental"], { cwd: dir, stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(`${url}/limited`);
      await r.text();
      if (r.status !== 200) throw new Error(`/limited answered ${r.status}`);
      break;
    } catch (e) {
      if (i > 600) throw new Error(`the floor's workerd did not start: ${e.message}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { url, proc, stop: () => proc.kill("SIGTERM") };
}

const w = await start();
// Stopped on every way out: a failed run must not leave workerd serving.
const PATHS = ["hop", "limited", "command"];
const runs = Object.fromEntries(PATHS.map((p) => [p, []]));
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
