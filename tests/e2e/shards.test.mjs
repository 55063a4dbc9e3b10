// A product whose stock lives in K = 8 stock shards (core/src/escrow.rs),
// end to end on workerd with the origin: a crowd never oversells it, every
// confirmed order reaches the origin once, the units of expired holds come
// back to the product as one, and nothing is stranded in a shard. Buyers'
// reservations on every shard are read, confirmed and cancelled through
// the ids the gate gave them.
//
// E2E_SEED replays a run.
import { describe, test } from "node:test";
import { execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";
import { ADMIN_TOKEN, pool, sleep } from "../support/client.mjs";
import { READ_TOKEN } from "../support/keys.mjs";
import { rng, why } from "../support/seed.mjs";
import { useGate, withGate } from "../support/system.mjs";

const sale = useGate({ origin: true, vars: { ORIGIN_READ_TOKEN: READ_TOKEN } });

const SHARDS = 8;
/** How long the idle test leaves a product alone. */
const IDLE_MS = Number(process.env.IDLE_MS ?? 30_000);

/** A digest of every table of every object's SQLite database under the
 * gate's storage (read-only, beside the running workerd), one line each:
 * equal lines, nothing written. File times will not do: workerd
 * checkpoints and closes an object's database when it evicts the object,
 * which changes them. */
function storageDigest(dir) {
  const script = `
import hashlib, os, sqlite3, sys
for root, _, files in sorted(os.walk(sys.argv[1])):
    for f in sorted(files):
        if not f.endswith(".sqlite") or f == "metadata.sqlite":
            continue
        db = sqlite3.connect("file:" + os.path.join(root, f) + "?mode=ro", uri=True)
        for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"):
            rows = repr(list(db.execute('SELECT * FROM "%s"' % t.replace('"', '""'))))
            print(f[:12], t, hashlib.sha256(rows.encode()).hexdigest()[:16], rows[:160])
        db.close()`;
  return execFileSync("python3", ["-c", script, dir]).toString().trim().split("\n");
}

/** Every file under the gate's storage, with its last change. */
function storageFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push([p, statSync(p).mtimeMs]);
    }
  };
  walk(dir);
  return out;
}

/** Polls `read` until `done` holds of its value or `ms` pass; the last value. */
async function until(read, done, ms) {
  const deadline = Date.now() + ms;
  let v;
  for (;;) {
    v = await read();
    if (done(v) || Date.now() > deadline) return v;
    await sleep(200);
  }
}

describe("stock shards", () => {
  sale.test("K = 8, stock 1,000, 5,000 buyers: never oversold, each order once at the origin, drift 0, nothing stranded", async ({ api, origin }) => {
    const product = "sharded";
    const stock = 1000;
    let r = await api.put(product, { stock_total: stock, shards: SHARDS, per_buyer_max: 2, quantity_max: 2, hold_ttl_ms: 120_000, attempts_per_window_max: 1000 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.shards, SHARDS);
    const rand = rng();
    const buyers = Array.from({ length: 5000 }, (_, i) => ({ buyer: `b${i}`, quantity: 1 + Math.floor(rand() * 2) }));
    const results = await pool(buyers.map((b) => () => api.reserve(product, b.buyer, b.quantity)), 200);
    const held = [];
    const codes = {};
    for (const [i, res] of results.entries()) {
      if (res.status === 201) held.push({ ...buyers[i], rid: res.body.reservation_id });
      else codes[res.body.code] = (codes[res.body.code] ?? 0) + 1;
    }
    const units = held.reduce((a, h) => a + h.quantity, 0);
    console.log(`shards: ${held.length} holds for ${units} units; refusals ${JSON.stringify(codes)}`);
    if (units > stock) console.log(`stats: ${JSON.stringify((await api.stats(product)).body)}`);
    assert.ok(units <= stock, why(`${units} units held of ${stock}`));
    // Every refusal is the truth: no unit was left (or only the one a buyer
    // of two could not have), and nothing was left undecided.
    for (const code of Object.keys(codes)) assert.ok(["sold_out", "insufficient_stock"].includes(code), why(`refusal ${code}`));
    assert.ok(units >= stock - 1, why(`only ${units} of ${stock} units were taken while 5,000 buyers asked`));
    if (units < stock) assert.ok(codes.insufficient_stock > 0, why(`a unit left, and nobody was told it was the last`));

    // Every hold is read back through its id, on whatever shard keeps it;
    // another buyer reads nothing.
    const sample = held.slice(0, 200);
    for (const h of sample) {
      const mine = await api.reservation(product, h.buyer, h.rid);
      assert.equal(mine.status, 200, why(`read ${h.rid}: ${JSON.stringify(mine.body)}`));
      assert.equal(mine.body.quantity, h.quantity);
      const theirs = await api.reservation(product, `${h.buyer}-other`, h.rid);
      assert.equal(theirs.status, 404, why("another buyer's read"));
    }
    // Half of all holds are paid, the rest cancelled. (Expiry returns units
    // on shards too: the kill -9 test below waits for it. Here the hold
    // outlives a slow machine's crowd, so no unit is sold twice in view.)
    const paid = held.filter((_, i) => i % 2 === 0);
    const cancelled = held.filter((_, i) => i % 2 === 1);
    const confirms = await pool(paid.map((h) => () => api.confirm(product, h.buyer, h.rid)), 64);
    for (const [i, c] of confirms.entries()) assert.equal(c.status, 200, why(`confirm ${paid[i].rid}: ${JSON.stringify(c.body)}`));
    const cancels = await pool(cancelled.map((h) => () => api.cancel(product, h.buyer, h.rid)), 64);
    for (const [i, c] of cancels.entries()) assert.equal(c.status, 200, why(`cancel ${cancelled[i].rid}: ${JSON.stringify(c.body)}`));
    const sold = paid.reduce((a, h) => a + h.quantity, 0);

    // Every order reaches the origin once, from whichever shard sold it.
    const orders = await until(() => origin.orders(product), (o) => o.length >= paid.length, 30_000);
    assert.equal(orders.length, paid.length, why(`origin has ${orders.length} orders of ${paid.length}`));
    // The origin names an order `{product}:{reservation id}`.
    const want = new Set(paid.map((h) => `${product}:${h.rid}`));
    const strays = orders.filter((o) => !want.has(o.reservation_id));
    assert.equal(strays.length, 0, why(`orders the buyers were never given: ${JSON.stringify(strays.slice(0, 3))}; paid e.g. ${JSON.stringify(paid.slice(0, 3))}`));
    assert.equal(orders.reduce((a, o) => a + o.quantity, 0), sold);
    for (const o of orders) assert.equal(o.status, "accepted", why(`${o.reservation_id} ${o.status}`));

    // Once the holds are settled, the product reads as one: every unit not
    // sold is available again, nothing held, nothing stranded in a shard.
    const s = await until(
      async () => (await api.stats(product)).body,
      (s) => s.held === 0 && s.available === stock - sold,
      20_000,
    );
    assert.equal(s.stock_total, stock);
    assert.equal(s.sold, sold, why(`home counts ${s.sold} sold of ${sold}`));
    assert.equal(s.held, 0, why(`${s.held} still held`));
    assert.equal(s.available, stock - sold, why(`available ${s.available}, expected ${stock - sold}: units stranded`));
    // The drift check: the gate's sold units, summed over the shards,
    // against the origin's.
    const drift = await api.raw(`/admin/products/${product}/drift`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(drift.status, 200, JSON.stringify(drift.body));
    assert.equal(drift.body.gate_sold, sold);
    assert.equal(drift.body.origin_sold, sold, why(`drift ${JSON.stringify(drift.body)}`));
    assert.equal(drift.body.drift_units, 0, why(`drift ${JSON.stringify(drift.body)}`));

    // And they can be bought again, from any shard, by buyers who ask once:
    // a unit that sits in another shard is drained to the buyer's, never
    // refused while it is there.
    const late = Array.from({ length: 400 }, (_, i) => `late-${i}`);
    const again = await pool(late.map((buyer) => () => api.reserve(product, buyer, 1)), 50);
    const got = again.filter((x) => x.status === 201).length;
    const lateCodes = {};
    for (const x of again) if (x.status !== 201) lateCodes[x.body.code] = (lateCodes[x.body.code] ?? 0) + 1;
    assert.equal(got, Math.min(late.length, stock - sold), why(`late buyers got ${got} of ${stock - sold} units left; refusals ${JSON.stringify(lateCodes)}`));
    for (const code of Object.keys(lateCodes)) assert.equal(code, "sold_out", why(`late refusal ${code}`));
  });

  sale.test("K = 4 behind a waiting room: a buyer the edge admits is admitted by its shard too", async ({ api }) => {
    const product = "sharded-room";
    let r = await api.put(product, { stock_total: 500, shards: 4, admit_per_s: 400, per_buyer_max: 1, quantity_max: 1 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const buyers = Array.from({ length: 300 }, (_, i) => `w${i}`);
    const tickets = new Map();
    for (const b of buyers) {
      const j = await api.join(product, b);
      assert.equal(j.status, 201, JSON.stringify(j.body));
      tickets.set(b, j.body.ticket);
    }
    const outcomes = await pool(
      buyers.map((b) => async () => {
        // Wait for the edge to say admitted, then reserve once.
        for (const until = Date.now() + 20_000; Date.now() < until; await sleep(100)) {
          const st = await api.standing(product, b, tickets.get(b));
          if (st.body.admitted) break;
        }
        return api.reserve(product, b, 1, undefined, { "flashgate-ticket": tickets.get(b) });
      }),
      50,
    );
    const codes = {};
    for (const o of outcomes) codes[o.status === 201 ? "reserved" : o.body.code] = (codes[o.status === 201 ? "reserved" : o.body.code] ?? 0) + 1;
    assert.deepEqual(codes, { reserved: 300 }, why(`outcomes ${JSON.stringify(codes)}`));
  });

  // The admin's change is done when its 200 arrives: every shard took
  // it. 40 buyers reserve at once right after the answer; none may get a
  // unit (nor, behind a new room, reach one without a ticket).
  for (const [change, code, patch] of [
    ["a pause", "paused", { mode: "paused" }],
    ["a close", "closed", { mode: "closed" }],
    ["a new waiting room", "ticket_required", { admit_per_s: 50 }],
  ]) {
    sale.test(`K = 8: ${change} binds every shard before its 200: the 40 reserves sent after it all get ${code}`, async ({ api }) => {
      const product = `sharded-rules-${code}`;
      let r = await api.put(product, { stock_total: 10_000, shards: SHARDS, per_buyer_max: 4, quantity_max: 1, hold_ttl_ms: 600_000, attempts_per_window_max: 1000 });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      // Every shard sells first, so each holds rules and units.
      const warm = await pool(Array.from({ length: 120 }, (_, i) => () => api.reserve(product, `warm-${i}`, 1)), 16);
      assert.ok(warm.every((w) => w.status === 201), why(`warm-up: ${JSON.stringify(warm.find((w) => w.status !== 201)?.body)}`));
      r = await api.put(product, patch);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const after = await Promise.all(Array.from({ length: 40 }, (_, i) => api.reserve(product, `after-${i}`, 1)));
      const got = after.filter((a) => a.status === 201).length;
      const codes = [...new Set(after.map((a) => a.body.code))];
      assert.equal(got, 0, why(`${got} of 40 reserves after ${change} got units; codes ${codes}`));
      assert.deepEqual(codes, [code], why(`codes ${codes}`));
      // Home's sums follow the shards' reports: once they are in, the
      // product holds the warm-up's units and nothing more.
      const now = await until(async () => (await api.stats(product)).body, (s) => s.held + s.sold >= warm.length, 5_000);
      await sleep(1_000);
      const settled = (await api.stats(product)).body;
      assert.equal(settled.held + settled.sold, warm.length, why(`after ${change}: ${JSON.stringify(now)}`));
    });
  }

  sale.test("shards are set at creation: a change is 409 shards_fixed, out of range is 422, and nothing changes", async ({ api }) => {
    const product = "shards-fixed";
    for (const bad of [0, 65, -1, 1.5, "8"]) {
      const r = await api.put(`${product}-bad`, { stock_total: 5, shards: bad });
      assert.equal(r.status, 422, why(`shards ${JSON.stringify(bad)}: ${r.status} ${JSON.stringify(r.body)}`));
      assert.equal(r.body.code, "invalid_body");
      assert.equal((await api.product(`${product}-bad`)).status, 404, "nothing was created");
    }
    let r = await api.put(product, { stock_total: 5, shards: 4 });
    assert.equal(r.status, 201);
    const before = (await api.stats(product)).body;
    r = await api.put(product, { shards: 2, stock_total: 9 });
    assert.equal(r.status, 409, JSON.stringify(r.body));
    assert.equal(r.body.code, "shards_fixed");
    const after = (await api.stats(product)).body;
    assert.equal(after.stock_total, before.stock_total, "the total did not change either");
    r = await api.put(product, { shards: 4, per_buyer_max: 3 });
    assert.equal(r.status, 200, "the same count is no change");
  });
});

// Its own gate, since it kills it.
test("kill -9 mid-sale with K = 8 loses no acknowledged reservation, and the escrow sums hold after the restart", () =>
  withGate({ origin: true }, async (system) => {
        const product = "sharded-kill";
        const stock = 300;
        let r = await system.api.put(product, { stock_total: stock, shards: SHARDS, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_000, attempts_per_window_max: 1000 });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        const api = system.api;
        const acked = [];
        // Requests that got no answer, and when: only the kill may cut one.
        const errors = [];
        const crowd = pool(
          Array.from({ length: 2000 }, (_, i) => async () => {
            try {
              const res = await api.reserve(product, `k${i}`, 1);
              if (res.status === 201) acked.push({ buyer: `k${i}`, rid: res.body.reservation_id });
            } catch (e) {
              // It was never acknowledged.
              errors.push({ at: Date.now(), buyer: `k${i}`, error: e.cause?.code ?? e.message });
            }
          }),
          100,
        );
        // Kill once the sale is under way: some holds acknowledged, most
        // of the crowd still coming.
        for (const until = Date.now() + 20_000; acked.length < 30 && Date.now() < until; ) await sleep(20);
        const killedAt = Date.now();
        await system.restartGate({ kill: true });
        await crowd;
        const after = system.api;
        const early = errors.filter((e) => e.at < killedAt);
        assert.deepEqual(
          early.map((e) => `${e.buyer}: ${e.error}, ${killedAt - e.at} ms before the kill`),
          [],
          why("reserves failed before the kill"),
        );
        console.log(`shards kill: ${acked.length} holds acknowledged; ${errors.length} reserves cut off, all after the kill began`);
        assert.ok(acked.length > 0, why("some reserves were acknowledged before the kill"));
        assert.ok(acked.length <= stock, why(`${acked.length} acknowledged of ${stock}`));
        // Every acknowledged hold is still there (or already expired, if
        // its TTL passed during the restart).
        for (const a of acked) {
          const read = await after.reservation(product, a.buyer, a.rid);
          assert.equal(read.status, 200, why(`acknowledged ${a.rid} lost: ${JSON.stringify(read.body)}`));
          assert.ok(["held", "expired"].includes(read.body.state), why(`${a.rid} is ${read.body.state}`));
        }
        // Once every hold has expired, every unit is back, none stranded.
        const s = await until(
          async () => (await after.stats(product)).body,
          (s) => s.held === 0 && s.available === stock,
          20_000,
        );
        assert.equal(s.available + s.held + s.sold, stock, why(`sums after the restart: ${JSON.stringify(s)}`));
        assert.equal(s.available, stock, why(`${stock - s.available} units stranded after the restart`));
  }));

// Its own gate and origin, since the origin goes down.
test("the origin down while K = 8 shards sell: every shard's outbox delivers everything later, once", () =>
  withGate({ origin: true }, async (sys) => {
    const { api } = sys;
    const product = "sharded-outage";
    const r = await api.put(product, { stock_total: 400, shards: SHARDS, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 120_000 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const buy = (prefix, n) =>
      pool(
        Array.from({ length: n }, (_, i) => async () => {
          const buyer = `${prefix}-${i}`;
          const res = await api.reserve(product, buyer, 1);
          assert.equal(res.status, 201, why(JSON.stringify(res.body)));
          const c = await api.confirm(product, buyer, res.body.reservation_id);
          assert.equal(c.status, 200, why(JSON.stringify(c.body)));
          return `${product}:${res.body.reservation_id}`;
        }),
        16,
      );
    const before = await buy("before", 40);
    await sys.stopOrigin();
    const during = await buy("during", 120);
    await sleep(2_000);
    const s = (await api.stats(product)).body;
    assert.ok(s.outbox.backlog_units > 0, why(`orders wait in the shards' outboxes: ${JSON.stringify(s.outbox)}`));
    const origin = await sys.startOrigin();
    const all = new Set([...before, ...during]);
    // Every shard's backoff is capped at 60 s.
    const orders = await until(() => origin.orders(product), (o) => o.length >= all.size, 90_000);
    const ids = orders.map((o) => o.reservation_id);
    assert.equal(new Set(ids).size, ids.length, why("an order is stored twice"));
    assert.deepEqual(new Set(ids), all, why(`${orders.length} orders of ${all.size}`));
    for (const o of orders) assert.equal(o.status, "accepted", why(`${o.reservation_id} ${o.status}`));
  }));

// Its own gate, so that no other product's alarm writes meanwhile.
test("K = 8, left alone with 40 holds: once its levels settle, no shard reports, and no object writes", () =>
  // With the origin, so that the product's stock total is delivered and
  // no outbox retries meanwhile.
  withGate({ origin: true }, async ({ api, gate }) => {
    const product = "sharded-idle";
    let r = await api.put(product, { stock_total: 1_000, shards: SHARDS, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 600_000 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const holds = await pool(Array.from({ length: 40 }, (_, i) => () => api.reserve(product, `idle-${i}`, 1)), 8);
    assert.ok(holds.every((h) => h.status === 201));
    // The levels settle: every shard's change reported (a few intervals),
    // and a shard that only answered home's pushes confirms its last
    // answer once (PUSH_ACK_GRACE_MS, 5 s). Settled: no report for 3 s.
    let settled = (await api.stats(product)).body.escrow;
    for (let still = 0, until = Date.now() + 30_000; still < 6 && Date.now() < until; ) {
      await sleep(500);
      const now = (await api.stats(product)).body.escrow;
      still = now.reports === settled.reports ? still + 1 : 0;
      settled = now;
    }
    await sleep(6_000);
    // The objects' timers settle too: an alarm set for an outbox delivery's
    // lease (OUTBOX_LEASE_MS, 30 s) is not moved later when the delivery is
    // acknowledged, so it fires once, finds nothing to do, and re-arms at
    // the holds' expiry. Settled: no object's alarm falls in the idle window.
    const alarmsBefore = (lines, t) =>
      lines.filter((l) => / _cf_METADATA /.test(l)).filter((l) => {
        const at = /\(1, (\d+)\)/.exec(l);
        return at && Number(BigInt(at[1]) / 1_000_000n) < t;
      });
    for (const until = Date.now() + 40_000; Date.now() < until; await sleep(1_000)) {
      if (alarmsBefore(storageDigest(gate.stateDir), Date.now() + IDLE_MS + 5_000).length === 0) break;
    }
    settled = (await api.stats(product)).body.escrow;
    const written = storageDigest(gate.stateDir);
    assert.deepEqual(alarmsBefore(written, Date.now() + IDLE_MS + 5_000), [], why("an object's alarm still falls in the idle window"));
    await sleep(IDLE_MS);
    const later = (await api.stats(product)).body.escrow;
    console.log(`idle ${IDLE_MS / 1000} s with K = ${SHARDS} and 40 holds: reports ${settled.reports} -> ${later.reports}`);
    assert.equal(later.reports, settled.reports, why(`${later.reports - settled.reports} reports in ${IDLE_MS / 1000} s of nothing`));
    const now = storageDigest(gate.stateDir);
    const changed = now.filter((line) => !written.includes(line));
    assert.deepEqual(changed, [], why(`an idle product wrote to storage; before: ${written.filter((l) => !now.includes(l)).join(" | ")}`));
  }));

// Its own gate, so that only this product's objects are counted.
test("1,000 made-up reservation ids on a product of 64 shards make no object and no storage file", () =>
  withGate({}, async ({ api, gate }) => {
    const product = "sharded-made-up";
    let r = await api.put(product, { stock_total: 100, shards: 64, per_buyer_max: 1, quantity_max: 1 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const real = await api.reserve(product, "real-buyer", 1);
    assert.equal(real.status, 201, JSON.stringify(real.body));
    await sleep(1_000);
    const before = storageFiles(gate.stateDir).length;
    const made = Array.from({ length: 1000 }, (_, i) => (BigInt(i + 1) * 0x9e3779b97f4a7c15n & 0xffffffffffffffffn).toString(16).padStart(16, "0"));
    const reads = await pool(made.map((rid, i) => () => api.reservation(product, `curious-${i % 20}`, rid)), 16);
    for (const x of reads) assert.equal(x.status, 404, why(JSON.stringify(x.body)));
    assert.equal(storageFiles(gate.stateDir).length, before, why("a made-up id made storage"));
    // The real hold is still found, at once, through its id.
    const mine = await api.reservation(product, "real-buyer", real.body.reservation_id);
    assert.equal(mine.status, 200, JSON.stringify(mine.body));
  }));

