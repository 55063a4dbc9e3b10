// A product's history (GET /admin/products/{id}/history), end to end on
// workerd, for K = 1 and K = 4: the counts that come of a change of state
// (reserved, confirmed, cancelled) are what the buyers were told, exactly,
// and survive a SIGKILL; sold-out answers, the edge's among them, arrive
// with the edge's next refresh; the CSV form says the same; and a bad id,
// a missing token or a bad Accept gets its problem document and changes
// nothing.
//
// E2E_SEED replays a run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ADMIN_TOKEN, EVENTUALLY_MS, pool, sleep, stateOf } from "../support/client.mjs";
import { rng, why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

async function history(api, product, headers = admin) {
  const r = await fetch(`${api.base}/admin/products/${product}/history`, { headers });
  const type = r.headers.get("content-type") ?? "";
  const text = await r.text();
  return { status: r.status, type, text, body: type.includes("json") ? JSON.parse(text) : null };
}

/** Sums a count over the buckets. */
const total = (h, name) => h.body.buckets.reduce((a, b) => a + (b.counts[name] ?? 0), 0);

/** A sale of `stock` units to `buyers` buyers, one unit each; then half the
 * holds are paid and a quarter cancelled. What the buyers were told. */
async function sell(api, product, shards, stock, buyers, rand) {
  const r = await api.put(product, { stock_total: stock, shards, per_buyer_max: 1, hold_ttl_ms: 600_000, attempts_per_window_max: 1000 });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const answers = await pool(
    Array.from({ length: buyers }, (_, i) => async () => ({ buyer: `${product}-b${i}`, r: await api.reserve(product, `${product}-b${i}`, 1) })),
    64,
  );
  const told = { reserved: 0, sold_out: 0, confirmed: 0, cancelled: 0 };
  const held = [];
  for (const { buyer, r } of answers) {
    if (r.status === 201) {
      told.reserved++;
      held.push({ buyer, rid: r.body.reservation_id });
    } else if (r.body?.code === "sold_out") told.sold_out++;
    else assert.fail(why(`${buyer}: ${r.status} ${JSON.stringify(r.body)}`));
  }
  for (const { buyer, rid } of held) {
    const x = rand();
    if (x < 0.5) {
      const c = await api.confirm(product, buyer, rid);
      assert.equal(c.status, 200, why(JSON.stringify(c.body)));
      told.confirmed++;
    } else if (x < 0.75) {
      const c = await api.cancel(product, buyer, rid);
      assert.equal(c.status, 200, why(JSON.stringify(c.body)));
      told.cancelled++;
    }
  }
  return told;
}

/** The state-derived counts of a history. */
function derived(h) {
  const s = h.body.summary;
  return { reserved: s.reserved, confirmed: s.confirmed, cancelled: s.cancelled };
}

test("the history counts what buyers were told, K = 1 and K = 4, across a SIGKILL; bad requests change nothing", () => withGate(async (sys) => {
  const rand = rng();
  const sales = [
    { product: "hist-one", shards: 1, stock: 60, buyers: 150 },
    { product: "hist-four", shards: 4, stock: 120, buyers: 300 },
  ];
  const told = {};
  for (const s of sales) told[s.product] = await sell(sys.api, s.product, s.shards, s.stock, s.buyers, rand);

  for (const { product, shards, stock } of sales) {
    const t = told[product];
    assert.ok(t.reserved > 0 && t.sold_out > 0, why(`${product}: ${JSON.stringify(t)}`));
    // Sold-out answers the edge gave itself reach home with its next
    // refresh of the snapshot: a read of the product after the snapshot's
    // freshness sends it.
    const deadline = Date.now() + EVENTUALLY_MS;
    let h;
    for (;;) {
      await sleep(1_200);
      await sys.api.product(product);
      h = await history(sys.api, product);
      assert.equal(h.status, 200, why(h.text));
      // Home's levels come of its shards' reports, which follow their
      // changes by up to a report's interval.
      const last = h.body.buckets.at(-1);
      const settled = last.sold === t.confirmed && last.available + last.held + last.sold === stock;
      if ((settled && h.body.summary.refused.sold_out >= t.sold_out) || Date.now() > deadline) break;
    }
    const s = h.body.summary;
    assert.equal(h.body.objects, shards, why(`${product}: objects read`));
    assert.deepEqual(derived(h), { reserved: t.reserved, confirmed: t.confirmed, cancelled: t.cancelled }, why(`${product}: ${JSON.stringify(s)}`));
    assert.equal(total(h, "reserve.reserved"), t.reserved, why(product));
    assert.equal(s.refused.sold_out, t.sold_out, why(`${product}: sold-out answers, edge ${s.answered_at_edge}`));
    assert.equal(s.clicks, t.reserved + t.sold_out, why(`${product}: clicks`));
    assert.ok(s.first_click_ms !== null && s.sold_out_at_ms >= s.first_click_ms, why(JSON.stringify(s)));
    const last = h.body.buckets.at(-1);
    assert.equal(last.available + last.held + last.sold, stock, why(`${product}: I1 in the last bucket ${JSON.stringify(last)}`));
    assert.equal(last.sold, t.confirmed, why(`${product}: sold`));

    // The CSV form: the same buckets, the same counts.
    const csv = await history(sys.api, product, { ...admin, accept: "text/csv" });
    assert.equal(csv.status, 200);
    assert.match(csv.type, /^text\/csv/);
    const [head, ...rows] = csv.text.trim().split("\r\n");
    const cols = head.split(",");
    assert.equal(rows.length, h.body.buckets.length, why(csv.text));
    const reservedCol = cols.indexOf("reserve.reserved");
    assert.equal(rows.reduce((a, r) => a + Number(r.split(",")[reservedCol]), 0), t.reserved);
  }

  // Bad requests: each its problem document, and nothing changes.
  const product = "hist-four";
  const before = { stats: stateOf((await sys.api.stats(product)).body), buckets: (await history(sys.api, product)).body.buckets };
  const bad = [
    [{}, product, 401, "unauthorized"],
    [{ authorization: "Bearer not-the-admin" }, product, 401, "unauthorized"],
    [{ ...admin, accept: "image/png" }, product, 406, "not_acceptable"],
    [{ ...admin, accept: "text/csv;q=0" }, product, 406, "not_acceptable"],
    [admin, "no%20such%20id", 400, "invalid_product_id"],
    [admin, "never-made", 404, "unknown_product"],
  ];
  for (const [headers, id, status, code] of bad) {
    const r = await history(sys.api, id, headers);
    assert.equal(r.status, status, why(`${JSON.stringify(headers)} ${id}: ${r.text}`));
    assert.match(r.type, /application\/problem\+json/);
    assert.equal(JSON.parse(r.text).code, code, why(r.text));
  }
  const after = { stats: stateOf((await sys.api.stats(product)).body), buckets: (await history(sys.api, product)).body.buckets };
  assert.deepEqual(after, before, why("a refused history read changed something"));

  // A SIGKILL loses none of the counts that come of a change of state.
  await sys.stopGate({ kill: true });
  await sys.startGate();
  for (const { product } of sales) {
    const t = told[product];
    const h = await history(sys.api, product);
    assert.equal(h.status, 200, why(h.text));
    assert.deepEqual(derived(h), { reserved: t.reserved, confirmed: t.confirmed, cancelled: t.cancelled }, why(`${product} after SIGKILL`));
  }
}));
