// What a quiet sharded product costs: a product of K stock shards with
// holds and no traffic, on bare workerd with the origin, measured over a
// minute once its levels have settled: the shards' reports home (home's
// count of them) and the rows written (every table of every object's
// SQLite database read before and after; a table whose rows changed was
// written). The platform bills each report as a request and each row as a
// row written, and an object that wakes for nothing never hibernates.
//
//   node bench/idle.mjs            K = 8, 40 holds, 60 s
//   BENCH_SHARDS=8 BENCH_HOLDS=40 BENCH_IDLE_S=60 node bench/idle.mjs
//
// Never fails on the figures; exits non-zero only when it cannot measure.
import { execFileSync } from "node:child_process";
import { cpus } from "node:os";
import { client, pool, sleep } from "../tests/support/client.mjs";
import { startOrigin } from "../tests/support/origin.mjs";
import { gateVars, startGate } from "../tests/support/runtime.mjs";

const SHARDS = Number(process.env.BENCH_SHARDS ?? 8);
const HOLDS = Number(process.env.BENCH_HOLDS ?? 40);
const IDLE_S = Number(process.env.BENCH_IDLE_S ?? 60);

/** One line per table of every object's database: its name and a digest
 * of its rows. */
function tables(dir) {
  const script = `
import hashlib, os, sqlite3, sys
for root, _, files in sorted(os.walk(sys.argv[1])):
    for f in sorted(files):
        if not f.endswith(".sqlite") or f == "metadata.sqlite":
            continue
        db = sqlite3.connect("file:" + os.path.join(root, f) + "?mode=ro", uri=True)
        for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"):
            rows = list(db.execute('SELECT * FROM "%s"' % t.replace('"', '""')))
            print(f[:12], t, len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()[:16])
        db.close()`;
  return execFileSync("python3", ["-c", script, dir]).toString().trim().split("\n");
}

const origin = await startOrigin({});
const gate = await startGate({ vars: gateVars({ originUrl: origin.url }) });
const api = client(gate.url);
try {
  console.log(`machine: ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; ${new Date().toISOString()}`);
  const product = "idle";
  const r = await api.put(product, { stock_total: 1_000, shards: SHARDS, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_600_000 });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(r.body)}`);
  const holds = await pool(Array.from({ length: HOLDS }, (_, i) => () => api.reserve(product, `idle-${i}`, 1)), 8);
  if (holds.some((h) => h.status !== 201)) throw new Error("a hold was refused");
  // Settled: no report for 3 s, then the shards' last confirmations.
  let settled = (await api.stats(product)).body.escrow;
  const start = Date.now();
  for (let still = 0; still < 6 && Date.now() - start < 30_000; ) {
    await sleep(500);
    const now = (await api.stats(product)).body.escrow;
    still = now.reports === settled.reports ? still + 1 : 0;
    settled = now;
  }
  await sleep(6_000);
  settled = (await api.stats(product)).body.escrow;
  const before = tables(gate.stateDir);
  await sleep(IDLE_S * 1000);
  const after = (await api.stats(product)).body.escrow;
  const now = tables(gate.stateDir);
  const written = now.filter((line) => !before.includes(line));
  console.log(`K = ${SHARDS}, ${HOLDS} holds, settled after ${((Date.now() - start) / 1000 - IDLE_S).toFixed(1)} s, then ${IDLE_S} s alone:`);
  console.log(`  reports home: ${after.reports - settled.reports} (${settled.reports} before, ${after.reports} after)`);
  console.log(`  tables written: ${written.length} of ${now.length}${written.length ? `: ${written.join("; ")}` : ""}`);
} finally {
  await gate.stop();
  await origin.stop?.();
}
