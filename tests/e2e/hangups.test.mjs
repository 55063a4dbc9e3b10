// Clients that hang up in the middle of their request, while others buy.
// The object's group commit shares one timer among the commands of a tick
// (`next_tick` in src/wasm/object/product.rs), created by whichever request came
// first: if a hang-up cancelled that request's timer, every request of the
// tick, and every later one, would wait forever. Here hundreds hang up at
// random moments; every buyer who stays is answered, and the stock adds up.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { pool } from "../support/client.mjs";
import { buyerToken } from "../support/keys.mjs";
import { rng, why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

/** A reserve whose client closes its socket `afterMs` after sending. */
function hangUp(url, product, buyer, afterMs) {
  const target = new URL(url);
  return new Promise((resolve) => {
    const body = '{"quantity":1}';
    const req = http.request({
      host: target.hostname,
      port: target.port,
      method: "POST",
      path: `/api/products/${product}/reservations`,
      headers: {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        authorization: `Bearer ${buyerToken(buyer)}`,
        "idempotency-key": `"${buyer}"`,
      },
      agent: false,
    });
    req.on("error", () => resolve("hung up"));
    req.on("response", (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode));
    });
    req.end(body);
    setTimeout(() => {
      req.destroy();
      resolve("hung up");
    }, afterMs);
  });
}

test("buyers who hang up mid-request do not stall the object: everyone who waits is answered, and the stock adds up", () => withGate(async ({ api, gate }) => {
  const product = "hangups";
  assert.equal((await api.put(product, { stock_total: 100_000, per_buyer_max: 1, quantity_max: 1 })).status, 201);
  const random = rng();
  const rounds = 5;
  let stayed = 0;
  for (let round = 0; round < rounds; round++) {
    const jobs = [];
    for (let i = 0; i < 60; i++) {
      jobs.push(() => hangUp(gate.url, product, `gone-${round}-${i}`, Math.floor(random() * 4)));
      jobs.push(async () => {
        const r = await api.reserve(product, `stays-${round}-${i}`, 1);
        stayed++;
        return r.status;
      });
    }
    const answers = await pool(jobs, 40);
    const staying = answers.filter((_, k) => k % 2 === 1);
    assert.ok(
      staying.every((s) => s === 201),
      why(`round ${round}: every buyer who waited got a hold: ${JSON.stringify(staying)}`),
    );
  }
  // After the hang-ups, a new tick still comes: a buyer alone is answered.
  assert.equal((await api.reserve(product, "last", 1)).status, 201, why("a buyer alone after the hang-ups"));
  const s = (await api.stats(product)).body;
  assert.equal(s.available + s.held + s.sold, s.stock_total, why(`I1 ${JSON.stringify(s)}`));
  // Every buyer who stayed holds one unit; those who hung up hold one
  // each or none, as their command was decided or not.
  assert.ok(s.held >= stayed + 1 && s.held <= stayed + 1 + rounds * 60, why(`held ${s.held}, stayed ${stayed}`));
}));
