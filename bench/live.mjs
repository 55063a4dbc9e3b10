// Live updates at scale: N sockets (default 2,000) watch one product on bare
// workerd; reservations are made one at a time, spaced past the coalescing
// interval, so that each is one broadcast to every socket. The same
// broadcasts are then made by a JavaScript object that only fans out
// (bench/live-ceiling.js), in the same workerd, as the runtime's own cost.
// Prints:
//   - the time from a reservation's answer to the first and to the last
//     socket's update, p50 and p99;
//   - workerd's CPU time per broadcast: the process's CPU (user + system,
//     /proc) over the broadcasts with N sockets open, minus the same
//     requests with no socket, divided by the broadcasts. It counts the
//     object's fan-out and the runtime's socket writes together;
//   - workerd's resident memory before and after the sockets opened, and
//     the isolate's wasm memory (stats.work.wasm_memory_bytes).
// Clients decline permessage-deflate unless DEFLATE=1 (browsers offer it:
// with it, each socket keeps a compressor and each send compresses).
// Asserts nothing about time; it fails only if a socket misses an update.
//
//   node bench/live.mjs [sockets] [broadcasts]
import { copyFileSync, mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { freePort, gateVars, ROOT, startGate, WORKERD } from "../tests/support/runtime.mjs";
import { client } from "../tests/support/client.mjs";

const SOCKETS = Number(process.argv[2] ?? 2000);
const BROADCASTS = Number(process.argv[3] ?? 40);
const DEFLATE = process.env.DEFLATE === "1";
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  // utime and stime, in clock ticks of 10 ms.
  return (Number(f[11]) + Number(f[12])) * 10;
}
function rssMiB(pid) {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;
}
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function startFanout() {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-fanout-"));
  copyFileSync(join(ROOT, "bench/live-ceiling.js"), join(dir, "fanout.js"));
  mkdirSync(join(dir, "state"));
  const port = await freePort();
  writeFileSync(join(dir, "fanout.capnp"), `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .w), (name = "disk", disk = (path = "state", writable = true)) ],
  sockets = [ ( name = "http", address = "127.0.0.1:${port}", http = (), service = "main" ) ],
);
const w :Workerd.Worker = (
  modules = [ (name = "fanout.js", esModule = embed "fanout.js") ],
  compatibilityDate = "2026-04-01",
  durableObjectNamespaces = [ (className = "Fanout", uniqueKey = "fanout", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [ (name = "FANOUT", durableObjectNamespace = "Fanout") ],
);
`);
  const proc = spawn(WORKERD, ["serve", "fanout.capnp", "--experimental"], { cwd: dir, stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      await (await fetch(`${url}/push?available=0`, { method: "POST" })).text();
      break;
    } catch {
      if (i > 600) throw new Error("the fan-out object did not start");
      await sleep(50);
    }
  }
  const exited = new Promise((ok) => proc.once("exit", ok));
  return { url, proc, stop: async () => { proc.kill("SIGTERM"); await exited; } };
}

/** Opens the sockets, 100 at a time; each records when it first saw each
 * `available`. */
async function openSockets(url) {
  const sockets = [];
  for (let i = 0; i < SOCKETS; i += 100) {
    await Promise.all(Array.from({ length: Math.min(100, SOCKETS - i) }, () => new Promise((ok, fail) => {
      const ws = new WebSocket(url, { perMessageDeflate: DEFLATE });
      const s = { ws, seen: new Map() };
      ws.on("message", (d) => {
        const m = JSON.parse(d.toString());
        if (!s.seen.has(m.available)) s.seen.set(m.available, Date.now());
      });
      ws.on("open", () => ok(sockets.push(s)));
      ws.on("error", fail);
    })));
  }
  return sockets;
}

/**
 * Measures one system. `broadcast(i, round)` makes the i-th broadcast of a
 * round and returns the `available` it shows.
 */
async function measure(name, pid, wsUrl, broadcast, wasmMemory) {
  const round = async (r) => {
    const answered = [];
    for (let i = 0; i < BROADCASTS; i++) {
      const available = await broadcast(i, r);
      answered.push({ available, at: Date.now() });
      await sleep(150);
    }
    return answered;
  };
  await round(0); // warm up
  const c0 = cpuMs(pid);
  await round(1);
  const bare = cpuMs(pid) - c0;
  const rss0 = rssMiB(pid);
  const opened = Date.now();
  const sockets = await openSockets(wsUrl);
  const openMs = Date.now() - opened;
  await sleep(500);
  const rss1 = rssMiB(pid);
  const c1 = cpuMs(pid);
  const answered = await round(2);
  const watched = cpuMs(pid) - c1;
  await sleep(1000);
  const first = [];
  const last = [];
  let missed = 0;
  for (const { available, at } of answered) {
    const times = sockets.map((s) => s.seen.get(available));
    const got = times.filter((t) => t !== undefined);
    missed += times.length - got.length;
    if (got.length === 0) continue;
    first.push(Math.max(0, Math.min(...got) - at));
    last.push(Math.max(0, Math.max(...got) - at));
  }
  const wasm = wasmMemory ? await wasmMemory() : null;
  for (const s of sockets) s.ws.terminate();
  const perBroadcast = (watched - bare) / BROADCASTS;
  console.log(`${name}: ${SOCKETS} sockets opened in ${openMs} ms; ${BROADCASTS} broadcasts`);
  console.log(`  answer -> first socket updated p50 ${pct(first, 50)} ms p99 ${pct(first, 99)} ms; -> last socket p50 ${pct(last, 50)} ms p99 ${pct(last, 99)} ms`);
  console.log(`  workerd CPU ${bare} ms without sockets, ${watched} ms with: ${perBroadcast.toFixed(1)} ms per broadcast (${((perBroadcast * 1000) / SOCKETS).toFixed(1)} us per socket)`);
  console.log(`  workerd RSS ${rss0.toFixed(1)} -> ${rss1.toFixed(1)} MiB (${(((rss1 - rss0) * 1024) / SOCKETS).toFixed(1)} KiB per socket)${wasm === null ? "" : `; isolate wasm memory ${(wasm / 1048576).toFixed(1)} MiB`}`);
  if (missed > 0) {
    console.error(`  FAIL: ${missed} socket updates missing`);
    process.exitCode = 1;
  }
  return perBroadcast;
}

console.log(`permessage-deflate ${DEFLATE ? "on" : "off"}`);
const gate = await startGate({ vars: gateVars({ overrides: { LIVE_SOCKETS_MAX: String(Math.max(SOCKETS, 1)) } }) });
let ours;
try {
  const api = client(gate.url);
  const stock = BROADCASTS * 3 + 10;
  for (const p of ["bare", "watched"]) {
    const r = await api.put(p, { stock_total: stock, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 600_000 });
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
  }
  // Rounds 0 and 1 reserve on a product nobody watches; round 2 on the
  // watched one, each reservation a broadcast.
  const taken = { bare: 0, watched: 0 };
  ours = await measure(
    "flashgate (reserve, then its object's push)",
    gate.proc.pid,
    `${gate.url.replace("http", "ws")}/api/products/watched/live`,
    async (i, r) => {
      const p = r === 2 ? "watched" : "bare";
      const res = await api.reserve(p, `${p}-${r}-${i}`, 1);
      if (res.status !== 201) throw new Error(`reserve: ${res.status} ${JSON.stringify(res.body)}`);
      taken[p]++;
      return stock - taken[p];
    },
    async () => (await api.stats("watched")).body.work.wasm_memory_bytes,
  );
} finally {
  await gate.stop();
}
const fan = await startFanout();
try {
  const js = await measure("JS object that only fans out (the runtime's cost)", fan.proc.pid, `${fan.url.replace("http", "ws")}/live`, async (i, r) => {
    const available = r * 1000 + i;
    await (await fetch(`${fan.url}/push?available=${available}`, { method: "POST" })).text();
    return available;
  });
  console.log(`flashgate's CPU per broadcast / the JS fan-out's: ${(ours / js).toFixed(2)}x`);
} finally {
  await fan.stop();
}
