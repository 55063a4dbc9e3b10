// The waiting room's proof of work (ALTCHA), end to end on bare workerd,
// attacked as a script would: challenges are solved with the altcha
// library the widget runs (PBKDF2 in WebCrypto), and every way of cheating
// is tried. A refused join gets a fresh challenge and no ticket, and
// changes nothing but the count of refusals; in the infinite queue it gets
// a ticket like any other that is never admitted, while the honest buyers
// behind it are.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createChallenge, pbkdf2, solveChallenge } from "altcha/lib";
import { sleep } from "../support/client.mjs";
import { powSecret, ticketClaims } from "../support/keys.mjs";
import { useGate } from "../support/system.mjs";

const system = useGate();

/** The widget's payload for a challenge, solved as the widget solves it. */
async function solve(challenge) {
  const solution = await solveChallenge({ challenge, deriveKey: pbkdf2.deriveKey });
  assert.ok(solution, "solved");
  return btoa(JSON.stringify({ challenge: { parameters: challenge.parameters, signature: challenge.signature }, solution }));
}

const encode = (payload) => btoa(JSON.stringify(payload));
const decode = (text) => JSON.parse(atob(text));

async function solvedFor(api, product, buyer) {
  const c = await api.challenge(product, buyer);
  assert.equal(c.status, 200, JSON.stringify(c.body));
  return solve(c.body);
}

system.test("a join without a valid proof of work gets a fresh challenge and no ticket, and changes nothing", async () => {
  const api = system.api;
  const P = "pow-fixed";
  const put = await api.put(P, { stock_total: 10, admit_per_s: 50, pow: { mode: "fixed", level: 2 } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.put("pow-other", { stock_total: 10, admit_per_s: 50, pow: { mode: "fixed", level: 2 } });
  const product = await api.product(P);
  assert.deepEqual(product.body.pow, { mode: "fixed", level: 2, asking: 2 });
  assert.equal(JSON.stringify(product.body).includes("infinite"), false, "the public view does not say what a failed join gets");

  const c = await api.challenge(P, "alice");
  assert.equal(c.status, 200, JSON.stringify(c.body));
  const p = c.body.parameters;
  assert.deepEqual([p.algorithm, p.keyPrefix, p.data], ["PBKDF2/SHA-256", "00", { buyer: "alice", level: 2, product: P }]);
  assert.equal(c.body.expected_tries, 256);
  assert.ok(p.expiresAt * 1000 > Date.now() + 60_000, "valid for minutes");

  const good = await solve(c.body);
  const bobs = await solvedFor(api, P, "bob");
  const others = await solvedFor(api, "pow-other", "alice");
  const g = decode(good);
  const lazyCounter = g.solution.counter === 0 ? 1 : 0;
  // A key the counter does derive, without the prefix: altcha 3.2's own
  // verifySolution takes it, the gate must not.
  const lazyKey = Buffer.from(await crypto.subtle.deriveBits(
    { name: "PBKDF2", hash: "SHA-256", salt: Buffer.from(p.salt, "hex"), iterations: p.cost },
    await crypto.subtle.importKey("raw", Buffer.concat([Buffer.from(p.nonce, "hex"), Buffer.from([0, 0, 0, lazyCounter])]), "PBKDF2", false, ["deriveBits"]),
    256,
  )).toString("hex");
  // An expired challenge, signed with the gate's own key (the test knows
  // ID_SECRET), solved.
  const expired = await createChallenge({
    algorithm: "PBKDF2/SHA-256", cost: p.cost, deriveKey: pbkdf2.deriveKey, keyPrefix: "00",
    data: { buyer: "alice", level: 2, product: P }, expiresAt: Math.floor(Date.now() / 1000) - 1,
    hmacSignatureSecret: powSecret(),
  });
  const cheats = {
    none: [undefined, null],
    forged: [encode({ ...g, challenge: { ...g.challenge, signature: "0".repeat(64) } }), "forged"],
    easier: [encode({ ...g, challenge: { ...g.challenge, parameters: { ...p, keyPrefix: "0", data: { ...p.data, level: 1 } } } }), "forged"],
    later: [encode({ ...g, challenge: { ...g.challenge, parameters: { ...p, expiresAt: p.expiresAt + 3600 } } }), "forged"],
    another_buyer: [bobs, "other_buyer"],
    another_product: [others, "other_product"],
    expired: [await solve(expired), "expired"],
    wrong_key: [encode({ ...g, solution: { ...g.solution, derivedKey: "00".repeat(32) } }), "wrong"],
    lazy: [encode({ ...g, solution: { counter: lazyCounter, derivedKey: lazyKey } }), lazyKey.startsWith("00") ? null : "wrong"],
    junk: ["bm90IGpzb24=", "malformed"],
    huge: ["A".repeat(2100), "malformed"],
  };
  const before = (await api.stats(P)).body.queue;
  let refusals = 0;
  for (const [name, [payload, reason]] of Object.entries(cheats)) {
    if (name === "lazy" && reason === null) continue; // the counter happened to be a solution
    const r = await api.join(P, "alice", payload === undefined ? {} : { "flashgate-pow": payload });
    refusals++;
    assert.equal(r.status, 403, `${name}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, "pow_required", name);
    assert.equal(r.body.ticket, undefined, `${name}: no ticket`);
    assert.equal(r.body.reason ?? null, reason, `${name}: ${r.body.detail}`);
    // A fresh challenge for this buyer and product, to solve and send.
    assert.deepEqual(r.body.challenge.parameters.data, { buyer: "alice", level: 2, product: P }, name);
    assert.notEqual(r.body.challenge.parameters.nonce, p.nonce, name);
  }
  // State unchanged: no ticket counted; only the refusals are, once the
  // edge has reported them with its next refresh (which a buyer's request
  // brings about: here a product read).
  let after;
  for (const until = Date.now() + 5_000; Date.now() < until; await sleep(300)) {
    await api.product(P);
    after = (await api.stats(P)).body.queue;
    if (after.pow_refused >= before.pow_refused + refusals) break;
  }
  assert.deepEqual([after.reported, after.waiting], [before.reported, before.waiting], JSON.stringify(after));
  assert.equal(after.pow_refused, before.pow_refused + refusals, JSON.stringify(after));
  assert.equal(after.pow_shadowed, 0);

  // The honest join gets its ticket; a replay of the same payload is the
  // same join again, counted once.
  const joined = await api.join(P, "alice", { "flashgate-pow": good });
  assert.equal(joined.status, 201, JSON.stringify(joined.body));
  const again = await api.join(P, "alice", { "flashgate-pow": good });
  assert.equal(again.status, 201, JSON.stringify(again.body));
  assert.equal(ticketClaims(again.body.ticket).h, ticketClaims(joined.body.ticket).h, "the same buyer's draw");
  let counted;
  for (const until = Date.now() + 5_000; Date.now() < until; await sleep(300)) {
    await api.product(P);
    counted = (await api.stats(P)).body.queue;
    if (counted.reported + counted.rejoins_uncounted >= 2) break;
  }
  assert.deepEqual([counted.reported, counted.rejoins_uncounted], [1, 1], JSON.stringify(counted));
  // And with the ticket, alice reserves.
  let reserved;
  for (const until = Date.now() + 5_000; Date.now() < until; await sleep(300)) {
    reserved = await api.reserve(P, "alice", 1, "k1", { "flashgate-ticket": joined.body.ticket });
    if (reserved.status === 201) break;
  }
  assert.equal(reserved.status, 201, JSON.stringify(reserved.body));
});

system.test("the infinite queue: a join without a solution gets a ticket like any other, never admitted, while the honest buyers behind it are", async () => {
  const api = system.api;
  const P = "pow-infinite";
  const put = await api.put(P, { stock_total: 20, admit_per_s: 5, pow: { mode: "fixed", level: 1, infinite_queue: true } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.product(P);
  // Bots first: no payload, a forged one, another buyer's.
  const bobs = await solvedFor(api, P, "bob");
  const bots = await Promise.all([
    api.join(P, "bot1"),
    api.join(P, "bot2", { "flashgate-pow": "e30=" }),
    api.join(P, "bot3", { "flashgate-pow": bobs }),
  ]);
  await sleep(50);
  const honest = ["hon1", "hon2", "hon3", "hon4"];
  const tickets = [];
  for (const h of honest) {
    const r = await api.join(P, h, { "flashgate-pow": await solvedFor(api, P, h) });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    tickets.push(r.body.ticket);
  }
  // A bot's ticket looks like an honest one: the same members, the same
  // form; nothing in it tells it apart.
  for (const b of bots) {
    assert.equal(b.status, 201, JSON.stringify(b.body));
    assert.deepEqual(Object.keys(b.body).sort(), Object.keys((await api.join(P, "hon1", { "flashgate-pow": await solvedFor(api, P, "hon1") })).body).sort());
    assert.deepEqual(Object.keys(ticketClaims(b.body.ticket)).sort(), Object.keys(ticketClaims(tickets[0])).sort());
    // Three parts, the MAC as long (the claims' length varies with the
    // tiebreak's digits, for everyone).
    const [v, , mac] = b.body.ticket.split(".");
    assert.deepEqual([v, mac.length], [tickets[0].split(".")[0], tickets[0].split(".")[2].length]);
  }
  // Every honest buyer is admitted and reserves; no bot ever is.
  const deadline = Date.now() + 20_000;
  const done = new Set();
  while (done.size < honest.length && Date.now() < deadline) {
    for (const [i, h] of honest.entries()) {
      if (done.has(h)) continue;
      const s = await api.standing(P, h, tickets[i]);
      if (s.body.admitted) {
        const r = await api.reserve(P, h, 1, `k-${h}`, { "flashgate-ticket": tickets[i] });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        done.add(h);
      }
    }
    for (const [i, b] of bots.entries()) {
      const s = await api.standing(P, `bot${i + 1}`, b.body.ticket);
      assert.equal(s.status, 200, JSON.stringify(s.body));
      assert.equal(s.body.admitted, false, `bot${i + 1} admitted: ${JSON.stringify(s.body)}`);
      assert.ok(s.body.position >= 1);
    }
    await sleep(300);
  }
  assert.equal(done.size, honest.length, `honest buyers served: ${[...done]}`);
  // Well after the honest ones, the bots still wait, and a reserve says so
  // as it says to anyone whose turn has not come.
  for (const [i, b] of bots.entries()) {
    const r = await api.reserve(P, `bot${i + 1}`, 1, `k-bot${i}`, { "flashgate-ticket": b.body.ticket });
    assert.equal(r.status, 403, JSON.stringify(r.body));
    assert.equal(r.body.code, "not_admitted", JSON.stringify(r.body));
  }
  await api.product(P);
  const q = (await api.stats(P)).body.queue;
  assert.equal(q.pow_shadowed, 3, JSON.stringify(q));
  assert.equal(q.pow_refused, 0, JSON.stringify(q));
  assert.equal(q.reported, honest.length, `the bots are not in the line: ${JSON.stringify(q)}`);
  assert.equal(q.pow_infinite_queue, true);
});

system.test("adaptive proof of work rises with the join rate, and is stated in the challenge", async () => {
  const api = system.api;
  const P = "pow-adaptive";
  const put = await api.put(P, { stock_total: 10, admit_per_s: 1, pow: { mode: "adaptive", level: 1 } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.product(P);
  const first = await api.challenge(P, "alice");
  assert.equal(first.body.parameters.data.level, 1, "quiet: the lowest level");
  // A crowd of joins without solutions: 300 in about a second, 30 a
  // second over the 10 s window, past 16 times the admission rate.
  await Promise.all(Array.from({ length: 300 }, (_, i) => api.join(P, `crowd${i}`)));
  let level = 1;
  let q;
  for (const until = Date.now() + 8_000; Date.now() < until && level < 4; await sleep(300)) {
    level = (await api.challenge(P, "alice")).body.parameters.data.level;
    q = (await api.stats(P)).body.queue;
  }
  assert.equal(level, 4, `level ${level} at ${JSON.stringify(q)}`);
  const c = await api.challenge(P, "alice");
  assert.equal(c.body.parameters.keyPrefix, "0000");
  assert.equal(c.body.expected_tries, 65536);
  assert.ok(q.joins_per_s >= 17 && q.pow_level >= 4, JSON.stringify(q));
  assert.equal((await api.product(P)).body.pow.asking >= 4, true);
});

system.test("a challenge is asked as a join is: a buyer, a known product, a room that asks one", async () => {
  const api = system.api;
  await api.put("pow-none", { stock_total: 1, admit_per_s: 10 });
  await api.put("pow-norooms", { stock_total: 1 });
  const none = await api.challenge("pow-none", "alice");
  assert.deepEqual([none.status, none.body.code], [409, "no_pow"]);
  const noRoom = await api.challenge("pow-norooms", "alice");
  assert.deepEqual([noRoom.status, noRoom.body.code], [409, "no_waiting_room"]);
  const stranger = await api.raw("/api/products/pow-none/queue/challenge");
  assert.equal(stranger.status, 401);
  const unknown = await api.challenge("pow-nothing-here", "alice");
  assert.deepEqual([unknown.status, unknown.body.code], [404, "unknown_product"]);
  const refused = await api.put("pow-none", { pow: { mode: "fixed", level: 5 } });
  assert.deepEqual([refused.status, refused.body.code], [422, "invalid_body"]);
  const noRoomPow = await api.put("pow-norooms", { pow: { mode: "fixed" } });
  assert.deepEqual([noRoomPow.status, noRoomPow.body.code], [422, "invalid_body"]);
  // Without a proof of work the join is free, and a payload is ignored.
  const j = await api.join("pow-none", "alice", { "flashgate-pow": "junk" });
  assert.equal(j.status, 201, JSON.stringify(j.body));
  // The widget's files are served by the gate, cacheable.
  for (const path of ["/vendor/altcha-3.2.2/altcha.js", "/vendor/altcha-3.2.2/pbkdf2.js", "/vendor/altcha-3.2.2/altcha.css"]) {
    const r = await fetch(system.url + path);
    assert.equal(r.status, 200, path);
    assert.match(r.headers.get("cache-control"), /immutable/);
    assert.ok((await r.arrayBuffer()).byteLength > 1000, path);
  }
});
