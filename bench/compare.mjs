// The side-by-side benchmark: the same flash sale against flashgate (bare
// workerd, origin on PostgreSQL), the runtime ceiling (bench/baseline, same
// workerd), and every recipe of bench/peers, each driven by flashgate-load;
// then the fault runs. Prints a table and writes bench/RESULTS.md.
//
//   node bench/compare.mjs            the full run (BENCH_RUNS runs each, median)
//   node bench/compare.mjs --smoke    a few seconds per system, one run, for CI;
//                                     writes test-artifacts/compare-smoke.json
//   BENCH_SYSTEMS=flashgate,lua-mq scripts/bench-compare
//                                     those systems only (a name takes in its
//                                     rows: "flashgate" both K), no fault
//                                     runs; prints, and writes nothing
//
// Figures are medians over runs with their spread (min-max). Never fails on
// speed; exits non-zero only when a run could not be made.
//
// CPU is user + system time from /proc over each run's load, of every
// serving process (and its children) and, beside it, of each database or
// broker server the system uses; the cost model prices flashgate's
// measured work at the platform's published prices (PRICES).
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
/** `BENCH_SYSTEMS`: the systems to run, when not all of them. */
const ONLY = process.env.BENCH_SYSTEMS?.split(",").map((s) => s.trim());
const wanted = (system) => !ONLY || ONLY.some((s) => system === s || system.startsWith(`${s},`) || system.startsWith(`${s} `));
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

const CLOCK_TICKS_PER_S = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

/** The CPU time (user + system, in ms) process `pid` and every process
 * under it used: its own, its reaped children's (so that PostgreSQL's
 * backends that exited during a run still count, in their postmaster), and
 * its live children's, recursively. 0 once the process is gone. */
function treeCpuMs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    // utime, stime, cutime, cstime: fields 14 to 17 of proc(5).
    let ms = ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / CLOCK_TICKS_PER_S;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      for (const c of children ? children.split(" ") : []) ms += treeCpuMs(Number(c));
    }
    return ms;
  } catch {
    return 0;
  }
}

/** The command name of process `pid`, or "" once it is gone. */
function commOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

/** Each server's CPU so far, by name: the trees under its processes whose
 * parent is not one of its own (PostgreSQL's postmaster, not each backend),
 * by root pid. */
export function serverCpu(names) {
  const out = {};
  for (const name of names) {
    out[name] = new Map();
    for (const pid of pidsOf(name)) {
      try {
        const ppid = Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[1]);
        if (commOf(ppid) !== name) out[name].set(pid, treeCpuMs(pid));
      } catch {}
    }
  }
  return out;
}

/** The CPU each server used between two `serverCpu` readings, in ms. */
export function serverCpuSince(before, after) {
  const out = {};
  for (const [name, roots] of Object.entries(after)) {
    out[name] = 0;
    for (const [pid, ms] of roots) out[name] += Math.max(0, ms - (before[name]?.get(pid) ?? 0));
  }
  return out;
}

/** Each server's idle CPU, in ms per ms, once the servers are steady:
 * windows are sampled until two in a row differ by at most a few ms (a
 * checkpoint or a dropped database from the run before has passed), and
 * the lower of those two is taken for each server. */
async function idleRates(names) {
  const windowMs = SMOKE ? 100 : 500;
  const sample = async () => {
    const before = serverCpu(names);
    await sleep(windowMs);
    return serverCpuSince(before, serverCpu(names));
  };
  const total = (d) => Object.values(d).reduce((a, b) => a + b, 0);
  let prev = await sample();
  for (let i = 0; i < 10; i++) {
    const next = await sample();
    const steady = Math.abs(total(next) - total(prev)) <= 5;
    const rates = Object.fromEntries(names.map((n) => [n, Math.min(prev[n], next[n]) / windowMs]));
    if (steady || i === 9) return rates;
    prev = next;
  }
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

export function pgDatabase(name) {
  const psql = (sql) => execFileSync("psql", [PG, "-qc", sql], { env: { ...process.env, PGOPTIONS: "-c client_min_messages=warning" } });
  psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  psql(`CREATE DATABASE ${name}`);
  return { url: PG.replace(/\/[^/]*$/, `/${name}`), drop: () => psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

function mariaDatabase(name) {
  const url = new URL(MYSQL);
  const sql = (q) => execFileSync("mariadb", ["-h", url.hostname, "-P", url.port || "3306", "-u", decodeURIComponent(url.username) || "root", "-e", q]);
  sql(`DROP DATABASE IF EXISTS ${name}`);
  sql(`CREATE DATABASE ${name}`);
  return { url: MYSQL.replace(/\/[^/]*$/, `/${name}`), drop: () => sql(`DROP DATABASE IF EXISTS ${name}`) };
}

/** flashgate on bare workerd with its origin on PostgreSQL. */
async function startFlashgate({ stateDir, port } = {}) {
  const db = pgDatabase(`flashgate_compare_${process.pid}`);
  const originPort = await freePort();
  const origin = await startOrigin({ port: originPort, databaseUrl: db.url });
  const gate = await startGate({ stateDir, port, originUrl: origin.url });
  return { gate, origin, db, async stop() { await gate.stop(); await origin.stop(); db.drop(); } };
}

function flashgateArgs(fg, w, seed, product, shards = 1) {
  return [
    "--system", "flashgate", "--url", fg.gate.url, "--product", product, "--stock", String(w.stock),
    "--shards", String(shards), "--shares", "100,0,0", "--payment-keys", keys.PAYMENT_KEYS,
    "--origin", fg.origin.url, "--origin-read-token", keys.READ_TOKEN, ...common(w, seed),
  ];
}

/** Starts one recipe of bench/peers on a free port, on the machine's test
 * databases unless given others. */
export async function startPeer(recipe, extra = [], { pgUrl = PG, mysqlUrl = MYSQL } = {}) {
  const port = await freePort();
  const env = {
    ...process.env,
    FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN,
    FLASHGATE_BUYER_TOKEN_KEYS: keys.BUYER_TOKEN_KEYS,
    PEERS_PG_URL: pgUrl ?? PG,
    PEERS_MYSQL_URL: mysqlUrl ?? MYSQL,
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
  "flashgate, K = 8": ["postgres"],
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

/** One system, every workload, RUNS runs each. `start()` gives the
 * system's serving processes as `procs()`, [name, pid] pairs. */
async function measure(system, start, argsOf) {
  const rows = [];
  if (!wanted(system)) return rows;
  for (const [wi, w] of WORKLOADS.entries()) {
    const runs = [];
    for (let run = 0; run < (w.runs ?? RUNS); run++) {
      const s = await start();
      const pids = () => s.procs().map(([, pid]) => pid);
      try {
        // The servers are shared by every system, one run at a time: what
        // they use during a run is that run's, less what they use idle
        // (earlier runs' checkpoints, vacuum, the broker's own ticks),
        // sampled just before it.
        const idle = await idleRates(SERVERS[system]);
        const serverPeak = peakRss(() => SERVERS[system].flatMap(pidsOf));
        const ownPeak = peakRss(pids);
        const product = `cmp-w${wi}-r${run}-${Date.now() % 1e6}`;
        const own0 = s.procs().map(([name, pid]) => [name, treeCpuMs(pid)]);
        const servers0 = serverCpu(SERVERS[system]);
        const t0 = performance.now();
        let report, rss, serverRss;
        try {
          ({ report } = await load(argsOf(s, w, 1000 + run, product)));
        } finally {
          rss = ownPeak();
          serverRss = serverPeak();
        }
        const seconds = (performance.now() - t0) / 1000;
        const own = Object.fromEntries(s.procs().map(([name, pid], i) => [name, treeCpuMs(pid) - own0[i][1]]));
        const servers = Object.fromEntries(
          Object.entries(serverCpuSince(servers0, serverCpu(SERVERS[system]))).map(([name, ms]) => [
            name,
            Math.max(0, ms - (idle[name] ?? 0) * seconds * 1000),
          ]),
        );
        runs.push({ report, rss, serverRss, cpu: { own, servers, idle, seconds } });
      } finally {
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
  for (const shards of [1, 8]) {
    rows.push(
      ...(await measure(
        shards === 1 ? "flashgate" : `flashgate, K = ${shards}`,
        async () => {
          const fg = await startFlashgate();
          return { ...fg, procs: () => [["workerd", fg.gate.proc.pid], ["origin", fg.origin.proc.pid]] };
        },
        (fg, w, seed, product) => flashgateArgs(fg, w, seed, product, shards),
      )),
    );
  }
  for (const mode of ["group", "each"]) {
    rows.push(
      ...(await measure(
        `ceiling (${mode})`,
        async () => {
          const c = await startCeiling();
          return { ...c, procs: () => [["workerd", c.proc.pid]], stop: async () => { c.proc.kill("SIGTERM"); await sleep(100); } };
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
          // A fresh database per run, as flashgate's origin gets, so that
          // no run pays for another's tables.
          const pg = SERVERS[recipe].includes("postgres") ? pgDatabase(`peer_compare_${process.pid}`) : null;
          const maria = SERVERS[recipe].includes("mariadbd") ? mariaDatabase(`peer_compare_${process.pid}`) : null;
          const zk = recipe === "zookeeper" ? await startZooKeeper() : null;
          const p = await startPeer(recipe, zk ? ["--zk-hosts", zk.hosts] : [], { pgUrl: pg?.url, mysqlUrl: maria?.url });
          return {
            ...p,
            procs: () => [["peer", p.proc.pid]],
            async stop() {
              await p.stop();
              await zk?.stop();
              pg?.drop();
              maria?.drop();
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

/** The servers' names as the table shows them. */
const SERVER_NAMES = { postgres: "PostgreSQL", "redis-server": "Redis", "beam.smp": "RabbitMQ", mariadbd: "MariaDB", java: "ZooKeeper" };

/** A run's CPU in ms: every serving process and every server, summed. */
const cpuTotal = (run) => Object.values(run.cpu.own).reduce((a, b) => a + b, 0) + Object.values(run.cpu.servers).reduce((a, b) => a + b, 0);

/** The CPU columns of one row: medians over its runs, per 1,000 buyers
 * (the whole, then each process and server) and per 1,000 requests. */
export function cpuColumns(r) {
  const per = (ms, n) => (ms / n) * 1000;
  const all = r.runs.map((x) => per(cpuTotal(x), x.report.buyers));
  const perRequest = r.runs.map((x) => per(cpuTotal(x), x.report.requests));
  const parts = (key) =>
    Object.keys(r.runs[0].cpu[key])
      .map((name) => `${SERVER_NAMES[name] ?? name} ${fmt(median(r.runs.map((x) => per(x.cpu[key][name], x.report.buyers))))}`)
      .join(", ");
  return {
    perBuyers: median(all),
    perRequests: median(perRequest),
    cells: [`${fmt(median(all))}${spread(all)}`, parts("own"), parts("servers") || "-", `${fmt(median(perRequest))}${spread(perRequest)}`],
  };
}

function table(rows) {
  const lines = [];
  for (const w of WORKLOADS) {
    const here = rows.filter((r) => r.workload === w.name);
    const fg = median(here.find((r) => r.system === "flashgate").runs.map((r) => r.report.throughput_rps));
    lines.push(`\n### ${w.name}, ${w.connections} connections\n`);
    lines.push("| system | req/s | x flashgate | reserve p50 ms | p99 ms | sold-out answer p50 / p99 ms | oversold units | lost / duplicated orders | DB writes per reserve | peak PSS MiB (own / DB servers) | CPU ms per 1,000 buyers | of which serving processes | of which DB / broker servers | CPU ms per 1,000 requests |");
    lines.push("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
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
        `| ${r.system} | ${fmt(median(rps))}${spread(rps)} | ${(median(rps) / fg).toFixed(2)} | ${fmt(median(p50), 1)}${spread(p50, 1)} | ${fmt(median(p99), 1)}${spread(p99, 1)} | ${soldOut} | ${over ?? "-"} | ${lost} | ${writes.length ? fmt(median(writes), 4) : "-"} | ${mib(median(r.runs.map((x) => x.rss)))} / ${mib(median(r.runs.map((x) => x.serverRss)))} | ${cpuColumns(r).cells.join(" | ")} |`,
      );
    }
    const lua = here.find((r) => r.system === "lua-mq");
    if (lua) {
      const ratio = (system) => {
        const r = here.find((x) => x.system === system);
        return r ? `${(cpuColumns(r).perBuyers / cpuColumns(lua).perBuyers).toFixed(2)}` : "-";
      };
      lines.push("", `flashgate's CPU per 1,000 buyers over the Lua recipe's (every process and server): ${ratio("flashgate")} at K = 1, ${ratio("flashgate, K = 8")} at K = 8.`);
    }
  }
  return lines.join("\n");
}

/** The platform's published prices, in USD per million units beyond the
 * Workers Paid plan's included usage, as the pages named said when read
 * (`date`). Subrequests a Worker makes (its calls to an object) are not
 * Workers requests; each is a Durable Objects request. */
export const PRICES = {
  date: "2026-12-05",
  workers: {
    page: "https://developers.cloudflare.com/workers/platform/pricing/",
    // Standard usage model: 10 million requests and 30 million CPU ms a
    // month included.
    request: 0.3,
    cpu_ms: 0.02,
  },
  durableObjects: {
    page: "https://developers.cloudflare.com/durable-objects/platform/pricing/",
    // HTTP requests, RPC sessions, WebSocket messages (20:1) and alarm
    // invocations; 1 million a month included.
    request: 0.15,
    // Wall-clock time while an object is active, at 128 MB whatever it
    // uses; 400,000 GB-s a month included.
    gb_s: 12.5,
    // SQLite-backed objects: 25 billion rows read and 50 million written a
    // month included.
    row_read: 0.001,
    row_written: 1.0,
  },
  /** The memory an object is billed for, in GB (the page's examples count
   * 128 MB as 0.128 GB). */
  object_gb: 0.128,
};

/** What one click costs flashgate on the platform, as a model: its
 * measured work per buyer priced at PRICES. Workers requests are every
 * request the run sent; Workers CPU is all of workerd's (an upper bound:
 * on the platform the objects' share is billed as their duration
 * instead); Durable Objects requests and rows are the objects' own counts
 * (`work` in the load report); each of the K objects is taken to be
 * active for the whole run, at this machine's pace. */
export function costOf(run, shards) {
  const buyers = run.report.buyers;
  const work = run.report.work ?? { events: NaN, rows_read: NaN, rows_written: NaN };
  const units = {
    request: run.report.requests / buyers,
    cpu_ms: run.cpu.own.workerd / buyers,
    do_request: work.events / buyers,
    gb_s: (shards * run.cpu.seconds * PRICES.object_gb) / buyers,
    row_read: work.rows_read / buyers,
    row_written: work.rows_written / buyers,
  };
  const w = PRICES.workers;
  const d = PRICES.durableObjects;
  // USD per 10^6 clicks: units per click times USD per 10^6 units.
  const usd = {
    request: units.request * w.request,
    cpu_ms: units.cpu_ms * w.cpu_ms,
    do_request: units.do_request * d.request,
    gb_s: units.gb_s * d.gb_s,
    row_read: units.row_read * d.row_read,
    row_written: units.row_written * d.row_written,
  };
  return { units, usd, total: Object.values(usd).reduce((a, b) => a + b, 0) };
}

function costTable(rows) {
  const d = PRICES.durableObjects;
  const usd = (x) => `$${x >= 0.01 ? x.toFixed(2) : x}`;
  const lines = [
    "### What a sale costs on the platform: a model",
    "",
    `Prices (USD per million, beyond the Workers Paid plan's included usage, whose $5 a month is left out), as published on ${PRICES.date}: Workers (${PRICES.workers.page}) ${usd(PRICES.workers.request)} per million requests, ${usd(PRICES.workers.cpu_ms)} per million CPU ms; Durable Objects (${d.page}) ${usd(d.request)} per million requests (alarms and WebSocket messages included), ${usd(d.gb_s)} per million GB-s of duration (${PRICES.object_gb * 1000} MB an object while active), SQLite rows ${usd(d.row_read)} per million read and ${usd(d.row_written)} per million written.`,
    "",
    "A click is one buyer of the workload with every request it caused (its reserve and retries; in the reserve-heavy workload the payment backend's confirm too). Measured per click on this run: Workers requests from flashgate-load's count; workerd's CPU, all of it billed as Workers CPU (an upper bound: the objects' share is billed as duration instead); the objects' requests, alarms and rows from their own counts (`work.isolate` in the stats, end less start of the run); duration as K objects active for the whole run at this machine's pace. The origin is the shop's own server and is left out. A model, not a bill: the platform's CPU per request and its pace differ from this machine's.",
    "",
    "| workload | K | Workers requests / click | workerd CPU ms / click | object requests / click | object rows read / written per click | USD per 10^6 clicks: requests, CPU, object requests, duration, rows read, rows written | USD per 10^6 clicks |",
    "|---|---|---|---|---|---|---|---|",
  ];
  const totals = [];
  for (const w of WORKLOADS) {
    for (const [system, shards] of [["flashgate", 1], ["flashgate, K = 8", 8]]) {
      const r = rows.find((x) => x.workload === w.name && x.system === system);
      if (!r) continue;
      const costs = r.runs.map((x) => costOf(x, shards));
      const m = (f) => median(costs.map(f));
      const total = costs.map((c) => c.total);
      totals.push(`${w.name.split(":")[0]} at K = ${shards}: $${fmt(median(total), 2)}`);
      lines.push(
        `| ${w.name.split(":")[0]} | ${shards} | ${fmt(m((c) => c.units.request), 2)} | ${fmt(m((c) => c.units.cpu_ms), 3)} | ${fmt(m((c) => c.units.do_request), 2)} | ${fmt(m((c) => c.units.row_read), 1)} / ${fmt(m((c) => c.units.row_written), 2)} | ${["request", "cpu_ms", "do_request", "gb_s", "row_read", "row_written"].map((k) => `$${fmt(m((c) => c.usd[k]), 3)}`).join(", ")} | **$${fmt(median(total), 2)}**${spread(total, 2)} |`,
      );
    }
  }
  lines.push("", `Per 10^6 clicks (model): ${totals.join("; ")}.`);
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
  if (ONLY) console.error("fault runs: none, with BENCH_SYSTEMS");
  else console.error("fault runs:");
  const faultRuns = ONLY ? [] : await faults();
  const text = [
    `## flashgate beside the article's recipes`,
    "",
    `Generated by \`${SMOKE ? "node bench/compare.mjs --smoke" : "scripts/bench-compare"}\` on ${started.toISOString()}; median of ${WORKLOADS.map((w) => `${w.runs ?? RUNS} run(s) (${w.name.split(":")[0]})`).join(" and ")}, spread (min-max) in brackets.`,
    `Machine: ${machine()}. Shared and noisy: read ratios, not absolutes.`,
    "",
    "Every system gets the same sale from flashgate-load: buyers arrive at once (burst), each reserves one unit with its own token and Idempotency-Key, retrying network errors with the same key. flashgate's buyers then all pay (the order reaches the origin's PostgreSQL through the outbox); a peer makes its order at the reserve. The ceiling keeps no stock: it shows the runtime's own limit for one object. DB writes are the origin's order rows for flashgate and every write statement for a peer (a conditional update that matched nothing counts). Peak memory is PSS (proportional set size, shared pages split among the processes sharing them), sampled every 50 ms: the serving processes (workerd and the origin; the peer), then the database servers the system uses. The database servers are shared by every system and carry what earlier runs left in their caches.",
    "CPU is user + system time from /proc over each run, of every serving process (workerd and the origin; the peer, its Lua recipe's consumer in the same process) and, beside it, of each database or broker server the system uses (PostgreSQL counted from its postmaster, which takes in the CPU of its backends as they exit). Runs go one at a time, and a peer gets a fresh database per run as flashgate's origin does; the servers' idle CPU, sampled once they are steady just before each run, is taken off their share, so what is left is the run's.",
    table(rows),
    "",
    costTable(rows),
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
  } else if (!ONLY) {
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
