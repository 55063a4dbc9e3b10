// A flood of made-up product ids beside a real sale: what it costs the gate
// in memory and storage, and what it does to the real product's buyers.
// Prints figures and writes its section of bench/RESULTS.md (between its
// markers); asserts nothing about time.
//
//   node bench/flood.mjs                  (after scripts/build)
//   FLOOD_IDS=10000 FLOOD_IN_FLIGHT=64 FLOOD_REAL_IN_FLIGHT=4 node bench/flood.mjs
//
// One real product is configured; then FLOOD_IDS reads of distinct ids that
// no one configured (`GET /api/products/{id}`) go out FLOOD_IN_FLIGHT at a
// time while a second loop keeps reserving on the real product, each
// request a fresh buyer with its own key (a durable write), a few at a time.
// Figures: the flood's duration, workerd's resident memory before, after
// and at its peak (sampled, and the kernel's high-water mark), the files
// and bytes under the Durable Object storage directory before and after,
// the real product's latency and non-2xx answers during the flood, and the
// made-up ids' answers by status. The flood stops at FLOOD_TIMEOUT_MS
// (default 10 minutes) and says how far it got.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { ROOT, WORKERD, startGate } from "../tests/support/runtime.mjs";
import { client } from "../tests/support/client.mjs";
import { buyerToken } from "../tests/support/keys.mjs";

const IDS = Number(process.env.FLOOD_IDS ?? 10_000);
const IN_FLIGHT = Number(process.env.FLOOD_IN_FLIGHT ?? 64);
const REAL_IN_FLIGHT = Number(process.env.FLOOD_REAL_IN_FLIGHT ?? 4);
const TIMEOUT_MS = Number(process.env.FLOOD_TIMEOUT_MS ?? 600_000);
// One request's limit: a gate that stops answering must not hang the run.
const REQUEST_TIMEOUT_MS = 30_000;

/** workerd's resident memory now and its high-water mark, in MiB. */
function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rssMiB: kb("VmRSS") / 1024, hwmMiB: kb("VmHWM") / 1024 };
}

/** The number and total size of the files under `dir`. */
function files(dir) {
  let count = 0;
  let bytes = 0;
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        count++;
        bytes += statSync(p).size;
      }
    }
  };
  walk(dir);
  return { count, bytes };
}

/** One request on a keep-alive agent: its status (or the error's code) and
 * its latency in ms, from the write to the end of the response. */
function request(agent, url, { method = "GET", path, headers = {}, body }) {
  const target = new URL(url);
  const t0 = performance.now();
  return new Promise((ok) => {
    const req = http.request(
      { host: target.hostname, port: target.port, method, path, headers: body ? { ...headers, "content-length": Buffer.byteLength(body) } : headers, agent, timeout: REQUEST_TIMEOUT_MS },
      (res) => {
        res.resume();
        res.on("end", () => ok({ status: String(res.statusCode), ms: performance.now() - t0 }));
        res.on("error", (e) => ok({ status: `error:${e.code ?? e.name}`, ms: performance.now() - t0 }));
      },
    );
    req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "timeout" })));
    req.on("error", (e) => ok({ status: `error:${e.code ?? e.name}`, ms: performance.now() - t0 }));
    req.end(body);
  });
}

const quantile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN);
const mib = (bytes) => (bytes / 2 ** 20).toFixed(2);
const count = (m, k) => {
  m[k] = (m[k] ?? 0) + 1;
};

function version(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split("\n")[0].trim();
  } catch {
    return `${cmd}: not found`;
  }
}

function commit() {
  try {
    return execFileSync("git", ["-C", ROOT, "rev-parse", "--short", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "unknown";
  }
}

/** Replaces this benchmark's section of bench/RESULTS.md, between its
 * markers, and keeps the rest: the other benchmarks' figures live there too. */
function writeResults(text) {
  const [start, end] = ["<!-- flood:start -->", "<!-- flood:end -->"];
  const file = join(ROOT, "bench/RESULTS.md");
  const old = existsSync(file) ? readFileSync(file, "utf8") : "";
  const from = old.indexOf(start);
  const to = old.indexOf(end);
  const section = `${start}\n${text}\n${end}`;
  if (from >= 0 && to > from) return writeFileSync(file, old.slice(0, from) + section + old.slice(to + end.length));
  // The first time: before scripts/bench-compare's section, which stays last.
  const compare = old.indexOf("<!-- compare:start -->");
  writeFileSync(file, compare >= 0 ? `${old.slice(0, compare)}${section}\n\n${old.slice(compare)}` : `${old}\n${section}\n`);
}

async function main() {
  const started = new Date();
  const gate = await startGate();
  const pid = gate.proc.pid;
  try {
    const api = client(gate.url);
    const put = await api.put("real", { stock_total: 1_000_000, per_buyer_max: 1_000_000 });
    if (put.status >= 300) throw new Error(`configuring the real product: ${put.status} ${JSON.stringify(put.body)}`);
    // One reserve before the measurement, so that the real product's object
    // and its tables exist in the "before" figures.
    const first = await api.reserve("real", "flood-warmup", 1);
    if (first.status !== 201) throw new Error(`the first reserve: ${first.status} ${JSON.stringify(first.body)}`);

    const memBefore = memory(pid);
    const filesBefore = files(gate.stateDir);
    let peakRssMiB = memBefore.rssMiB;
    const sampler = setInterval(() => {
      try {
        peakRssMiB = Math.max(peakRssMiB, memory(pid).rssMiB);
      } catch {
        // workerd gone: the flood's answers say so.
      }
    }, 100);

    // The real sale: fresh buyers reserving, REAL_IN_FLIGHT at a time, until
    // the flood is over.
    const realAgent = new http.Agent({ keepAlive: true, maxSockets: REAL_IN_FLIGHT });
    const real = { latencies: [], statuses: {} };
    let flooding = true;
    let buyer = 0;
    const realLoop = async () => {
      while (flooding) {
        const n = buyer++;
        const r = await request(realAgent, gate.url, {
          method: "POST",
          path: "/api/products/real/reservations",
          headers: { "content-type": "application/json", authorization: `Bearer ${buyerToken(`flood-real-${n}`)}`, "idempotency-key": `"flood-real-${n}"` },
          body: '{"quantity":1}',
        });
        real.latencies.push(r.ms);
        count(real.statuses, r.status);
      }
    };

    // The flood: distinct made-up ids, IN_FLIGHT at a time.
    const floodAgent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
    const made = { statuses: {}, sent: 0 };
    const t0 = performance.now();
    const deadline = Date.now() + TIMEOUT_MS;
    let next = 0;
    const floodLoop = async () => {
      while (next < IDS && Date.now() < deadline) {
        const i = next++;
        const r = await request(floodAgent, gate.url, { path: `/api/products/made-up-${i.toString(36)}-${started.getTime().toString(36)}` });
        made.sent++;
        count(made.statuses, r.status);
      }
    };
    const reals = Array.from({ length: REAL_IN_FLIGHT }, realLoop);
    await Promise.all(Array.from({ length: IN_FLIGHT }, floodLoop));
    const floodMs = performance.now() - t0;
    flooding = false;
    await Promise.all(reals);
    clearInterval(sampler);
    const timedOut = made.sent < IDS;

    const alive = gate.proc.exitCode === null;
    const memAfter = alive ? memory(pid) : { rssMiB: NaN, hwmMiB: NaN };
    peakRssMiB = Math.max(peakRssMiB, memAfter.rssMiB || 0);
    const filesAfter = files(gate.stateDir);
    // After the flood: does the real product still answer?
    const after = alive ? await request(realAgent, gate.url, {
      method: "POST",
      path: "/api/products/real/reservations",
      headers: { "content-type": "application/json", authorization: `Bearer ${buyerToken("flood-after")}`, "idempotency-key": '"flood-after"' },
      body: '{"quantity":1}',
    }) : { status: "workerd exited", ms: NaN };
    realAgent.destroy();
    floodAgent.destroy();

    const sorted = [...real.latencies].sort((a, b) => a - b);
    const non2xx = Object.entries(real.statuses).filter(([s]) => !/^2\d\d$/.test(s)).reduce((a, [, v]) => a + v, 0);
    const lines = [
      `made-up ids: ${made.sent} of ${IDS} sent, ${IN_FLIGHT} in flight, in ${(floodMs / 1000).toFixed(1)} s (${(made.sent / (floodMs / 1000)).toFixed(0)} req/s)${timedOut ? `; stopped at the ${TIMEOUT_MS / 1000} s timeout` : ""}; statuses ${JSON.stringify(made.statuses)}`,
      `workerd resident memory: ${memBefore.rssMiB.toFixed(1)} MiB before, ${memAfter.rssMiB.toFixed(1)} MiB after, ${peakRssMiB.toFixed(1)} MiB peak (sampled every 100 ms); high-water mark ${memBefore.hwmMiB.toFixed(1)} MiB before, ${memAfter.hwmMiB.toFixed(1)} MiB after`,
      `storage files: ${filesBefore.count} files, ${mib(filesBefore.bytes)} MiB before; ${filesAfter.count} files, ${mib(filesAfter.bytes)} MiB after`,
      `real product during the flood (${REAL_IN_FLIGHT} in flight, a fresh buyer each): ${real.latencies.length} reserves, p50 ${quantile(sorted, 0.5).toFixed(2)} ms, p99 ${quantile(sorted, 0.99).toFixed(2)} ms, max ${quantile(sorted, 1).toFixed(2)} ms, non-2xx ${non2xx}; statuses ${JSON.stringify(real.statuses)}`,
      `real product after the flood: ${after.status} in ${after.ms.toFixed(2)} ms`,
    ];
    if (!alive) lines.push(`workerd exited during the run (code ${gate.proc.exitCode}); its last stderr: ${gate.stderr().slice(-2000)}`);
    const errors = gate.stderr().match(/SQLITE_\w+|out of memory|OOM/gi);
    if (errors) lines.push(`workerd's stderr named: ${JSON.stringify([...new Set(errors)])} (${errors.length} times)`);
    for (const l of lines) console.log(l);

    const machine = `${cpus().length} cores (${cpus()[0]?.model ?? "?"}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB; ${version(WORKERD, ["--version"])}`;
    writeResults(
      [
        "## A flood of made-up product ids beside a real sale",
        "",
        `Generated by \`FLOOD_IDS=${IDS} node bench/flood.mjs\` on ${started.toISOString()} at ${commit()}.`,
        `Machine: ${machine}. Shared and noisy: read the flood's cost and the real product's figures together, not as absolutes.`,
        "",
        ...lines.map((l) => `- ${l}`),
      ].join("\n"),
    );
  } finally {
    await gate.stop();
  }
}

await main();
