// Trust, end to end: who may do what, proven how (docs/security.md). The
// gate on bare workerd and the origin binary, attacked as a scalper's script
// would attack them; keys rotated under load; reads flooding the origin while
// it ingests; reconcile over TLS; restock and void reaching the origin.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:https";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { freePort } from "../support/runtime.mjs";
import { originBin, originEnv, reconcile } from "../support/origin.mjs";
import { drained, json, pool, sleep, stateOf } from "../support/client.mjs";
import * as keys from "../support/keys.mjs";
import { rng, why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

const b64url = (x) => Buffer.from(x).toString("base64url");

test("at least 25 attacks are refused, and change nothing at the gate or the origin", () => withGate({ origin: true, demoPayments: true }, async ({ api, gate, origin }) => {
  const P = "vault";
  assert.equal((await api.put(P, { stock_total: 10, per_buyer_max: 2, quantity_max: 1 })).status, 201);
  const a = await api.reserve(P, "alice", 1);
  const b = await api.reserve(P, "bob", 1);
  assert.equal(a.status, 201);
  assert.equal(b.status, 201);
  const [ridA, ridB] = [a.body.reservation_id, b.body.reservation_id];
  await drained(api, P, 30_000); // the product's stock total reaches the origin
  const before = stateOf((await api.stats(P)).body);
  const originBefore = { product: await origin.product(P), orders: await origin.orders(P) };

  const base = `/api/products/${P}`;
  const reserveWith = (headers) => ({
    url: `${gate.url}${base}/reservations`,
    init: { method: "POST", headers: { "content-type": "application/json", "idempotency-key": `"${randomBytes(6).toString("hex")}"`, ...headers }, body: '{"quantity":1}' },
  });
  const bearer = (t) => ({ authorization: `Bearer ${t}` });
  const now = Math.floor(Date.now() / 1000);
  const valid = keys.buyerToken("mallory");
  const [h, , s] = valid.split(".");
  const forgedClaims = b64url(JSON.stringify({ sub: "alice", aud: keys.AUDIENCE, iat: now, exp: now + 600 }));
  const confirmBody = (buyer, ref = "stolen") => JSON.stringify({ buyer_id: buyer, payment_ref: ref });
  // An unsigned confirm, with `headers` in place of a signature.
  const confirmWith = (rid, body, headers) => ({
    url: `${gate.url}${keys.confirmPath(P, rid)}`,
    init: { method: "POST", headers: { "content-type": "application/json", ...headers }, body },
  });
  // A confirm of `rid` by alice (unless `buyer` says otherwise), signed
  // as `signedConfirm`'s options say.
  const confirmSigned = (rid, options = {}) => {
    const { path, init } = keys.signedConfirm(P, rid, { buyer: "alice", paymentRef: "stolen", ...options });
    return { url: `${gate.url}${path}`, init };
  };
  const otherKeys = "p1:someone-elses-payment-key-0123456789abcd";
  const adminGet = (headers) => ({ url: `${gate.url}/admin/products/${P}/stats`, init: { headers } });
  const originGet = (path, headers = {}) => ({ url: `${origin.url}${path}`, init: { headers } });
  const batchBody = JSON.stringify({ product_id: P, events: [{ kind: "stock", seq: 99, stock_total: 1_000_000, at_ms: 1 }] });
  const batchWith = (headers) => ({
    url: `${origin.url}/v1/batches`,
    init: { method: "POST", headers: { "content-type": "application/json", ...headers }, body: batchBody },
  });
  const forgedCommand = JSON.stringify({ op: "restock", product_id: P, units: 1000 });
  const signBatch = (opts) => keys.signHeaders({ method: "POST", path: "/v1/batches", body: batchBody, ...opts });
  const withoutDigest = ({ "x-flashgate-content-sha256": _, ...rest }) => rest;

  const attacks = [
    // Buyer tokens, on a reserve.
    ["no token", reserveWith({}), 401, "token_missing"],
    ["X-Buyer-Id claimed, no token", reserveWith({ "x-buyer-id": "alice" }), 401, "token_missing"],
    ["not a JWT", reserveWith(bearer("abc")), 401, "token_invalid"],
    ["alg none", reserveWith(bearer(`${b64url('{"alg":"none","kid":"b1"}')}.${forgedClaims}.`)), 401, "token_invalid"],
    ["alg HS512", reserveWith(bearer(keys.buyerToken("alice", { header: { alg: "HS512" } }))), 401, "token_invalid"],
    ["tampered claims", reserveWith(bearer(`${h}.${forgedClaims}.${s}`)), 401, "token_invalid"],
    ["another key under our kid", reserveWith(bearer(keys.buyerToken("alice", { keys: "b1:an-attackers-key-0123456789abcdef0123456" }))), 401, "token_invalid"],
    ["unknown kid", reserveWith(bearer(keys.buyerToken("alice", { keys: "zz:an-attackers-key-0123456789abcdef0123456" }))), 401, "token_invalid"],
    ["expired", reserveWith(bearer(keys.buyerToken("alice", { nowS: now - 7200 }))), 401, "token_expired"],
    ["future-dated", reserveWith(bearer(keys.buyerToken("alice", { nowS: now + 3600 }))), 401, "token_invalid"],
    ["wrong audience", reserveWith(bearer(keys.buyerToken("alice", { claims: { aud: "another-shop" } }))), 401, "token_invalid"],
    ["a year-long token", reserveWith(bearer(keys.buyerToken("alice", { claims: { exp: now + 365 * 86400 } }))), 401, "token_invalid"],
    ["subject not a buyer id", reserveWith(bearer(keys.buyerToken("alice bob"))), 401, "token_invalid"],
    // The header that carries commands from the Worker to the object,
    // forged by a client: the Worker never passes it on.
    ["the object's command header, no token", reserveWith({ "flashgate-command": forgedCommand }), 401, "token_missing"],
    ["the object's command header, admin route, buyer token", { url: `${gate.url}/admin/products/${P}/restock`, init: { method: "POST", headers: { "content-type": "application/json", "flashgate-command": forgedCommand, ...bearer(keys.buyerToken("alice")) }, body: '{"units":1000}' } }, 401, "unauthorized"],
    // Other buyers' reservations.
    ["read another buyer's reservation", { url: `${gate.url}${base}/reservations/${ridA}`, init: { headers: bearer(keys.buyerToken("bob")) } }, 404, "unknown_reservation"],
    ["cancel another buyer's reservation", { url: `${gate.url}${base}/reservations/${ridA}/cancel`, init: { method: "POST", headers: bearer(keys.buyerToken("bob")) } }, 404, "unknown_reservation"],
    ["guess a reservation id", { url: `${gate.url}${base}/reservations/${randomBytes(8).toString("hex")}`, init: { headers: bearer(keys.buyerToken("alice")) } }, 404, "unknown_reservation"],
    // Payments only the shop can sign.
    ["confirm with a buyer token", confirmWith(ridA, confirmBody("alice"), bearer(keys.buyerToken("alice"))), 401, "bad_signature"],
    ["confirm with a made-up signature", confirmWith(ridA, confirmBody("alice"), { "x-flashgate-key-id": "p1", "x-flashgate-timestamp": String(Date.now()), "x-flashgate-signature": `v2=${"ab".repeat(32)}` }), 401, "bad_signature"],
    ["confirm signed with another key", confirmSigned(ridA, { keys: otherKeys }), 401, "bad_signature"],
    ["confirm replayed after the window", confirmSigned(ridA, { nowMs: Date.now() - 6 * 60_000 }), 401, "bad_signature"],
    ["confirm signed for another reservation", confirmSigned(ridA, { signedPath: keys.confirmPath(P, ridB) }), 401, "bad_signature"],
    ["confirm with a tampered body", confirmSigned(ridA, { paymentRef: "forged", signedBody: confirmBody("alice") }), 401, "bad_signature"],
    ["confirm signed with the forwarding key", confirmSigned(ridA, { keys: keys.FORWARD_KEYS }), 401, "bad_signature"],
    ["confirm signed as a gate batch", confirmSigned(ridA, { purpose: "forward" }), 401, "bad_signature"],
    ["a valid payment naming the wrong buyer", confirmSigned(ridB), 404, "unknown_reservation"],
    // The admin's routes.
    ["admin stats with a buyer token", adminGet(bearer(keys.buyerToken("alice"))), 401, "unauthorized"],
    ["admin stats with a guessed token", adminGet(bearer("test-admin-token")), 401, "unauthorized"],
    ["void with a buyer token", { url: `${gate.url}/admin/products/${P}/reservations/${ridA}/void`, init: { method: "POST", headers: bearer(keys.buyerToken("alice")) } }, 401, "unauthorized"],
    // The origin.
    ["origin orders with no credential", originGet("/v1/orders"), 401, "unauthorized"],
    ["origin orders with a buyer token", originGet("/v1/orders", bearer(keys.buyerToken("alice"))), 401, "unauthorized"],
    ["origin orders with the shop token", originGet("/v1/orders", bearer(keys.SHOP_TOKEN)), 401, "unauthorized"],
    ["origin product with no credential", originGet(`/v1/products/${P}`), 401, "unauthorized"],
    ["origin metrics with no credential", originGet("/metrics"), 401, "unauthorized"],
    ["mint a buyer token with no credential", { url: `${origin.url}/v1/buyer-tokens`, init: { method: "POST", headers: { "content-type": "application/json" }, body: '{"buyer_id":"mallory"}' } }, 401, "unauthorized"],
    ["mint a buyer token with the read token", { url: `${origin.url}/v1/buyer-tokens`, init: { method: "POST", headers: { "content-type": "application/json", ...bearer(keys.READ_TOKEN) }, body: '{"buyer_id":"mallory"}' } }, 401, "unauthorized"],
    ["a gate batch re-signed with the payment key", batchWith(signBatch({ keys: keys.PAYMENT_KEYS, purpose: "payment" })), 401, "bad_signature"],
    ["a gate batch signed for another path", batchWith(keys.signHeaders({ keys: keys.FORWARD_KEYS, purpose: "forward", method: "POST", path: "/v1/other", body: batchBody })), 401, "bad_signature"],
    ["a stale gate batch", batchWith(signBatch({ keys: keys.FORWARD_KEYS, purpose: "forward", nowMs: Date.now() - 10 * 60_000 })), 401, "bad_signature"],
    ["a gate batch without its digest header", batchWith(withoutDigest(signBatch({ keys: keys.FORWARD_KEYS, purpose: "forward" }))), 401, "bad_signature"],
    ["a gate batch whose digest header names another body", batchWith({ ...signBatch({ keys: keys.FORWARD_KEYS, purpose: "forward" }), "x-flashgate-content-sha256": "ab".repeat(32) }), 401, "bad_signature"],
    ["a gate batch signed for another body, with that body's digest", batchWith(keys.signHeaders({ keys: keys.FORWARD_KEYS, purpose: "forward", method: "POST", path: "/v1/batches", body: batchBody.replace("1000000", "2000000") })), 401, "bad_signature"],
    ["a demo payment with no buyer token", { url: `${origin.url}/v1/demo/payments`, init: { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ product_id: P, reservation_id: ridA }) } }, 401, "unauthorized"],
    ["a demo payment of another buyer's hold", { url: `${origin.url}/v1/demo/payments`, init: { method: "POST", headers: { "content-type": "application/json", ...bearer(keys.buyerToken("bob")) }, body: JSON.stringify({ product_id: P, reservation_id: ridA }) } }, 404, "unknown_reservation"],
  ];
  assert.ok(attacks.length >= 25, `${attacks.length} attacks`);
  for (const [name, req, status, code] of attacks) {
    const r = await fetch(req.url, req.init).then(json);
    assert.equal(r.status, status, why(`${name}: ${JSON.stringify(r.body)}`));
    assert.equal(r.body?.code, code, why(`${name}: ${JSON.stringify(r.body)}`));
    assert.match(r.headers.get("content-type") ?? "", /application\/problem\+json/, name);
    if (status === 401 && req.url.startsWith(gate.url)) assert.ok(r.headers.get("www-authenticate") || code === "bad_signature", `${name}: WWW-Authenticate`);
  }
  assert.deepEqual(stateOf((await api.stats(P)).body), before, "the gate's state changed");
  assert.deepEqual(await origin.product(P), originBefore.product, "the origin's product changed");
  assert.deepEqual(await origin.orders(P), originBefore.orders, "the origin's orders changed");
  // A buyer's own reserve that carries a forged command header is just a
  // reserve: one unit held, and the stock total as it was.
  const forged = await fetch(`${gate.url}${base}/reservations`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": '"forged-command"', "flashgate-command": forgedCommand, ...bearer(keys.buyerToken("carol")) },
    body: '{"quantity":1}',
  }).then(json);
  assert.equal(forged.status, 201, why(JSON.stringify(forged.body)));
  const after = (await api.stats(P)).body;
  assert.equal(after.stock_total, before.stock_total, "a forged command header restocked");
  assert.equal(after.held, before.held + 1);
  console.log(`trust: ${attacks.length} attacks refused; the gate and the origin unchanged`);

  // A real confirmation, captured and replayed inside the signature's
  // window: the replay is answered with the first confirmation and takes
  // nothing more, at the gate or at the origin.
  const captured = confirmSigned(ridA, { paymentRef: "pay-a" });
  const first = await fetch(captured.url, captured.init).then(json);
  assert.equal(first.status, 200, why(JSON.stringify(first.body)));
  const afterFirst = stateOf((await drained(api, P, 30_000)));
  const originAfterFirst = { product: await origin.product(P), orders: await origin.orders(P) };
  assert.equal(originAfterFirst.product.sold, 1, "the confirmed order reached the origin");
  const replay = await fetch(captured.url, captured.init).then(json);
  assert.equal(replay.status, 200, why(JSON.stringify(replay.body)));
  assert.deepEqual(replay.body, first.body, "a replay answers with the first confirmation");
  assert.deepEqual(stateOf((await drained(api, P, 30_000))), afterFirst, "a replayed confirm changed the gate");
  assert.deepEqual({ product: await origin.product(P), orders: await origin.orders(P) }, originAfterFirst, "a replayed confirm changed the origin");
}));

test("a short, published or non-random secret, or a plain-http origin, is refused: the gate serves no API, the origin does not start", async () => {
  // The values `.dev.vars.example` held before it held only placeholders:
  // a gate started with them let any reader of the repository be admin.
  const published = "replace-with-32-or-more-random-bytes-000000";
  const cases = [
    [{ PAYMENT_KEYS: "p1:too-short" }, "PAYMENT_KEYS"],
    [{ ADMIN_TOKENS: `a1:${published}` }, "ADMIN_TOKENS"],
    [{ BUYER_TOKEN_KEYS: "b1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" }, "BUYER_TOKEN_KEYS"],
    [{ ID_SECRET: "replace-with-32-or-more-random-bytes-0000000000" }, "ID_SECRET"],
    [{ ORIGIN_URL: "http://origin.example", FORWARD_KEYS: keys.FORWARD_KEYS }, "ORIGIN_URL"],
  ];
  for (const [vars, name] of cases) {
    await withGate({ vars }, async ({ gate }) => {
      const r = await fetch(`${gate.url}/api/products/x`).then(json);
      assert.equal(r.status, 500, why(`${name}: ${JSON.stringify(r.body)}`));
      assert.equal(r.body.code, "misconfigured");
      assert.doesNotMatch(r.body.detail, new RegExp(name), "an anonymous caller is not told which setting");
      const admin = await fetch(`${gate.url}/admin/products/free`, {
        method: "PUT",
        headers: { authorization: `Bearer ${published}`, "content-type": "application/json" },
        body: JSON.stringify({ stock_total: 5 }),
      }).then(json);
      assert.equal(admin.status, 500, why(`${name}: the published admin token was let in`));
      assert.equal((await fetch(`${gate.url}/`)).status, 200, "the page is still served");
      const deadline = Date.now() + 5_000;
      while (!gate.stderr().includes(name) && Date.now() < deadline) await sleep(50);
      assert.match(gate.stderr(), new RegExp(`refusing to serve: ${name}`), "the operator's log names it");
    });
  }
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), "flashgate-short-"));
  const env = originEnv({ port, dataDir, forwardKeys: "f1:short" });
  const run = spawnSync(originBin(), ["serve"], { env, encoding: "utf8", timeout: 20_000 });
  assert.notEqual(run.status, 0, "the origin started with a short key");
  assert.match(run.stderr, /FORWARD_KEYS.*shorter than 32 bytes/s);
});

test("keys rotate under load with no request failing and no order lost", async () => {
  // Every party is given the new keys ahead of time, active from T; at T
  // the signers switch by themselves. Then the origin retires the old
  // forwarding key (a restart of the verifier); the gate keeps delivering.
  const T = Date.now() + 5_000;
  const newer = (set, kid, secret) => `${set},${kid}@${T}:${secret}`;
  const newForward = keys.randomSecret();
  const forward = newer(keys.FORWARD_KEYS, "f2", newForward);
  const payment = newer(keys.PAYMENT_KEYS, "p2", keys.randomSecret());
  const buyers = newer(keys.BUYER_TOKEN_KEYS, "b2", keys.randomSecret());
  const rotating = {
    origin: { forwardKeys: forward, env: { BUYER_TOKEN_KEYS: buyers } },
    vars: { FORWARD_KEYS: forward, PAYMENT_KEYS: payment, BUYER_TOKEN_KEYS: buyers },
  };
  await withGate(rotating, async (sys) => {
    const { api, gate } = sys;
    let stop = false;
    sys.defer(() => (stop = true));
    const P = "rotate";
    assert.equal((await api.put(P, { stock_total: 100_000, per_buyer_max: 1000, quantity_max: 1 })).status, 201);
    const rand = rng();
    const failures = [];
    const bought = [];
    const kids = new Set();
    const loop = async (c) => {
      for (let n = 0; !stop; n++) {
        const buyer = `rot-${c}-${n}`;
        // A token minted now: before T with b1, after with b2; the gate
        // accepts both throughout.
        const token = keys.buyerToken(buyer, { keys: buyers });
        kids.add(JSON.parse(Buffer.from(token.split(".")[0], "base64url")).kid);
        const r = await fetch(`${gate.url}/api/products/${P}/reservations`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": `"k${c}-${n}"` },
          body: '{"quantity":1}',
        }).then(json);
        if (r.status !== 201) {
          failures.push(`reserve ${r.status} ${JSON.stringify(r.body)}`);
          continue;
        }
        const rid = r.body.reservation_id;
        const c2 = await api.confirm(P, buyer, rid, `pay-${c}-${n}`, { keys: payment });
        if (c2.status !== 200) failures.push(`confirm ${c2.status} ${JSON.stringify(c2.body)}`);
        else bought.push(`${P}:${rid}`);
        await sleep(rand() * 50);
      }
    };
    const loops = Array.from({ length: 8 }, (_, c) => loop(c));
    await sleep(Math.max(0, T - Date.now()) + 3_000);
    // Past T: the gate signs batches with f2. Retire f1 at the origin.
    await sys.stopOrigin();
    const restarted = await sys.startOrigin({ forwardKeys: `f2:${newForward}` });
    await sleep(3_000);
    stop = true;
    await Promise.all(loops);
    assert.deepEqual(failures, [], why("a request failed during the rotation"));
    assert.ok(kids.has("b1") && kids.has("b2"), `tokens of both keys were used: ${[...kids]}`);
    const s = await drained(api, P, 90_000);
    assert.equal(s.outbox.backlog, 0, why(`not drained: ${JSON.stringify(s.outbox)}`));
    const orders = await restarted.orders(P);
    const ids = orders.map((o) => o.reservation_id);
    assert.equal(new Set(ids).size, ids.length, "an order stored twice");
    assert.deepEqual(new Set(ids), new Set(bought), why("orders lost or invented"));
    console.log(`rotation: ${bought.length} orders bought across the switch at T and the retirement of f1; none failed, none lost`);
  });
});

test("a flood of reads does not starve ingest: every order of a sale arrives", () => withGate({ origin: true }, async (sys) => {
  const { api, origin } = sys;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  let flooding = true;
  sys.defer(() => {
    flooding = false;
    agent.destroy();
  });
  const reads = { ok: 0, shed: 0, other: 0 };
  const flood = async () => {
    while (flooding) {
      const status = await new Promise((ok) => {
        const req = http.get(`${origin.url}/v1/orders?limit=1000`, { agent, headers: { authorization: `Bearer ${keys.READ_TOKEN}` } }, (res) => {
          res.resume();
          res.on("end", () => ok(res.statusCode));
        });
        req.on("error", () => ok(0));
      });
      if (status === 200) reads.ok++;
      else if (status === 503) reads.shed++;
      else reads.other++;
    }
  };
  const P = "flooded";
  await api.put(P, { stock_total: 1000, per_buyer_max: 1, quantity_max: 1 });
  const floods = Array.from({ length: 48 }, flood);
  const started = Date.now();
  const bought = await pool(
    Array.from({ length: 200 }, (_, i) => async () => {
      const r = await api.reserve(P, `f-${i}`, 1);
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const c = await api.confirm(P, `f-${i}`, r.body.reservation_id);
      assert.equal(c.status, 200, JSON.stringify(c.body));
      return `${P}:${r.body.reservation_id}`;
    }),
    16,
  );
  const s = await drained(api, P, 60_000);
  const elapsed = Date.now() - started;
  flooding = false;
  await Promise.all(floods);
  assert.equal(s.outbox.backlog, 0, `not drained under the flood: ${JSON.stringify(s.outbox)}`);
  const ids = (await origin.orders(P)).map((o) => o.reservation_id);
  assert.deepEqual(new Set(ids), new Set(bought));
  assert.equal(reads.other, 0, `reads answered other than 200 or 503: ${JSON.stringify(reads)}`);
  console.log(`read flood: ${reads.ok} reads served, ${reads.shed} shed with 503, while 200 orders were sold and ingested in ${elapsed} ms`);
}));

test("restock and void reach the origin in order; reconcile finds no drift, also over TLS", () => withGate({ origin: true }, async (sys) => {
  const { api, gate, origin } = sys;
  const dir = mkdtempSync(join(tmpdir(), "flashgate-tls-"));
  const P = "restocked";
  assert.equal((await api.put(P, { stock_total: 3, per_buyer_max: 3, quantity_max: 1 })).status, 201);
  const buy = async (buyer) => {
    const r = await api.reserve(P, buyer, 1);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal((await api.confirm(P, buyer, r.body.reservation_id)).status, 200);
    return r.body.reservation_id;
  };
  const first = [await buy("r1"), await buy("r2"), await buy("r3")];
  assert.equal((await api.reserve(P, "r4", 1)).body.code, "sold_out");
  assert.equal((await api.restock(P, 2)).status, 200);
  await buy("r4");
  await buy("r5");
  const v = await api.void(P, first[0]);
  assert.equal(v.status, 200, JSON.stringify(v.body));
  assert.equal(v.body.state, "voided");
  assert.equal((await api.void(P, first[0])).status, 200, "voiding again is the same answer");
  assert.equal((await api.reservation(P, "r1", first[0])).body.state, "voided");
  const s = await drained(api, P, 30_000);
  assert.equal(s.outbox.backlog, 0);
  assert.deepEqual([s.stock_total, s.sold, s.available], [5, 4, 1]);
  const p = await origin.product(P);
  assert.deepEqual([p.stock_total, p.sold, p.orders_accepted, p.orders_voided, p.orders_rejected], [5, 4, 4, 1, 0], JSON.stringify(p));
  const rec = await reconcile({ dataDir: origin.dataDir, gateUrl: gate.url, products: [P] });
  assert.equal(rec.code, 0, JSON.stringify(rec));
  assert.equal(rec.products[0].drift_units, 0);

  // The same reconcile against the gate behind TLS, with a test CA.
  const run = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=flashgate test CA");
  run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "gate.key", "-out", "gate.csr", "-subj", "/CN=localhost");
  execFileSync("sh", ["-c", "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > ext.cnf"], { cwd: dir });
  run("x509", "-req", "-in", "gate.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "gate.pem", "-days", "1", "-extfile", "ext.cnf");
  const port = await freePort();
  const target = new URL(gate.url);
  const proxy = createServer({ key: readFileSync(join(dir, "gate.key")), cert: readFileSync(join(dir, "gate.pem")) }, (req, res) => {
    const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (ures) => {
      res.writeHead(ures.statusCode, ures.headers);
      ures.pipe(res);
    });
    up.on("error", () => res.writeHead(502).end());
    req.pipe(up);
  });
  sys.defer(() => proxy.close());
  await new Promise((ok) => proxy.listen(port, "127.0.0.1", ok));
  const https = `https://localhost:${port}`;
  const tls = await reconcile({ dataDir: origin.dataDir, gateUrl: https, products: [P], args: ["--gate-ca", join(dir, "ca.pem")] });
  assert.equal(tls.code, 0, JSON.stringify(tls));
  assert.equal(tls.products[0].drift_units, 0);
  const untrusted = await reconcile({ dataDir: origin.dataDir, gateUrl: https, products: [P] });
  assert.equal(untrusted.code, 1, "a gate with an unknown CA is refused");
  const plain = await reconcile({ dataDir: origin.dataDir, gateUrl: "http://gate.example", products: [P] });
  assert.equal(plain.code, 1, "plain http off this machine is refused");
  assert.match(plain.stderr, /refusing plain http/);
  console.log("restock and void: origin total 5, sold 4, 1 voided; reconcile shows no drift over http and over TLS");
}));
