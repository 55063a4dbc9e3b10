// End-to-end tests of the built Worker and its ProductGate Durable Object on
// bare workerd, over real HTTP with real concurrency. Each test uses its own
// product (or its own runtime) and a fresh state directory.
//
// Inputs are drawn from a seeded generator; E2E_SEED replays a run. Every
// assertion message carries the seed.
import { describe } from "node:test";
import assert from "node:assert/strict";
import { ADMIN_TOKEN, pool, sleep, stateOf } from "../support/client.mjs";
import { signedConfirm } from "../support/keys.mjs";
import { SEED, rng, why } from "../support/seed.mjs";
import { useGate } from "../support/system.mjs";

const sale = useGate();

function assertI1(s, total) {
  assert.equal(s.available + s.held + s.sold, s.stock_total, why(`I1: ${JSON.stringify(s)}`));
  if (total !== undefined) assert.equal(s.stock_total, total, why("stock_total"));
  for (const k of ["available", "held", "sold"]) assert.ok(s[k] >= 0, why(`${k} >= 0`));
}

describe("concurrency", () => {
  sale.test("2,000 concurrent reserves from 500 buyers never oversell stock 100", async ({ api }) => {
    const product = "conc";
    const perBuyerMax = 6;
    let r = await api.put(product, { stock_total: 100, per_buyer_max: perBuyerMax, quantity_max: 3, hold_ttl_ms: 600_000 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const rand = rng();
    const requests = Array.from({ length: 2000 }, (_, i) => ({
      buyer: `buyer-${i % 500}`,
      quantity: 1 + Math.floor(rand() * 3),
    }));
    const results = await pool(
      requests.map((q) => () => api.reserve(product, q.buyer, q.quantity)),
      256,
    );
    let reserved = 0;
    const perBuyer = new Map();
    const codes = {};
    for (const [i, res] of results.entries()) {
      const q = requests[i];
      if (res.status === 201) {
        reserved += q.quantity;
        assert.equal(res.body.quantity, q.quantity, why("reserved quantity"));
        perBuyer.set(q.buyer, (perBuyer.get(q.buyer) ?? 0) + q.quantity);
        continue;
      }
      codes[res.body.code] = (codes[res.body.code] ?? 0) + 1;
      assert.equal(res.headers.get("content-type"), "application/problem+json");
      switch (res.body.code) {
        case "sold_out":
          assert.equal(res.status, 409);
          break;
        case "insufficient_stock":
          assert.equal(res.status, 409);
          assert.ok(res.body.available < q.quantity, why(`insufficient_stock with ${res.body.available} >= ${q.quantity}`));
          break;
        case "buyer_limit":
          // Only when the buyer's own holds leave too little room.
          assert.equal(res.status, 403);
          assert.ok(res.body.remaining < q.quantity, why("buyer_limit with room left"));
          break;
        default:
          assert.fail(why(`unexpected refusal ${res.status} ${JSON.stringify(res.body)}`));
      }
    }
    const s = (await api.stats(product)).body;
    assertI1(s, 100);
    assert.equal(s.held, reserved, why("held equals the units the clients were granted"));
    assert.equal(s.sold, 0);
    // Stock runs out: whatever is left is less than any refused stock request asked for.
    assert.ok(s.available < 3, why(`available ${s.available} left over`));
    if (s.available > 0) assert.equal(codes.sold_out ?? 0, 0, why("sold_out while units were left"));
    for (const [buyer, units] of perBuyer) assert.ok(units <= perBuyerMax, why(`${buyer} holds ${units}`));
    console.log(`concurrency: reserved ${reserved}, refusals ${JSON.stringify(codes)}`);
  });
});

describe("idempotency", () => {
  sale.test("the same key and body sent 50 times at once reserves once", async ({ api }) => {
    const product = "idem";
    await api.put(product, { stock_total: 10, per_buyer_max: 5, quantity_max: 5 });
    const key = `key-${SEED}`;
    const results = await Promise.all(Array.from({ length: 50 }, () => api.reserve(product, "alice", 2, key)));
    const created = results.filter((r) => r.status === 201);
    const replayed = results.filter((r) => r.status === 200);
    assert.equal(created.length, 1, why(`201s: ${created.length}`));
    assert.equal(replayed.length, 49, why(`200s: ${replayed.length}`));
    const ids = new Set(results.map((r) => r.body.reservation_id));
    assert.equal(ids.size, 1, why("one reservation id"));
    for (const r of replayed) {
      assert.equal(r.headers.get("idempotent-replayed"), "true");
      assert.deepEqual(r.body, created[0].body);
    }
    let s = (await api.stats(product)).body;
    assert.equal(s.held, 2, why("stock taken once"));
    assertI1(s, 10);
    // The isolate's billed work (other tests share it, so only lower
    // bounds): each request reached the object, and the hold was written.
    const work = s.work.isolate;
    assert.ok(work.events >= 51 && work.rows_written >= 1, why(JSON.stringify(work)));

    const conflict = await api.reserve(product, "alice", 3, key);
    assert.equal(conflict.status, 422);
    assert.equal(conflict.body.code, "idempotency_conflict");
    s = (await api.stats(product)).body;
    assert.equal(s.held, 2);
    assert.ok(s.work.isolate.events >= work.events + 2, why(`the refusal and the stats read are events: ${JSON.stringify(s.work.isolate)}`));
  });
});

describe("expiry", () => {
  sale.test("the alarm returns expired units with no request; confirms before and after expiry", async ({ api }) => {
    const product = "expiry";
    await api.put(product, { stock_total: 5, per_buyer_max: 5, quantity_max: 5, hold_ttl_ms: 1500 });
    const a = await api.reserve(product, "alice", 2);
    const b = await api.reserve(product, "bob", 1);
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    const ok = await api.confirm(product, "bob", b.body.reservation_id, "pay-bob");
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.state, "confirmed");
    const again = await api.confirm(product, "bob", b.body.reservation_id, "pay-other");
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, ok.body, "a second confirm returns the same result");
    // Product reads are answered from the edge's snapshot, up to a second
    // old (openapi.yaml says so).
    let seen;
    for (const until = Date.now() + 3_000; Date.now() < until; await sleep(100)) {
      seen = (await api.product(product)).body.available;
      if (seen === 2) break;
    }
    assert.equal(seen, 2);

    // Wait past the expiry, then read without any state-changing request.
    const deadline = Date.now() + 10_000;
    let p;
    for (;;) {
      await sleep(250);
      p = (await api.product(product)).body;
      if (p.available === 4 || Date.now() > deadline) break;
    }
    assert.equal(p.available, 4, "held units came back after expiry");
    assert.equal(p.held, 0);
    const s = (await api.stats(product)).body;
    assert.equal(s.counters.holds_expired, 1, "the alarm expired the hold");
    assertI1(s, 5);

    const late = await api.confirm(product, "alice", a.body.reservation_id);
    assert.equal(late.status, 409);
    assert.equal(late.body.code, "expired");
    const view = await api.reservation(product, "alice", a.body.reservation_id);
    assert.equal(view.body.state, "expired");
  });
});

describe("bad input", () => {
  sale.test("each bad request gets the right 4xx problem and changes nothing", async ({ api }) => {
    const product = "bad";
    await api.put(product, { stock_total: 20, per_buyer_max: 4, quantity_max: 2 });
    const good = await api.reserve(product, "alice", 1);
    assert.equal(good.status, 201);
    const rid = good.body.reservation_id;
    const base = `/api/products/${product}`;
    const buyer = { authorization: `Bearer ${api.tokenOf("alice")}` };
    const json = { "content-type": "application/json" };
    const key = { "idempotency-key": '"bad-input-key"' };
    const post = (path, body, headers = { ...json, ...buyer, ...key }) => ({
      path,
      init: { method: "POST", headers, body },
    });
    const cases = [
      ["malformed JSON", post(`${base}/reservations`, "{"), 400, "malformed_json"],
      ["not an object", post(`${base}/reservations`, "[1]"), 422, "invalid_body"],
      ["quantity as string", post(`${base}/reservations`, '{"quantity":"1"}'), 422, "invalid_body"],
      ["quantity missing", post(`${base}/reservations`, "{}"), 422, "invalid_body"],
      ["unknown field", post(`${base}/reservations`, '{"quantity":1,"price":0}'), 422, "invalid_body"],
      ["negative quantity", post(`${base}/reservations`, '{"quantity":-1}'), 422, "invalid_quantity"],
      ["zero quantity", post(`${base}/reservations`, '{"quantity":0}'), 422, "invalid_quantity"],
      ["huge quantity", post(`${base}/reservations`, '{"quantity":1e300}'), 422, "invalid_quantity"],
      ["float quantity", post(`${base}/reservations`, '{"quantity":1.5}'), 422, "invalid_quantity"],
      ["above quantity_max", post(`${base}/reservations`, '{"quantity":3}'), 422, "invalid_quantity"],
      ["missing Idempotency-Key", post(`${base}/reservations`, '{"quantity":1}', { ...json, ...buyer }), 400, "idempotency_key_missing"],
      ["over-long Idempotency-Key", post(`${base}/reservations`, '{"quantity":1}', { ...json, ...buyer, "idempotency-key": `"${"k".repeat(65)}"` }), 400, "idempotency_key_invalid"],
      ["missing buyer token", post(`${base}/reservations`, '{"quantity":1}', { ...json, ...key }), 401, "token_missing"],
      // Over the 4 KiB limit, yet small enough that the client has written
      // it all before the gate answers and closes.
      ["8 KiB body", post(`${base}/reservations`, `{"quantity":1,"pad":"${"x".repeat(8 << 10)}"}`), 413, "body_too_large"],
      ["wrong content type", post(`${base}/reservations`, '{"quantity":1}', { "content-type": "text/plain", ...buyer, ...key }), 415, "unsupported_media_type"],
      ["wrong method", { path: `${base}/reservations`, init: { method: "DELETE" } }, 405, "method_not_allowed"],
      ["unknown route", { path: "/api/nothing/here", init: {} }, 404, "not_found"],
      ["over-long product id", { path: `/api/products/${"p".repeat(65)}`, init: {} }, 400, "invalid_product_id"],
      ["bad product id charset", { path: "/api/products/a%20b", init: {} }, 400, "invalid_product_id"],
      ["unknown product", post(`/api/products/no-such-product/reservations`, '{"quantity":1}'), 404, "unknown_product"],
      ["unknown reservation", { path: `${base}/reservations/0123456789abcdef/cancel`, init: { method: "POST", headers: buyer } }, 404, "unknown_reservation"],
      ["malformed reservation id", { path: `${base}/reservations/abc`, init: { headers: buyer } }, 404, "unknown_reservation"],
      ["another buyer's reservation", post(`${base}/reservations/${rid}/cancel`, "", { authorization: `Bearer ${api.tokenOf("mallory")}` }), 404, "unknown_reservation"],
      ["empty payment_ref", signedConfirm(product, rid, { body: '{"buyer_id":"alice","payment_ref":""}' }), 422, "invalid_body"],
      ["confirm without buyer_id", signedConfirm(product, rid, { body: '{"payment_ref":"p"}' }), 422, "invalid_body"],
      ["unsigned confirm", post(`${base}/reservations/${rid}/confirm`, '{"buyer_id":"alice","payment_ref":"p"}', { ...json, ...buyer }), 401, "bad_signature"],
      ["missing admin token", { path: `/admin/products/${product}/stats`, init: {} }, 401, "unauthorized"],
      ["wrong admin token", { path: `/admin/products/${product}`, init: { method: "PUT", headers: { ...json, authorization: "Bearer nope" }, body: '{"stock_total":1}' } }, 401, "unauthorized"],
      ["total below committed", { path: `/admin/products/${product}`, init: { method: "PUT", headers: { ...json, authorization: `Bearer ${ADMIN_TOKEN}` }, body: '{"stock_total":0}' } }, 409, "below_committed"],
      ["admin wrong type", { path: `/admin/products/${product}`, init: { method: "PUT", headers: { ...json, authorization: `Bearer ${ADMIN_TOKEN}` }, body: '{"stock_total":"lots"}' } }, 422, "invalid_body"],
    ];
    const before = stateOf((await api.stats(product)).body);
    for (const [name, req, status, code] of cases) {
      const r = await api.raw(req.path, req.init);
      assert.equal(r.status, status, `${name}: ${JSON.stringify(r.body)}`);
      assert.equal(r.headers.get("content-type"), "application/problem+json", name);
      assert.equal(r.body.code, code, name);
      assert.equal(r.body.status, status, name);
      for (const member of ["type", "title", "detail"]) assert.equal(typeof r.body[member], "string", `${name}: ${member}`);
      if (status === 405) assert.equal(r.headers.get("allow"), "POST", name);
      const now = stateOf((await api.stats(product)).body);
      assert.deepEqual(now, before, `${name} changed the product`);
    }
    assert.equal((await api.product("no-such-product")).status, 404);
  });
});
