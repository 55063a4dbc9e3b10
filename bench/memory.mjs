// Memory per record and a restore at the cap. For each size N, a product is
// created over HTTP with one real hold; the runtime is stopped, and N - 1
// more held reservations are written straight into the object's SQLite
// file (python3's sqlite3, a real SQLite), as rows the object itself
// writes. The runtime then starts on that state, and the first request
// restores the whole product. Prints, per N: the time from the process
// start to the product's first answer (workerd sometimes does part of the
// work before it answers its readiness probe, so both are counted), the
// rows loaded, the isolate's wasm memory (it only grows,
// so it is the peak of the restore and what followed), and workerd's peak
// resident memory. Asserts nothing about time.
//
//   node bench/memory.mjs [N ...]     (default: 10000 100000 and the default cap)
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { coreLimit, startGate } from "../tests/support/runtime.mjs";
import { client } from "../tests/support/client.mjs";

// `Config::default()`'s `reservations_max`, read from its one definition.
const DEFAULT_CAP = coreLimit("RESERVATIONS_MAX_DEFAULT");
const sizes = process.argv.slice(2).map(Number);
if (sizes.length === 0) sizes.push(10_000, 100_000, DEFAULT_CAP);


function peakRssMiB(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/VmHWM:\s+(\d+)/.exec(status)[1]) / 1024;
  } catch {
    return NaN;
  }
}

const FILL = `
import sqlite3, sys
n, expires, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
# Every object has its own file; the product's is the one with its tables.
def has_product(path):
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'product'").fetchone()[0] == 1
[path] = [p for p in paths if has_product(p)]
db = sqlite3.connect(path)
db.execute("""
  WITH RECURSIVE c(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
  INSERT INTO reservations (id, buyer, idem_key, quantity, state, expires_at_ms)
  SELECT i, printf('buyer-%09d', i), printf('key-%09d', i), 1, 'held', ? FROM c""", (n, expires))
db.execute("UPDATE meta SET next_reservation_id = ?", (n + 1,))
db.commit()
print(db.execute("SELECT count(*) FROM reservations").fetchone()[0])
`;

async function measure(n) {
  const stateDir = join(mkdtempSync(join(tmpdir(), "flashgate-memory-")), "state");
  let gate = await startGate({ stateDir });
  let api = client(gate.url);
  const put = await api.put("mem", { stock_total: n + 10, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 86_400_000, reservations_max: Math.max(n, 1) });
  if (put.status !== 201) throw new Error(JSON.stringify(put.body));
  const first = await api.reserve("mem", "buyer-first", 1);
  if (first.status !== 201) throw new Error(JSON.stringify(first.body));
  const empty = (await api.stats("mem")).body.work.wasm_memory_bytes;
  await gate.stop();

  const dir = join(stateDir, "flashgate-product-gate");
  const files = readdirSync(dir).filter((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite");
  const expires = Date.now() + 86_400_000;
  const rows = Number(execFileSync("python3", ["-c", FILL, String(n), String(expires), ...files.map((f) => join(dir, f))]).toString().trim());

  gate = await startGate({ stateDir });
  api = client(gate.url);
  try {
    const t0 = Date.now();
    const s = await api.stats("mem");
    const restoreMs = Date.now() - t0;
    if (s.status !== 200) throw new Error(JSON.stringify(s.body));
    const w = s.body.work;
    if (s.body.live_holds !== n) throw new Error(`restored ${s.body.live_holds} holds of ${n}`);
    // The object still decides: a replay of the first hold, and a reserve
    // that the cap refuses.
    const replay = await api.reserve("mem", "buyer-first", 1, "unused");
    return { n, rows, restoreMs, readyMs: gate.readyMs, rowsLoaded: w.rows_loaded, emptyMiB: empty / 2 ** 20, wasmMiB: w.wasm_memory_bytes / 2 ** 20, rssMiB: peakRssMiB(gate.proc.pid), after: replay.status };
  } finally {
    await gate.stop();
  }
}

console.log(`memory and restore: N held reservations restored from SQLite (default reservations_max ${DEFAULT_CAP})`);
const results = [];
for (const n of sizes) {
  const r = await measure(n);
  results.push(r);
  console.log(
    `N ${String(n).padStart(8)}: process start to the product's first answer (the restore) ${String(r.readyMs + r.restoreMs).padStart(5)} ms (ready ${r.readyMs} + first answer ${r.restoreMs}); rows loaded ${r.rowsLoaded}; ` +
      `wasm memory ${r.wasmMiB.toFixed(1)} MiB (one hold: ${r.emptyMiB.toFixed(1)} MiB); workerd peak RSS ${r.rssMiB.toFixed(1)} MiB`,
  );
}
if (results.length >= 2) {
  const [a, b] = [results[0], results[results.length - 1]];
  const perRecord = ((b.wasmMiB - a.wasmMiB) * 2 ** 20) / (b.n - a.n);
  console.log(`wasm bytes per held record (restore peak, ${a.n} to ${b.n}): ${perRecord.toFixed(0)}`);
}
console.log(`settle limit per event: ${coreLimit("SETTLE_PER_EVENT_MAX")}`);
