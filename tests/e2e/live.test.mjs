// Live updates over the product object's hibernatable WebSocket, on bare
// workerd: the greeting, a push after a reservation, coalescing, versions
// that only grow, the socket cap and each client's share of it, abuse (a
// forged token, a viewer that talks, no upgrade), and the product list.
// Every failure names its inputs.
import assert from "node:assert/strict";
import WebSocket from "ws";
import { ADMIN_TOKEN } from "../support/keys.mjs";
import { useGate } from "../support/system.mjs";

const SOCKETS_MAX = 40;
const live = useGate({ vars: { LIVE_SOCKETS_MAX: String(SOCKETS_MAX) } });

const wsUrl = (product) => `${live.url.replace("http", "ws")}/api/products/${product}/live`;

/** A viewer: its socket, every message it got, and a way to wait for one. */
function watch(product, headers = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl(product), { headers });
    const messages = [];
    const waiters = [];
    ws.on("message", (data) => {
      const text = data.toString();
      const m = text === "pong" ? { type: "pong" } : JSON.parse(text);
      m.at = Date.now();
      messages.push(m);
      for (const w of [...waiters]) if (w.pred(m)) { waiters.splice(waiters.indexOf(w), 1); w.ok(m); }
    });
    ws.on("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => reject(Object.assign(new Error(`refused ${res.statusCode}`), { status: res.statusCode, body: JSON.parse(body || "{}") })));
    });
    ws.on("error", reject);
    ws.on("open", () =>
      resolve({
        ws,
        messages,
        next: (pred, timeoutMs = 5000) =>
          new Promise((ok, fail) => {
            const found = messages.find(pred);
            if (found) return ok(found);
            const w = { pred, ok };
            waiters.push(w);
            setTimeout(() => fail(new Error(`no such message in ${timeoutMs} ms; got ${JSON.stringify(messages)}`)), timeoutMs);
          }),
        closed: new Promise((ok) => ws.on("close", (code, reason) => ok({ code, reason: reason.toString() }))),
      }),
    );
  });
}

live.test("a viewer is greeted with the state, then sees each reservation pushed, with versions that only grow", async ({ api }) => {
  const product = "live-1";
  assert.equal((await api.put(product, { stock_total: 50, per_buyer_max: 5, quantity_max: 5, hold_ttl_ms: 60_000 })).status, 201);
  const v = await watch(product);
  const hello = await v.next((m) => m.type === "state");
  assert.equal(hello.product_id, product);
  assert.equal(hello.available, 50);
  const t0 = Date.now();
  assert.equal((await api.reserve(product, "alice", 2)).status, 201);
  const pushed = await v.next((m) => m.available === 48);
  console.log(`reservation -> push: ${pushed.at - t0} ms`);
  assert.equal(pushed.held, 2);
  assert.ok(pushed.version > hello.version, JSON.stringify(v.messages));
  // A burst is coalesced: 30 reservations in flight at once come to far
  // fewer pushes, and the last one carries the final state.
  const before = v.messages.length;
  await Promise.all(Array.from({ length: 30 }, (_, i) => api.reserve(product, `b${i}`, 1)));
  const last = await v.next((m) => m.available === 18);
  const pushes = v.messages.slice(before).filter((m) => m.type === "state");
  console.log(`30 reservations -> ${pushes.length} pushes`);
  assert.ok(pushes.length < 30, `${pushes.length} pushes for 30 reservations`);
  for (let i = 1; i < v.messages.length; i++) {
    assert.ok(v.messages[i].version > v.messages[i - 1].version, `versions at ${i}: ${JSON.stringify(v.messages)}`);
  }
  // Pushes are at least the interval apart (10 a second at most).
  const times = pushes.map((m) => m.at);
  assert.equal(last.available, 18);
  v.ws.close();
  console.log(`push gaps (ms): ${times.slice(1).map((t, i) => t - times[i]).join(",")}`);
});

live.test("a ping is answered, and a viewer that says anything else is closed", async ({ api }) => {
  const product = "live-2";
  assert.equal((await api.put(product, { stock_total: 5 })).status, 201);
  const v = await watch(product);
  await v.next((m) => m.type === "state");
  v.ws.send("ping");
  await v.next((m) => m.type === "pong");
  v.ws.send(JSON.stringify({ op: "reserve", quantity: 5 }));
  const closed = await v.closed;
  assert.equal(closed.code, 1008, JSON.stringify(closed));
  assert.equal((await api.stats(product)).body.held, 0, "a message on the socket did nothing");
});

live.test("without an upgrade, for an unknown product, or with a forged token, the socket is refused", async ({ api }) => {
  const product = "live-3";
  assert.equal((await api.put(product, { stock_total: 5 })).status, 201);
  const plain = await api.raw(`/api/products/${product}/live`);
  assert.equal(plain.status, 426);
  assert.equal(plain.body.code, "upgrade_required");
  await assert.rejects(watch("no-such-product"), (e) => e.status === 404 && e.body.code === "unknown_product");
  const token = api.tokenOf("mallory");
  await assert.rejects(watch(product, { authorization: `Bearer ${token}x` }), (e) => e.status === 401 && e.body.code === "token_invalid");
  await assert.rejects(watch(product, { cookie: `fg_buyer=${token.slice(0, -2)}` }), (e) => e.status === 401);
  // A valid token is accepted, as is none.
  const buyer = await watch(product, { authorization: `Bearer ${token}` });
  await buyer.next((m) => m.type === "state");
  buyer.ws.close();
});

live.test("past the socket cap a viewer is told to poll, and a freed place is taken again", async ({ api }) => {
  const product = "live-cap";
  assert.equal((await api.put(product, { stock_total: 5 })).status, 201);
  const viewers = await Promise.all(Array.from({ length: SOCKETS_MAX }, () => watch(product)));
  await assert.rejects(watch(product), (e) => {
    assert.equal(e.status, 503, JSON.stringify(e.body));
    assert.equal(e.body.code, "live_full");
    assert.equal(e.body.poll, `/api/products/${product}`);
    return true;
  });
  // Every viewer still gets pushes.
  assert.equal((await api.reserve(product, "carol", 1)).status, 201);
  await Promise.all(viewers.map((v) => v.next((m) => m.available === 4)));
  viewers[0].ws.close();
  await viewers[0].closed;
  let again = null;
  for (let i = 0; i < 50 && !again; i++) {
    again = await watch(product).catch(() => null);
    if (!again) await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.ok(again, "a closed socket frees its place");
  for (const v of [...viewers, again]) v.ws.close();
});

live.test("one client holds at most its share of a product's sockets, counted by its /64", async ({ api }) => {
  const product = "live-client";
  assert.equal((await api.put(product, { stock_total: 5 })).status, 201);
  const PER_CLIENT = 8;
  const from = (ip) => ({ "cf-connecting-ip": ip });
  // Eight tabs from one IPv6 client, from different addresses of its /64.
  const mine = await Promise.all(Array.from({ length: PER_CLIENT }, (_, i) => watch(product, from(`2001:db8:7:7::${i + 1}`))));
  await assert.rejects(watch(product, from("2001:db8:7:7:ffff::9")), (e) => {
    assert.equal(e.status, 503, JSON.stringify(e.body));
    assert.equal(e.body.code, "live_full");
    assert.match(e.body.detail, /this client/);
    assert.equal(e.body.poll, `/api/products/${product}`);
    return true;
  });
  // Another client, and the next /64, are not affected.
  const other = await watch(product, from("198.51.100.77"));
  const neighbour = await watch(product, from("2001:db8:7:8::1"));
  // A closed socket frees the client's place.
  mine[0].ws.close();
  await mine[0].closed;
  let again = null;
  for (let i = 0; i < 50 && !again; i++) {
    again = await watch(product, from("2001:db8:7:7::42")).catch(() => null);
    if (!again) await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.ok(again, "a closed socket frees the client's place");
  for (const v of [...mine, other, neighbour, again]) v.ws.close();
});

live.test("the product list shows what is open or scheduled, and nothing else", async ({ api }) => {
  const now = Date.now();
  assert.equal((await api.put("list-open", { stock_total: 3 })).status, 201);
  assert.equal((await api.put("list-soon", { stock_total: 3, opens_at_ms: now + 3_600_000 })).status, 201);
  assert.equal((await api.put("list-closed", { stock_total: 3 })).status, 201);
  assert.equal((await api.put("list-closed", { mode: "closed" })).status, 200);
  // A refused creation registers the id, which then lists nothing.
  assert.equal((await api.put("list-refused", { per_buyer_max: 1 })).status, 422);
  let ids = [];
  for (let i = 0; i < 30; i++) {
    const r = await api.raw("/api/products");
    assert.equal(r.status, 200);
    ids = r.body.products.map((p) => p.product_id);
    if (ids.includes("list-open") && ids.includes("list-soon")) break;
    await new Promise((ok) => setTimeout(ok, 300));
  }
  assert.ok(ids.includes("list-open") && ids.includes("list-soon"), JSON.stringify(ids));
  assert.ok(!ids.includes("list-closed") && !ids.includes("list-refused"), JSON.stringify(ids));
  const soon = (await api.raw("/api/products")).body.products.find((p) => p.product_id === "list-soon");
  assert.equal(soon.state, "scheduled");
});

live.test("the drift check reads the origin, or says why it cannot", async ({ api }) => {
  const product = "drift-1";
  assert.equal((await api.put(product, { stock_total: 3 })).status, 201);
  const r = await fetch(`${live.url}/admin/products/${product}/drift`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  assert.equal(body.drift_units, null);
  assert.match(body.origin_error, /ORIGIN_URL/);
  const anon = await api.raw(`/admin/products/${product}/drift`);
  assert.equal(anon.status, 401);
});

