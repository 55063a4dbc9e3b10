// The benchmark's peers (bench/peers) treat their input as hostile too: a
// forged or foreign buyer token, a missing or empty key, a bad body, and a
// missing admin token are refused with a problem document and change
// nothing. The debug binary scripts/test builds; PostgreSQL at
// 127.0.0.1:5432.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as keys from "../support/keys.mjs";

process.env.FLASHGATE_BENCH_PROFILE = "debug";
const { startPeer } = await import("../../bench/compare.mjs");

test("a peer refuses forged tokens, bad keys and bodies, and admin calls without the token; nothing changes", async () => {
  const peer = await startPeer("optimistic-pg");
  const admin = { authorization: `Bearer ${keys.ADMIN_TOKEN}`, "content-type": "application/json" };
  const product = `peer-abuse-${process.pid}`;
  try {
    const put = (headers) => fetch(`${peer.url}/admin/products/${product}`, { method: "PUT", headers, body: JSON.stringify({ stock_total: 3, per_buyer_max: 1 }) });
    assert.equal((await put({ "content-type": "application/json" })).status, 401);
    assert.equal((await put({ ...admin, authorization: "Bearer wrong" })).status, 401);
    assert.equal((await put(admin)).status, 200);
    const stats = async () => (await (await fetch(`${peer.url}/admin/products/${product}/stats`, { headers: admin })).json());
    assert.equal((await fetch(`${peer.url}/admin/products/${product}/stats`)).status, 401);
    assert.equal((await fetch(`${peer.url}/admin/products/${product}/orders`)).status, 401);
    const before = await stats();

    const reserve = (headers, body = '{"quantity":1}') =>
      fetch(`${peer.url}/api/products/${product}/reservations`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body }).then(async (r) => ({ status: r.status, body: await r.json() }));
    const good = { authorization: `Bearer ${keys.buyerToken("b1")}`, "idempotency-key": '"k1"' };
    const cases = [
      [{ "idempotency-key": '"k"' }, undefined, 401, "token_missing"],
      [{ ...good, authorization: `Bearer ${keys.buyerToken("b1", { keys: "b1:another-key-0123456789abcdef0123456789ab" })}` }, undefined, 401, "token_invalid"],
      [{ ...good, authorization: `Bearer ${keys.buyerToken("b1", { claims: { aud: "someone-else" } })}` }, undefined, 401, "token_invalid"],
      [{ ...good, authorization: `Bearer ${keys.buyerToken("b1", { nowS: Math.floor(Date.now() / 1000) - 7200 })}` }, undefined, 401, "token_invalid"],
      [{ authorization: good.authorization }, undefined, 400, "idempotency_key_missing"],
      [{ ...good, "idempotency-key": '""' }, undefined, 400, "idempotency_key_invalid"],
      [good, "{not json", 400, "malformed_json"],
      [good, '{"quantity":0}', 422, "invalid_quantity"],
      [good, '{"quantity":"1"}', 422, "invalid_quantity"],
      [good, JSON.stringify({ quantity: 1, pad: "x".repeat(2000) }), 413, "body_too_large"],
    ];
    for (const [headers, body, status, code] of cases) {
      const r = await reserve(headers, body);
      assert.equal(r.status, status, `${code}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.code, code);
    }
    assert.deepEqual(await stats(), before, "no refusal changed the product");

    // The real thing works, and a retry with the same key is a replay.
    assert.equal((await reserve(good)).status, 201);
    const again = await reserve(good);
    assert.equal(again.status, 200);
    // Another key of the same buyer is the buyer limit, not a second unit.
    assert.equal((await reserve({ ...good, "idempotency-key": '"k2"' })).body.code, "buyer_limit");
    const after = await stats();
    assert.equal(after.sold, 1);
    assert.equal(after.order_units, 1);
  } finally {
    await peer.stop();
  }
});
