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
// Then the same for N paid (confirmed) orders, whose outbox entries the
// origin has acked: they stay in SQLite, and only each buyer's count of
// units stays in memory (flashgate_core::archive), so memory grows by the
// bytes per buyer, not per record. A replay of the first order's reserve,
// and the buyer's read of it, come back from SQLite.
//
// Last, 100,000 holds that all expire in the same millisecond, written the
// same way with an expiry already past: the restored object must settle
// them over several events (alarms and batches), none doing more than the
// core's SETTLE_PER_EVENT_MAX, and the run reports how many events it took
// and how long until none was left.
//
//   node bench/memory.mjs [N ...]     (default: 10000 100000 and the default cap;
//                                      paid orders: 100000 and 1000000;
//                                      the expiry backlog: 100000)
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { coreLimit, startGate } from "../tests/support/runtime.mjs";
import { client } from "../tests/support/client.mjs";

// `Config::default()`'s `reservations_max`, read from its one definition.
const DEFAULT_CAP = coreLimit("RESERVATIONS_MAX_DEFAULT");
const sizes = process.argv.slice(2).map(Number);
const paidSizes = sizes.length === 0 ? [100_000, 1_000_000] : [];
const backlogSizes = sizes.length === 0 ? [100_000] : [];
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
kind, n, expires, paths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
# Every object has its own file; the product's is the one with its tables.
def has_product(path):
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'product'").fetchone()[0] == 1
[path] = [p for p in paths if has_product(p)]
db = sqlite3.connect(path)
if kind in ("held", "due"):
    db.execute("""
      WITH RECURSIVE c(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
      INSERT INTO reservations (id, buyer, idem_key, quantity, state, expires_at_ms)
      SELECT i, printf('buyer-%09d', i), printf('key-%09d', i), 1, 'held', ? FROM c""", (n, expires))
else:
    # Paid orders, each acked by the origin: its outbox sequence at or
    # below the acked cursor, and the outbox empty.
    db.execute("DELETE FROM outbox")
    db.execute("""
      WITH RECURSIVE c(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
      INSERT INTO reservations (id, buyer, idem_key, quantity, state, expires_at_ms,
                                payment_ref, confirmed_at_ms, outbox_seq)
      SELECT i, printf('buyer-%09d', i), printf('key-%09d', i), 1, 'confirmed', ?,
             printf('pay-%09d', i), ? - 1000, i + 10 FROM c""", (n, expires, expires))
    db.execute("UPDATE meta SET outbox_acked_seq = ?, outbox_attempts = 0", (n + 20,))
db.execute("UPDATE meta SET next_reservation_id = ?", (n + 1,))
db.commit()
print(db.execute("SELECT count(*) FROM reservations").fetchone()[0])
`;

async function measure(n, kind = "held") {
  const stateDir = join(mkdtempSync(join(tmpdir(), "flashgate-memory-")), "state");
  let gate = await startGate({ stateDir });
  let api = client(gate.url);
  const put = await api.put("mem", { stock_total: n + 10, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 86_400_000, reservations_max: kind === "held" ? Math.max(n, 1) : 1_000 });
  if (put.status !== 201) throw new Error(JSON.stringify(put.body));
  const first = await api.reserve("mem", "buyer-first", 1, "key-first");
  if (first.status !== 201) throw new Error(JSON.stringify(first.body));
  if (kind === "paid") {
    const paid = await api.confirm("mem", "buyer-first", first.body.reservation_id, "pay-first");
    if (paid.status !== 200) throw new Error(JSON.stringify(paid.body));
    // The origin is not running: the order stays in the outbox, so it is
    // the one paid record the restore checks a link for.
  }
  const empty = (await api.stats("mem")).body.work.wasm_memory_bytes;
  await gate.stop();

  const dir = join(stateDir, "flashgate-product-gate");
  const files = readdirSync(dir).filter((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite");
  // A backlog's holds all expired a second before the restart.
  const expires = kind === "due" ? Date.now() - 1_000 : Date.now() + 86_400_000;
  const rows = Number(execFileSync("python3", ["-c", FILL, kind, String(n), String(expires), ...files.map((f) => join(dir, f))]).toString().trim());

  gate = await startGate({ stateDir });
  api = client(gate.url);
  try {
    const t0 = Date.now();
    const s = await api.stats("mem");
    const restoreMs = Date.now() - t0;
    if (s.status !== 200) throw new Error(JSON.stringify(s.body));
    const w = s.body.work;
    if (kind === "due") return { n, rows, restoreMs, readyMs: gate.readyMs, ...(await settleBacklog(api, n)), rssMiB: peakRssMiB(gate.proc.pid) };
    if (kind === "held" && s.body.live_holds !== n) throw new Error(`restored ${s.body.live_holds} holds of ${n}`);
    if (kind === "paid" && s.body.sold !== n) throw new Error(`restored ${s.body.sold} sold of ${n}`);
    // The object still decides: a replay of the first reservation (from
    // memory for a hold, from SQLite for a paid order).
    const replay = await api.reserve("mem", "buyer-first", 1, "key-first");
    if (replay.status !== 200) throw new Error(`replay: ${replay.status} ${JSON.stringify(replay.body)}`);
    if (kind === "paid") {
      const read = await api.reservation("mem", "buyer-first", first.body.reservation_id);
      if (read.status !== 200 || read.body.state !== "confirmed") throw new Error(`read: ${JSON.stringify(read.body)}`);
      const deep = await api.reserve("mem", `buyer-${String(n).padStart(9, "0")}`, 1, `key-${String(n).padStart(9, "0")}`);
      if (deep.status !== 200) throw new Error(`replay of the last order: ${deep.status} ${JSON.stringify(deep.body)}`);
    }
    return { n, rows, restoreMs, readyMs: gate.readyMs, rowsLoaded: w.rows_loaded, emptyMiB: empty / 2 ** 20, wasmMiB: w.wasm_memory_bytes / 2 ** 20, rssMiB: peakRssMiB(gate.proc.pid), after: replay.status };
  } finally {
    await gate.stop();
  }
}

/** Polls until the backlog of `n - 1` due holds is settled (the first hold,
 * made over HTTP, lives a day); the object's alarms and the stats reads'
 * batches both settle. */
async function settleBacklog(api, n) {
  const t0 = Date.now();
  let s = (await api.stats("mem")).body;
  while (s.live_holds > 1 && Date.now() - t0 < 300_000) {
    await new Promise((r) => setTimeout(r, 20));
    s = (await api.stats("mem")).body;
  }
  if (s.live_holds > 1) throw new Error(`${s.live_holds} holds of ${n} still live after 300 s`);
  if (s.counters.holds_expired !== n - 1) throw new Error(`expired ${s.counters.holds_expired} of ${n - 1}`);
  return { settleMs: Date.now() - t0, alarms: s.work.alarms, batches: s.work.batches, perEventMax: s.work.settled_per_event_max };
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
const paid = [];
for (const n of paidSizes) {
  const r = await measure(n, "paid");
  paid.push(r);
  console.log(
    `N ${String(n).padStart(8)} paid orders: process start to the product's first answer ${String(r.readyMs + r.restoreMs).padStart(5)} ms (ready ${r.readyMs} + first answer ${r.restoreMs}); rows loaded ${r.rowsLoaded}; ` +
      `wasm memory ${r.wasmMiB.toFixed(1)} MiB; workerd peak RSS ${r.rssMiB.toFixed(1)} MiB; replays of the first and last order answered from SQLite`,
  );
}
if (paid.length >= 2) {
  const [a, b] = [paid[0], paid[paid.length - 1]];
  const perOrder = ((b.wasmMiB - a.wasmMiB) * 2 ** 20) / (b.n - a.n);
  console.log(`wasm bytes per paid order, each from its own buyer (restore peak, ${a.n} to ${b.n}): ${perOrder.toFixed(0)}`);
}
const perEvent = coreLimit("SETTLE_PER_EVENT_MAX");
console.log(`settle limit per event: ${perEvent}`);
for (const n of backlogSizes) {
  const r = await measure(n, "due");
  console.log(
    `N ${String(n).padStart(8)} holds due in the same millisecond: restored in ${r.readyMs + r.restoreMs} ms; all expired ${r.settleMs} ms after the first answer, ` +
      `over ${r.alarms} alarms and ${r.batches} batches, at most ${r.perEventMax} in one event (limit ${perEvent})${r.perEventMax > perEvent ? " OVER THE LIMIT" : ""}`,
  );
}
