// Made-up product ids cost no object. Every route that names a product
// answers an id that names none `unknown_product` from the edge's view of
// the catalog, without instantiating that id's Durable Object (on the
// platform a billed object each; locally a SQLite file each), and a real
// product keeps answering during the flood. Without the edge's catalog
// view, this test's ids would leave one storage file each.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { request } from "node:http";
import { startGate } from "../support/runtime.mjs";
import { client, pool } from "../support/client.mjs";
// A test fails if its clients retried a request while the gate was up.
import "../support/retries.mjs";

const SEED = Number(process.env.E2E_SEED ?? Date.now() % 1_000_000);
const why = (msg) => `${msg} (E2E_SEED=${SEED})`;
const IDS = 600;

let gate;
let api;

before(async () => {
  gate = await startGate();
  api = client(gate.url);
});

after(async () => {
  await gate?.stop();
});

/** A WebSocket handshake for a product's live route: the status the gate answers. */
function upgrade(port, id) {
  return new Promise((ok, fail) => {
    const req = request({
      port,
      host: "127.0.0.1",
      path: `/api/products/${id}/live`,
      headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==" },
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      ok({ status: 101, body: {} });
    });
    req.on("response", (res) => {
      let text = "";
      res.on("data", (d) => (text += d)).on("end", () => ok({ status: res.statusCode, body: JSON.parse(text || "{}") }));
    });
    req.on("error", fail);
    req.end();
  });
}

function files(dir) {
  let n = 0;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    n += statSync(p).isDirectory() ? files(p) : 1;
  }
  return n;
}

test("made-up ids are answered unknown on every route and create no object", async () => {
  assert.equal((await api.put("real", { stock_total: 1000, per_buyer_max: 5 })).status, 201);
  assert.equal((await api.reserve("real", "first", 1)).status, 201);
  const before = files(gate.stateDir);
  const made = Array.from({ length: IDS }, (_, i) => `made-up-${SEED}-${i}`);
  const routes = [
    (id) => api.product(id),
    (id) => api.reserve(id, `b-${id}`, 1),
    (id) => api.standing(id, `b-${id}`, "x"),
    (id) => api.join(id, `b-${id}`),
    (id) => upgrade(gate.port, id),
    (id) => api.stats(id),
    (id) => api.restock(id, 5),
    (id) => api.reservation(id, `b-${id}`, "r1"),
  ];
  const answers = await pool(
    made.map((id, i) => () => routes[i % routes.length](id).then((r) => ({ id, r, route: i % routes.length }))),
    32,
  );
  for (const { id, r, route } of answers) {
    assert.equal(r.status, 404, why(`route ${route} for ${id}: ${r.status} ${JSON.stringify(r.body)}`));
    // A reservation id that does not decode is unknown before its product is.
    const code = route === 7 ? "unknown_reservation" : "unknown_product";
    assert.equal(r.body.code, code, why(`route ${route} for ${id}`));
  }
  // The real product answered throughout and still does.
  assert.equal((await api.reserve("real", "after", 1)).status, 201, why("real reserve after the flood"));
  const grown = files(gate.stateDir) - before;
  assert.ok(grown <= 4, why(`${grown} storage files appeared for ${IDS} made-up ids`));
  // A product created now is known at once, through this edge.
  assert.equal((await api.put("late", { stock_total: 3, per_buyer_max: 1 })).status, 201);
  assert.equal((await api.product("late")).status, 200, why("a new product is known at once"));
  assert.equal((await api.reserve("late", "x", 1)).status, 201, why("and can be bought"));
});
