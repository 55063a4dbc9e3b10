// The side-by-side benchmark: the same flash sale against flashgate (bare
// workerd, origin on PostgreSQL), the runtime ceiling (bench/baseline, same
// workerd), and every recipe of bench/peers, each driven by flashgate-load;
// then the fault runs. Prints a table and writes bench/RESULTS.md.
//
//   node bench/compare.mjs            the full run (BENCH_RUNS runs each, median)
//   node bench/compare.mjs --smoke    a few seconds per system, one run, for CI;
//                                     writes test-artifacts/compare-smoke.json
//
// Figures are medians over runs with their spread (min-max). Never fails on
// speed; exits non-zero only when a run could not be made.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { cpus, totalmem, tmpdir } from "node:os";
import { join } from "node:path";
import * as keys from "../tests/support/keys.mjs";
import { originBinary, startOrigin } from "../tests/support/origin.mjs";
import { cargoBinary, freePort, GATE_BUILT, gateVars, requireBuilt, ROOT, startGate, WORKERD } from "../tests/support/runtime.mjs";
import { startCeiling } from "./ceiling.mjs";

// The smoke run: `--smoke`, or FLASHGATE_COMPARE_SMOKE=1 for the test that
// imports this module.
const SMOKE = process.argv.includes("--smoke") || process.env.FLASHGATE_COMPARE_SMOKE === "1";
const RUNS = SMOKE ? 1 : Number(process.env.BENCH_RUNS ?? 3);
const PROFILE = process.env.FLASHGATE_BENCH_PROFILE ?? (SMOKE ? "debug" : "release");
const PG = process.env.FLASHGATE_TEST_PG ?? "postgres://root@127.0.0.1:5432/test";
const MYSQL = process.env.FLASHGATE_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306/test";

/** The workloads: the same for every system. */
export const WORKLOADS = SMOKE
  ? [{ name: "sale", stock: 20, buyers: 400, connections: 32 }]
  : [
      { name: "sale: 100 units, 20,000 buyers", stock: 100, buyers: 20_000, connections: 256, runs: RUNS },
      // Every click takes a unit: through a lock recipe at a few hundred a
      // second this takes minutes per run, so it runs fewer times.
      { name: "reserve-heavy: 10^6 units, 20,000 buyers", stock: 1_000_000, buyers: 20_000, connections: 256, runs: Math.min(RUNS, 2) },
    ];

export const RECIPES = ["lua-mq", "redis-lock", "optimistic-pg", "optimistic-mariadb", "lock-table", "for-update", "zookeeper", "naive"];

/** A ZooKeeper server on loopback, from Debian's `zookeeper` package, with
 * its data in a fresh directory. */
export async function startZooKeeper() {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-zk-"));
  const port = await freePort();
  writeFileSync(
    join(dir, "zoo.cfg"),
    `tickTime=2000\ndataDir=${dir}/data\nclientPort=${port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n`,
  );
  writeFileSync(join(dir, "log4j.properties"), "log4j.rootLogger=WARN\n");
  const proc = spawn("/usr/share/zookeeper/bin/zkServer.sh", ["start-foreground", join(dir, "zoo.cfg")], {
    env: { ...process.env, ZOOCFGDIR: dir, ZOO_LOG_DIR: dir },
    stdio: "ignore",
  });
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`ZooKeeper exited ${proc.exitCode}`);
    const up = await new Promise((ok) => {
      const s = createConnection({ host: "127.0.0.1", port }, () => {
        s.end();
        ok(true);
      });
      s.on("error", () => ok(false));
    });
    if (up) break;
    if (i > 600) throw new Error("ZooKeeper did not start");
    await sleep(50);
  }
  const exited = new Promise((ok) => proc.once("exit", ok));
  return { hosts: `127.0.0.1:${port}`, proc, async stop() { proc.kill("SIGTERM"); await exited; } };
}

const bin = (name) => cargoBinary(name, PROFILE)[0];

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Proportional set size (PSS: shared pages split among their sharers, so
 * that PostgreSQL's shared buffers count once) of a process and its
 * children, in bytes (Linux). */
function rssTree(pid) {
  let total = 0;
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    total += Number(/Pss:\s+(\d+)/.exec(rollup)?.[1] ?? 0) * 1024;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      for (const c of children ? children.split(" ") : []) total += rssTree(Number(c));
    }
  } catch {
    // The process is gone.
  }
  return total;
}

/** The pids of every running process whose command is `name`. */
function pidsOf(name) {
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, "utf8").trim() === name) out.push(Number(d));
    } catch {}
  }
  return out;
}

/** Samples the peak RSS of `pids()` every 50 ms until stopped. */
function peakRss(pids) {
  let peak = 0;
  const timer = setInterval(() => {
    peak = Math.max(peak, pids().reduce((sum, p) => sum + rssTree(p), 0));
  }, 50);
  return () => {
    clearInterval(timer);
    return peak;
  };
}

/** Runs flashgate-load with `args`; resolves to its JSON report and exit code. */
export function load(args, { killAfterMs, onKill } = {}) {
  return new Promise((ok, fail) => {
    const env = { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN };
    const proc = spawn(bin("flashgate-load"), [...args, "--json"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    proc.stdout.on("data", (d) => (out += d));
    proc.stderr.on("data", (d) => (err += d));
    if (killAfterMs) setTimeout(onKill, killAfterMs);
    proc.on("exit", (code) => {
      if (code === 2 || !out) return fail(new Error(`flashgate-load ${args.join(" ")}: exit ${code}: ${err}`));
      ok({ report: JSON.parse(out), code });
    });
  });
}

const common = (w, seed) => ["--buyers", String(w.buyers), "--connections", String(w.connections), "--seed", String(seed), "--buyer-keys", keys.BUYER_TOKEN_KEYS];

function pgDatabase(name) {
  const psql = (sql) => execFileSync("psql", [PG, "-qc", sql], { env: { ...process.env, PGOPTIONS: "-c client_min_messages=warning" } });
  psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  psql(`CREATE DATABASE ${name}`);
  return { url: PG.replace(/\/[^/]*$/, `/${name}`), drop: () => psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

/** flashgate on bare workerd with its origin on PostgreSQL. */
async function startFlashgate({ stateDir, port } = {}) {
  const db = pgDatabase(`flashgate_compare_${process.pid}`);
  const originPort = await freePort();
  const origin = await startOrigin({ port: originPort, databaseUrl: db.url });
  const gate = await startGate({ stateDir, port, originUrl: origin.url });
  return { gate, origin, db, async stop() { await gate.stop(); await origin.stop(); db.drop(); } };
}

function flashgateArgs(fg, w, seed, product) {
  return [
    "--system", "flashgate", "--url", fg.gate.url, "--product", product, "--stock", String(w.stock),
    "--shares", "100,0,0", "--payment-keys", keys.PAYMENT_KEYS,
    "--origin", fg.origin.url, "--origin-read-token", keys.READ_TOKEN, ...common(w, seed),
  ];
}

/** Starts one recipe of bench/peers on a free port. */
export async function startPeer(recipe, extra = []) {
  const port = await freePort();
  const env = {
    ...process.env,
    FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN,
    FLASHGATE_BUYER_TOKEN_KEYS: keys.BUYER_TOKEN_KEYS,
    PEERS_PG_URL: PG,
    PEERS_MYSQL_URL: MYSQL,
  };
  const proc = spawn(bin("flashgate-peers"), ["serve", "--recipe", recipe, "--listen", `127.0.0.1:${port}`, ...extra], { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`peer ${recipe} exited ${proc.exitCode}: ${stderr}`);
    try {
      if ((await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) })).ok) break;
    } catch {}
    if (i > 300) throw new Error(`peer ${recipe} did not start: ${stderr}`);
    await sleep(50);
  }
  const exited = new Promise((ok) => proc.once("exit", ok));
  return { url, proc, stderr: () => stderr, async stop() { proc.kill("SIGTERM"); await exited; } };
}

/** Starts the Lua recipe's consumer alone. */
function startConsumer() {
  const env = { ...process.env, PEERS_PG_URL: PG };
  return spawn(bin("flashgate-peers"), ["consume"], { env, stdio: "ignore" });
}

const peerArgs = (peer, w, seed, product) => ["--system", "peer", "--url", peer.url, "--product", product, "--stock", String(w.stock), ...common(w, seed)];

/** The database servers each system leans on, by process name. */
const SERVERS = {
  flashgate: ["postgres"],
  "ceiling (group)": [],
  "ceiling (each)": [],
  "lua-mq": ["redis-server", "beam.smp", "postgres"],
  "redis-lock": ["redis-server", "postgres"],
  "optimistic-pg": ["postgres"],
  "optimistic-mariadb": ["mariadbd"],
  "lock-table": ["mariadbd"],
  "for-update": ["postgres"],
  zookeeper: ["java", "postgres"],
  naive: ["postgres"],
};

/** One system, every workload, RUNS runs each. */
async function measure(system, start, argsOf) {
  const rows = [];
  for (const [wi, w] of WORKLOADS.entries()) {
    const runs = [];
    for (let run = 0; run < (w.runs ?? RUNS); run++) {
      const s = await start();
      const serverPeak = peakRss(() => SERVERS[system].flatMap(pidsOf));
      const ownPeak = peakRss(() => s.pids());
      try {
        const product = `cmp-w${wi}-r${run}-${Date.now() % 1e6}`;
        const { report } = await load(argsOf(s, w, 1000 + run, product));
        runs.push({ report, rss: ownPeak(), serverRss: serverPeak() });
      } finally {
        ownPeak();
        serverPeak();
        await s.stop();
      }
    }
    rows.push({ system, workload: w.name, runs });
    const last = runs.at(-1).report;
    console.error(`  ${system.padEnd(20)} ${w.name}: ${runs.map((r) => r.report.throughput_rps.toFixed(0)).join(", ")} req/s; verdict ${last.verdict ? (last.verdict.violations.length ? "FAIL" : "pass") : "-"}`);
  }
  return rows;
}

async function systems() {
  const rows = [];
  rows.push(
    ...(await measure(
      "flashgate",
      async () => {
        const fg = await startFlashgate();
        return { ...fg, pids: () => [fg.gate.proc.pid, fg.origin.proc.pid] };
      },
      flashgateArgs,
    )),
  );
  for (const mode of ["group", "each"]) {
    rows.push(
      ...(await measure(
        `ceiling (${mode})`,
        async () => {
          const c = await startCeiling();
          return { ...c, pids: () => [c.proc.pid], stop: async () => { c.proc.kill("SIGTERM"); await sleep(100); } };
        },
        (c, w, seed) => ["--system", "ceiling", "--url", `${c.url}/${mode}`, ...common(w, seed)],
      )),
    );
  }
  for (const recipe of RECIPES) {
    rows.push(
      ...(await measure(
        recipe,
        async () => {
          const zk = recipe === "zookeeper" ? await startZooKeeper() : null;
          const p = await startPeer(recipe, zk ? ["--zk-hosts", zk.hosts] : []);
          return {
            ...p,
            pids: () => [p.proc.pid],
            async stop() {
              await p.stop();
              await zk?.stop();
            },
          };
        },
        peerArgs,
      )),
    );
  }
  return rows;
}

/** The article's pitfalls, each beside flashgate under the same fault. */
async function faults() {
    // Most buyers get a unit and pay, so the burst lasts long enough for the
  // faults to land in the middle of it.
  const w = SMOKE ? { stock: 1_000, buyers: 1_500, connections: 32 } : { stock: 4_000, buyers: 5_000, connections: 128 };
  const out = [];
  const note = (name, report, extra = {}) => {
    out.push({ name, report, ...extra });
    const v = report.verdict;
    console.error(`  fault: ${name}: oversold ${v.oversold_in_db_units}/${v.oversold_units}, lost ${v.lost_orders}, duplicated ${v.duplicated_orders}, settle ${report.settle_ms} ms`);
  };

  // flashgate: kill -9 of workerd mid-burst, restarted on the same state.
  // The burst's length depends on the machine's hour, so the kill is tried
  // earlier until it lands while reserves are still in flight.
  for (const killAfterMs of [500, 250, 120, 60]) {
    const fg = await startFlashgate();
    const { port, stateDir } = fg.gate;
    let restarted;
    let landed = false;
    try {
      const { report } = await load(flashgateArgs(fg, w, 77, `fault-kill-${Date.now() % 1e6}`), {
        killAfterMs,
        onKill: () => {
          fg.gate.kill();
          restarted = sleep(300).then(() => startGate({ stateDir, port, originUrl: fg.origin.url }));
        },
      });
      landed = (report.endpoints.reserve?.answers.network_error ?? 0) > 0;
      if (landed || killAfterMs === 60) note("flashgate: kill -9 of workerd mid-burst", report);
    } finally {
      (await restarted)?.stop();
      await fg.origin.stop();
      fg.db.drop();
    }
    if (landed) break;
  }

  // (a) The consumer is killed early in the burst and restarted 3 s later;
  // the run reports how long after the last buyer PostgreSQL agrees with
  // Redis, and whether any order was lost or doubled on the way.
  {
    const peer = await startPeer("lua-mq", ["--no-consumer"]);
    let consumer = startConsumer();
    let restart;
    try {
      const { report } = await load(peerArgs(peer, w, 78, `fault-mq-${Date.now() % 1e6}`), {
        killAfterMs: 50,
        onKill: () => {
          consumer.kill("SIGKILL");
          restart = setTimeout(() => (consumer = startConsumer()), 3000);
        },
      });
      note("lua-mq: consumer killed mid-run, restarted after 3 s", report);
    } finally {
      clearTimeout(restart);
      consumer.kill("SIGTERM");
      await peer.stop();
    }
    const quiet = await startPeer("lua-mq");
    try {
      const { report } = await load(peerArgs(quiet, w, 79, `fault-mq-ok-${Date.now() % 1e6}`));
      note("lua-mq: no fault (time until the database agrees)", report);
    } finally {
      await quiet.stop();
    }
  }

  // (b) A holder stalls past its lease (a GC pause), with and without the
  // watchdog.
  // Every holder, sold-out answers included, takes the lock: a smaller
  // crowd keeps the stalls' total short.
  const lockCrowd = { stock: SMOKE ? 50 : 100, buyers: SMOKE ? 300 : 1_000, connections: w.connections };
  for (const watchdog of [false, true]) {
    const extra = ["--lease-ms", "200", "--stall-every", "20", "--stall-ms", "500"];
    const peer = await startPeer("redis-lock", watchdog ? extra : [...extra, "--no-watchdog"]);
    try {
      const { report } = await load(peerArgs(peer, lockCrowd, 80, `fault-lock-${watchdog}-${Date.now() % 1e6}`));
      note(`redis-lock: every 20th holder stalls 500 ms, lease 200 ms, ${watchdog ? "with" : "without"} watchdog`, report);
    } finally {
      await peer.stop();
    }
  }

  // (c2) A lock holder dies without releasing: the product is blocked until
  // the lease expires; the longest reserve shows it.
  {
    const peer = await startPeer("lock-table", ["--lease-ms", "3000", "--die-holding-at", "10"]);
    try {
      const { report } = await load(peerArgs(peer, lockCrowd, 81, `fault-die-${Date.now() % 1e6}`));
      note("lock-table: the 10th holder dies holding a 3 s lease", report, { blocked_ms: report.endpoints.reserve?.latency.max_ms });
    } finally {
      await peer.stop();
    }
  }
  return out;
}

/** The median; of an even count, the mean of the middle two. */
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (x, d = 0) => (x == null || Number.isNaN(x) ? "-" : x.toFixed(d));
const spread = (xs, d = 0) => (xs.length > 1 ? ` (${fmt(Math.min(...xs), d)}-${fmt(Math.max(...xs), d)})` : "");
const mib = (b) => (b / 1048576).toFixed(0);

function table(rows) {
  const lines = [];
  for (const w of WORKLOADS) {
    const here = rows.filter((r) => r.workload === w.name);
    const fg = median(here.find((r) => r.system === "flashgate").runs.map((r) => r.report.throughput_rps));
    lines.push(`\n### ${w.name}, ${w.connections} connections\n`);
    lines.push("| system | req/s | x flashgate | reserve p50 ms | p99 ms | sold-out answer p50 / p99 ms | oversold units | lost / duplicated orders | DB writes per reserve | peak PSS MiB (own / DB servers) |");
    lines.push("|---|---|---|---|---|---|---|---|---|---|");
    for (const r of here) {
      const rps = r.runs.map((x) => x.report.throughput_rps);
      const p50 = r.runs.map((x) => x.report.endpoints.reserve?.latency.p50_ms ?? NaN);
      const p99 = r.runs.map((x) => x.report.endpoints.reserve?.latency.p99_ms ?? NaN);
      const v = r.runs.map((x) => x.report.verdict);
      const over = v[0] ? Math.max(...v.map((x) => Math.max(x.oversold_units, x.oversold_in_db_units))) : null;
      const lost = v[0] ? `${Math.max(...v.map((x) => x.lost_orders))} / ${Math.max(...v.map((x) => x.duplicated_orders))}` : "-";
      const writes = r.runs.map((x) => x.report.db_writes_per_reserve).filter((x) => x != null);
      const so50 = r.runs.map((x) => x.report.sold_out_latency?.p50_ms).filter((x) => x != null);
      const so99 = r.runs.map((x) => x.report.sold_out_latency?.p99_ms).filter((x) => x != null);
      const soldOut = so50.length ? `${fmt(median(so50), 1)} / ${fmt(median(so99), 1)}` : "-";
      lines.push(
        `| ${r.system} | ${fmt(median(rps))}${spread(rps)} | ${(median(rps) / fg).toFixed(2)} | ${fmt(median(p50), 1)}${spread(p50, 1)} | ${fmt(median(p99), 1)}${spread(p99, 1)} | ${soldOut} | ${over ?? "-"} | ${lost} | ${writes.length ? fmt(median(writes), 4) : "-"} | ${mib(median(r.runs.map((x) => x.rss)))} / ${mib(median(r.runs.map((x) => x.serverRss)))} |`,
      );
    }
  }
  return lines.join("\n");
}

function faultTable(out) {
  const lines = [
    "| fault | oversold units (told / in DB) | forgotten holds, lost / duplicated orders | settled after ms | longest reserve attempt ms | reserve attempts: network errors, replays | outcomes |",
    "|---|---|---|---|---|---|---|",
  ];
  for (const f of out) {
    const v = f.report.verdict;
    const outcomes = Object.entries(f.report.outcomes).map(([k, n]) => `${k} ${n}`).join(", ");
    const answers = f.report.endpoints.reserve?.answers ?? {};
    lines.push(
      `| ${f.name} | ${v.oversold_units} / ${v.oversold_in_db_units} | ${v.forgotten_reservations}, ${v.lost_orders} / ${v.duplicated_orders} | ${f.report.settle_ms ?? "not within the timeout"} | ${fmt(f.report.endpoints.reserve?.latency.max_ms)} | ${answers.network_error ?? 0}, ${answers["200"] ?? 0} | ${outcomes} |`,
    );
  }
  return lines.join("\n");
}

function version(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split("\n")[0].trim();
  } catch {
    return `${cmd}: not found`;
  }
}

function machine() {
  return [
    `${cpus().length} cores (${cpus()[0]?.model ?? "?"}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB`,
    version(WORKERD, ["--version"]),
    version("psql", ["--version"]),
    version("mariadb", ["--version"]),
    version("redis-server", ["--version"]),
    `RabbitMQ ${version("rabbitmqctl", ["version"])}`,
  ].join("; ");
}

/** Replaces this run's section of bench/RESULTS.md, between its markers,
 * and keeps the rest: the other benchmarks' figures live there too. */
function writeResults(text) {
  const [start, end] = ["<!-- compare:start -->", "<!-- compare:end -->"];
  const file = join(ROOT, "bench/RESULTS.md");
  const old = existsSync(file) ? readFileSync(file, "utf8") : "";
  const from = old.indexOf(start);
  const to = old.indexOf(end);
  const section = `${start}\n${text}\n${end}`;
  writeFileSync(file, from >= 0 && to > from ? old.slice(0, from) + section + old.slice(to + end.length) : `${section}\n`);
}

async function main() {
  // Before anything starts: on a fresh clone, which commands build what the
  // run needs.
  requireBuilt([cargoBinary("flashgate-load", PROFILE), cargoBinary("flashgate-peers", PROFILE), originBinary(), ...GATE_BUILT]);
  const started = new Date();
  console.error(`compare: ${SMOKE ? "smoke" : "full"} run, ${RUNS} run(s) per system, ${PROFILE} binaries`);
  const rows = await systems();
  console.error("fault runs:");
  const faultRuns = await faults();
  const text = [
    `## flashgate beside the article's recipes`,
    "",
    `Generated by \`${SMOKE ? "node bench/compare.mjs --smoke" : "scripts/bench-compare"}\` on ${started.toISOString()}; median of ${WORKLOADS.map((w) => `${w.runs ?? RUNS} run(s) (${w.name.split(":")[0]})`).join(" and ")}, spread (min-max) in brackets.`,
    `Machine: ${machine()}. Shared and noisy: read ratios, not absolutes.`,
    "",
    "Every system gets the same sale from flashgate-load: buyers arrive at once (burst), each reserves one unit with its own token and Idempotency-Key, retrying network errors with the same key. flashgate's buyers then all pay (the order reaches the origin's PostgreSQL through the outbox); a peer makes its order at the reserve. The ceiling keeps no stock: it shows the runtime's own limit for one object. DB writes are the origin's order rows for flashgate and every write statement for a peer (a conditional update that matched nothing counts). Peak memory is PSS (proportional set size, shared pages split among the processes sharing them), sampled every 50 ms: the serving processes (workerd and the origin; the peer), then the database servers the system uses. The database servers are shared by every system and carry what earlier runs left in their caches.",
    table(rows),
    "",
    "### Fault runs",
    "",
    faultTable(faultRuns),
    "",
  ].join("\n");
  console.log(text);
  if (SMOKE) {
    mkdirSync(join(ROOT, "test-artifacts"), { recursive: true });
    writeFileSync(join(ROOT, "test-artifacts/compare-smoke.json"), JSON.stringify({ rows, faults: faultRuns }, null, 1));
  } else {
    writeResults(text);
  }
  return { rows, faults: faultRuns };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(e.message?.startsWith("not built yet") ? e.message : e);
      process.exit(2);
    },
  );
}
export { main };
