// Exactly-once forwarding of confirmed reservations from the gate's outbox to
// the origin service (its real binary, on SQLite), over real HTTP.
import { test } from "node:test";
import assert from "node:assert/strict";
import { freePort } from "../support/runtime.mjs";
import { startAnswerLosingProxy, reconcile } from "../support/origin.mjs";
import { drained, pool, sleep } from "../support/client.mjs";
import { rng, why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

/** Reserves and confirms `n` orders for distinct buyers; returns them. */
async function buy(api, product, n, rand, prefix = "b") {
  const done = await pool(
    Array.from({ length: n }, (_, i) => async () => {
      const buyer = `${prefix}-${i}`;
      const quantity = 1 + Math.floor(rand() * 2);
      const r = await api.reserve(product, buyer, quantity);
      assert.equal(r.status, 201, why(JSON.stringify(r.body)));
      const c = await api.confirm(product, buyer, r.body.reservation_id);
      assert.equal(c.status, 200, why(JSON.stringify(c.body)));
      return { rid: `${product}:${r.body.reservation_id}`, quantity };
    }),
    16,
  );
  return done;
}

function assertExactlyOnce(orders, bought, label) {
  const ids = orders.map((o) => o.reservation_id);
  assert.equal(new Set(ids).size, ids.length, why(`${label}: an order is stored twice`));
  assert.deepEqual(new Set(ids), new Set(bought.map((b) => b.rid)), why(`${label}: orders differ`));
  for (const o of orders) assert.equal(o.status, "accepted", why(`${label}: ${o.reservation_id} is ${o.status}`));
}

test("100 confirmed reservations reach the origin exactly once; reconciliation finds no drift", () => withGate({ origin: true }, async ({ api, gate, origin }) => {
  await api.put("fwd", { stock_total: 500, per_buyer_max: 2, quantity_max: 2 });
  const bought = await buy(api, "fwd", 100, rng());
  const s = await drained(api, "fwd", 30_000);
  assert.equal(s.outbox.backlog, 0, why(`outbox not drained: ${JSON.stringify(s.outbox)}`));
  assert.equal(s.outbox.last_error, null);
  const orders = await origin.orders("fwd");
  assert.equal(orders.length, 100);
  assertExactlyOnce(orders, bought, "fwd");
  const units = orders.reduce((a, o) => a + o.quantity, 0);
  assert.equal(units, s.sold, why("origin units equal the gate's sold"));
  const p = await origin.product("fwd");
  assert.equal(p.sold, s.sold);
  const rec = await reconcile({ dataDir: origin.dataDir, gateUrl: gate.url, products: ["fwd"] });
  assert.equal(rec.code, 0, JSON.stringify(rec));
  assert.equal(rec.products[0].drift_units, 0);
  assert.equal(rec.summary.drift, false);
  // Without --json, the same in words: a line per product, then the answer.
  // A made-up product, which neither side knows, is named as a finding.
  const human = await reconcile({ dataDir: origin.dataDir, gateUrl: gate.url, products: ["fwd"], json: false });
  assert.equal(human.code, 0, JSON.stringify(human));
  assert.match(human.text, new RegExp(`^fwd +ok +${s.sold}/500 +${s.sold} +0 +0$`, "m"), human.text);
  assert.match(human.text, /^All 1 products agree/m, human.text);
  const unknown = await reconcile({ dataDir: origin.dataDir, gateUrl: gate.url, products: ["fwd", "nope"], json: false });
  assert.equal(unknown.code, 2, JSON.stringify(unknown));
  assert.match(unknown.text, /^nope +DRIFT +- +- +- +0$/m, unknown.text);
  assert.match(unknown.text, /^ +- the gate does not know this product$/m, unknown.text);
  assert.match(unknown.text, /^1 of 2 products disagree \(exit 2\)/m, unknown.text);
}));

test("the origin down for 30 s: buying goes on, and every order arrives once", () => withGate({ origin: true }, async (sys) => {
  const { api } = sys;
  await api.put("outage", { stock_total: 1000, per_buyer_max: 2, quantity_max: 2 });
  const rand = rng(1);
  const before = await buy(api, "outage", 30, rand, "before");
  await sys.stopOrigin();
  const downAt = Date.now();
  // Buy while the origin is down, timing each reserve + confirm.
  const during = [];
  const latencies = [];
  while (Date.now() - downAt < 30_000) {
    const t0 = performance.now();
    during.push(...(await buy(api, "outage", 5, rand, `during-${during.length}`)));
    latencies.push((performance.now() - t0) / 5);
    await sleep(500);
  }
  const s = (await api.stats("outage")).body;
  assert.ok(s.outbox.backlog > 0, "orders wait in the outbox");
  assert.notEqual(s.outbox.last_error, null);
  const restarted = await sys.startOrigin();
  const after = await buy(api, "outage", 10, rand, "after");
  // The backoff is capped at 60 s, so the backlog drains within about that.
  const end = await drained(api, "outage", 90_000);
  assert.equal(end.outbox.backlog, 0, why(`not drained: ${JSON.stringify(end.outbox)}`));
  const all = [...before, ...during, ...after];
  const orders = await restarted.orders("outage");
  assertExactlyOnce(orders, all, "outage");
  latencies.sort((a, b) => a - b);
  console.log(
    `outage: ${during.length} orders bought while the origin was down; reserve+confirm median ${latencies[latencies.length >> 1].toFixed(1)} ms per order; ${orders.length} stored once each`,
  );
}));

const losing = (options) => ({ origin: true, between: (origin) => startAnswerLosingProxy(origin.url, options) });

test("a batch committed but answered with an error is delivered again without duplicates", () => withGate(losing({ lose: 3 }), async ({ api, origin, between: proxy }) => {
  await api.put("dup", { stock_total: 500, per_buyer_max: 2, quantity_max: 2 });
  const bought = await buy(api, "dup", 40, rng(2));
  const s = await drained(api, "dup", 60_000);
  assert.equal(s.outbox.backlog, 0, why(`not drained: ${JSON.stringify(s.outbox)}`));
  const orders = await origin.orders("dup");
  assertExactlyOnce(orders, bought, "dup");
  const metrics = await origin.metrics();
  const dups = Number(/flashgate_origin_events_duplicate_total (\d+)/.exec(metrics)?.[1] ?? 0);
  assert.ok(dups > 0, `the origin saw redelivered orders: ${metrics}`);
  assert.equal(proxy.lost(), 3, "three committed answers were lost");
  assert.equal((await origin.product("dup")).sold, s.sold);
}));

// The first batch is applied by the origin, but its answer stops half way.
test("an origin that sends its headers and then stalls: the delivery times out and goes again, once", () => withGate(losing({ lose: 1, stall: true }), async ({ api, origin, between: proxy }) => {
  await api.put("stall", { stock_total: 100, per_buyer_max: 2, quantity_max: 2 });
  const bought = await buy(api, "stall", 10, rng(4));
  // The delivery's deadline (10 s) covers the answer's body, then the
  // batch goes again after a backoff.
  const s = await drained(api, "stall", 45_000);
  assert.equal(s.outbox.backlog, 0, why(`not drained past a stalled answer: ${JSON.stringify(s.outbox)}`));
  assert.equal(proxy.lost(), 1);
  assertExactlyOnce(await origin.orders("stall"), bought, "stall");
  assert.equal((await origin.product("stall")).sold, s.sold);
}));

test("a gate started with the origin unreachable drains on its own once it is up", async () => {
  const port = await freePort();
  await withGate({ originUrl: `http://127.0.0.1:${port}` }, async (sys) => {
    const { api } = sys;
    await api.put("late", { stock_total: 100, per_buyer_max: 2, quantity_max: 2 });
    const bought = await buy(api, "late", 20, rng(3));
    await sleep(3000);
    const waiting = (await api.stats("late")).body;
    // Twenty orders, after the product's first event, its stock total.
    assert.equal(waiting.outbox.backlog, 21);
    assert.match(waiting.outbox.last_error, /network/);
    const origin = await sys.startOrigin({ port });
    const s = await drained(api, "late", 90_000);
    assert.equal(s.outbox.backlog, 0, why(`not drained: ${JSON.stringify(s.outbox)}`));
    assertExactlyOnce(await origin.orders("late"), bought, "late");
  });
});
