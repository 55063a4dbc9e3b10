// Where a request's time goes: a V8 CPU profile of the gate on bare
// workerd (its inspector), under the same closed-loop load as
// bench/edge.mjs, summarised by self time per function and per category.
// Prints figures; asserts nothing.
//
//   node --experimental-websocket bench/profile.mjs [reserve|confirm|soldout|read|objread|ceiling-hop|ceiling-group|ceiling-each|floor-PATH] [seconds]
//   BENCH_SHARDS=8 node --experimental-websocket bench/profile.mjs soldout   the product over 8 stock shards
//   BENCH_ORIGIN=1 node --experimental-websocket bench/profile.mjs confirm   with an origin (SQLite) that
//     takes the outbox's deliveries, as in a sale; without it the outbox has nowhere to deliver
//
// Categories are read from the function names the wasm's name section
// keeps (Rust symbols) and from the JS glue: wasm-bindgen's glue and
// boundary crossings, serde_json, the token and signature HMACs, the core,
// SQL, workerd's own (native) time, and the rest.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exitUnlessBuilt, freePort, GATE_BUILT, gateVars, writeConfig, WORKERD } from "../tests/support/runtime.mjs";
import { client } from "../tests/support/client.mjs";
import { buyerToken, signedConfirm } from "../tests/support/keys.mjs";
import { cpuUs, load } from "./load.mjs";
import { originBinary, startOrigin } from "../tests/support/origin.mjs";
import { startCeiling, startFloor } from "./ceiling.mjs";

const MODE = process.argv[2] ?? "reserve";
const SECONDS = Number(process.argv[3] ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
/** `BENCH_SHARDS=8`: the profiled product has that many stock shards
 * (sold out, its edge answer rests on home's proofs from every shard). */
const SHARDS = Number(process.env.BENCH_SHARDS ?? 1);
/** `BENCH_ORIGIN=1`: the gate delivers its orders to a real origin (on
 * SQLite), so a confirm's profile holds the outbox's deliveries too. */
const ORIGIN = process.env.BENCH_ORIGIN === "1";

// ceiling-hop, ceiling-group and ceiling-each profile the JavaScript
// ceiling instead, under the same load: the runtime's own cost per request,
// the floor the gate's figures stand on. floor-PATH profiles a path of
// bench/floor.js (floor-duties, floor-product, ...; bench/floor.mjs).
const FLOOR = MODE.startsWith("floor-");
const CEILING = MODE.startsWith("ceiling-") || FLOOR ? `/${MODE.slice(MODE.indexOf("-") + 1)}` : null;
// A fresh clone has neither workerd nor the built Worker: say which command
// builds each before anything is spawned, not a bare ENOENT after.
exitUnlessBuilt(CEILING ? [[WORKERD, "npm ci"]] : ORIGIN ? [...GATE_BUILT, originBinary()] : GATE_BUILT);
const dir = mkdtempSync(join(tmpdir(), "flashgate-profile-"));
mkdirSync(join(dir, "state"));
const inspector = await freePort();
let url;
let proc;
let ceilingRequest;
const origin = ORIGIN && !CEILING ? await startOrigin({}) : null;
if (CEILING) {
  const ceiling = FLOOR ? await startFloor({ inspector }) : await startCeiling({ inspector });
  ({ url, proc } = ceiling);
  ceilingRequest = FLOOR ? ceiling.requests[CEILING.slice(1)] : { path: CEILING };
  if (ceilingRequest === undefined) {
    ceiling.stop();
    throw new Error(`bench/floor.js has no path ${CEILING}: floor-${Object.keys(ceiling.requests).join(", floor-")}`);
  }
} else {
  const port = await freePort();
  const config = writeConfig({ dir, stateDir: join(dir, "state"), port, vars: gateVars({ originUrl: origin?.url ?? "" }) });
  proc = spawn(WORKERD, ["serve", config, "--experimental", `--inspector-addr=127.0.0.1:${inspector}`], { stdio: "ignore" });
  url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      await (await fetch(`${url}/api/products/__ready__`)).arrayBuffer();
      break;
    } catch {
      if (i > 600) throw new Error("workerd did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const ws = new WebSocket(`ws://127.0.0.1:${inspector}/main`);
await new Promise((ok, fail) => {
  ws.onopen = ok;
  ws.onerror = fail;
});
let next = 1;
const waiting = new Map();
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && waiting.has(msg.id)) {
    waiting.get(msg.id)(msg);
    waiting.delete(msg.id);
  }
};
const send = (method, params = {}) =>
  new Promise((ok) => {
    const id = next++;
    waiting.set(id, ok);
    ws.send(JSON.stringify({ id, method, params }));
  });

const api = client(url);
const product = "profiled";
if (!CEILING) await api.put(product, { stock_total: MODE === "soldout" ? 0 : 10_000_000, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_600_000, reservations_max: 200_000, shards: SHARDS });
// objread: buyers read their own holds, which reaches the object and
// writes nothing.
const owners = [];
if (MODE === "objread") {
  for (let c = 0; c < CONNECTIONS; c++) {
    const buyer = `reader-${c}`;
    const r = await api.reserve(product, buyer, 1);
    owners.push({ path: `/api/products/${product}/reservations/${r.body.reservation_id}`, headers: { authorization: `Bearer ${api.tokenOf(buyer)}` } });
  }
}
// confirm: the shop's payment backend confirms holds made beforehand, each
// once (a signed confirm, with its outbox row), so that none is a replay.
// CONFIRM_HOLDS covers the warm-up and both runs at about 3,500 a second;
// past it, a confirm is answered again (`replays` says how many were).
const CONFIRM_HOLDS = Math.ceil((1 + 2 * SECONDS) * 3_500);
const confirms = [];
if (MODE === "confirm") {
  let made = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (made < CONFIRM_HOLDS) {
        const buyer = `payer-${made++}`;
        const r = await api.reserve(product, buyer, 1);
        const { path, init } = signedConfirm(product, r.body.reservation_id, { buyer });
        confirms.push({ method: "POST", path, headers: init.headers, body: init.body });
      }
    }),
  );
}
let confirmed = 0;
// Each reserve is a new buyer's, across the warm-up and both runs, so that
// none is an idempotent replay.
let reserves = 0;
const request = CEILING
  ? () => ceilingRequest
  : MODE === "read"
    ? () => ({ path: `/api/products/${product}` })
    : MODE === "objread"
      ? (n) => owners[n % owners.length]
      : MODE === "confirm"
        ? () => confirms[confirmed++ % confirms.length]
        : () => ({
        method: "POST",
        path: `/api/products/${product}/reservations`,
        headers: { "content-type": "application/json", authorization: `Bearer ${buyerToken(`p-${reserves}`)}`, "idempotency-key": `"p-${reserves++}"` },
        body: '{"quantity":1}',
      });
// Warm up without the profiler, then measure workerd's CPU time per
// request without it, then profile a measured run.
await load({ url, connections: CONNECTIONS, durationMs: 1000, request });
const originBefore = origin ? cpuUs(origin.proc.pid) : 0;
const unprofiled = await load({ url, connections: CONNECTIONS, durationMs: SECONDS * 1000, warmupMs: 0, request, pid: proc.pid });
console.log(`without the profiler: ${unprofiled.count} requests in ${SECONDS} s (${unprofiled.rps.toFixed(0)} req/s, p50 ${unprofiled.p50.toFixed(2)} ms), statuses ${JSON.stringify(unprofiled.statuses)}; workerd CPU time ${unprofiled.cpuPerRequestUs.toFixed(1)} us per request`);
if (origin) console.log(`the origin's CPU time: ${((cpuUs(origin.proc.pid) - originBefore) / unprofiled.count).toFixed(1)} us per request`);
if (!CEILING && process.env.BENCH_STATS === "1") {
  // What the objects did meanwhile: snapshots, batches, the escrow's
  // messages (a sharded product's edge answers rest on home's proofs).
  const stats = (await api.stats(product)).body;
  console.log(`stats: ${JSON.stringify({ work: stats.work, escrow: stats.escrow && { ...stats.escrow, shards: undefined } })}`);
}
if (process.env.BENCH_PROFILE === "0") {
  proc.kill("SIGTERM");
  await origin?.stop();
  process.exit(0);
}
await send("Profiler.enable");
await send("Profiler.setSamplingInterval", { interval: 200 });
await send("Profiler.start");
const result = await load({ url, connections: CONNECTIONS, durationMs: SECONDS * 1000, warmupMs: 0, request });
const { result: { profile } } = await send("Profiler.stop");
ws.close();
proc.kill("SIGTERM");
await origin?.stop();
writeFileSync(join(dir, "profile.cpuprofile"), JSON.stringify(profile));

// Self time per node, from the sample counts and time deltas.
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map();
for (let i = 0; i < profile.samples.length; i++) {
  const id = profile.samples[i];
  selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
const totalUs = [...selfUs.values()].reduce((a, b) => a + b, 0);
// The bundle's own JS functions (build/index.js: the entry, wasm-bindgen's
// glue and the inline snippets) are minified, so their names say little:
// each is named for its place in the bundle as well.
const BUNDLE = /(^|\/)index\.js$/;
const nameOf = (f) => {
  const name = f.functionName || `(anonymous ${f.url.split("/").pop()}:${f.lineNumber})`;
  return BUNDLE.test(f.url) && f.functionName && !f.functionName.startsWith("__wbg") ? `${name} (bundle:${f.columnNumber})` : name;
};
const perFunction = new Map();
const perCategory = [];
for (const [id, us] of selfUs) {
  const f = byId.get(id).callFrame;
  const name = nameOf(f);
  perFunction.set(name, (perFunction.get(name) ?? 0) + us);
  perCategory.push([name, f.url, us]);
}
const CATEGORIES = [
  ["idle", /^\(idle\)$/],
  ["garbage collector", /^\(garbage collector\)$/],
  ["workerd and V8 native (program)", /^\(program\)$/],
  ["HMAC / SHA-256", /sha2|hmac|Sha256|compress256/],
  ["serde_json", /serde_json|serde::/],
  ["SQL (storage calls)", /sql|Sql|SqlStorage|exec/],
  ["core (decisions)", /flashgate_core/],
  ["wasm-bindgen glue and JS<->wasm crossings", /^__wbg|wasm_bindgen|__wbindgen|js_sys|web_sys|getObject|addHeapObject|takeObject|passStringToWasm|getStringFromWasm|handleError|dropObject/],
  ["allocator and memory", /dlmalloc|alloc::|__rust_alloc|__rust_dealloc|realloc|memcpy|memmove|memset/],
  ["formatting", /core::fmt|alloc::fmt|format/],
  ["flashgate shell (api, service, views, object)", /flashgate/],
  ["worker crate", /worker::/],
];
// What no name matches goes by where it runs: the bundle's JS, the
// runtime's own functions (no script: `fetch`, `Response`, `exec`...), or
// the rest.
const categories = new Map();
for (const [name, url, us] of perCategory) {
  const cat =
    CATEGORIES.find(([, re]) => re.test(name))?.[0] ??
    (BUNDLE.test(url) ? "the bundle's other JS (entry, snippets)" : url ? "other JS and wasm" : "the runtime's functions (fetch, Response, exec...)");
  categories.set(cat, (categories.get(cat) ?? 0) + us);
}
const busyUs = totalUs - (categories.get("idle") ?? 0);
const requests = result.count;
console.log(`profile of ${MODE}: ${requests} requests in ${SECONDS} s (${result.rps.toFixed(0)} req/s, p50 ${result.p50.toFixed(2)} ms), statuses ${JSON.stringify(result.statuses)}`);
if (MODE === "confirm") console.log(`confirms: ${confirmed} sent of ${confirms.length} holds; ${Math.max(0, confirmed - confirms.length)} were answered again (replays)`);
console.log(`isolate busy ${(busyUs / 1000).toFixed(0)} ms of ${(totalUs / 1000).toFixed(0)} ms sampled: ${(busyUs / requests).toFixed(1)} us per request`);
console.log("\nby category (self time, us per request, share of busy time):");
for (const [cat, us] of [...categories].sort((a, b) => b[1] - a[1])) {
  if (cat === "idle") continue;
  console.log(`  ${cat.padEnd(48)} ${(us / requests).toFixed(1).padStart(7)} us  ${((100 * us) / busyUs).toFixed(1).padStart(5)}%`);
}
console.log("\ntop functions (self time):");
for (const [name, us] of [...perFunction].sort((a, b) => b[1] - a[1]).slice(0, 30)) {
  if (name === "(idle)") continue;
  console.log(`  ${(us / requests).toFixed(1).padStart(7)} us  ${((100 * us) / busyUs).toFixed(1).padStart(5)}%  ${name.slice(0, 110)}`);
}
// Inclusive time under each function, to tell the Worker's part from the
// object's: the children of every node, summed.
const children = new Map(profile.nodes.map((n) => [n.id, n.children ?? []]));
const inclusive = new Map();
const total = (id) => {
  if (inclusive.has(id)) return inclusive.get(id);
  const t = (selfUs.get(id) ?? 0) + children.get(id).reduce((a, c) => a + total(c), 0);
  inclusive.set(id, t);
  return t;
};
const perFunctionInclusive = new Map();
for (const n of profile.nodes) {
  const name = nameOf(n.callFrame);
  perFunctionInclusive.set(name, (perFunctionInclusive.get(name) ?? 0) + total(n.id));
}
console.log("\nentry points and heavy callers (inclusive time, us per request; nested calls count in each):");
for (const name of ["fetch", "__wbg_fetch_58e62838507dad34", "worker::durable::State", "Request", "Response", "text", "arrayBuffer", "limit", "exec", "setTimeout"]) {
  if (perFunctionInclusive.has(name)) console.log(`  ${(perFunctionInclusive.get(name) / requests).toFixed(1).padStart(7)} us  ${name}`);
}
for (const [name, us] of [...perFunctionInclusive].filter(([n]) => /^(wasm-function|<?flashgate|flashgate|worker::|wasm_bindgen_futures)/.test(n)).sort((a, b) => b[1] - a[1]).slice(0, 15)) {
  console.log(`  ${(us / requests).toFixed(1).padStart(7)} us  ${name.slice(0, 110)}`);
}
console.log(`\nthe full profile: ${join(dir, "profile.cpuprofile")} (Chrome DevTools can open it)`);
