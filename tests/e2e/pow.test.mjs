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
import { EVENTUALLY_MS, sleep } from "../support/client.mjs";
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

/** The level the edge asks of `product`'s joins now: a challenge's, which
 * comes from the same snapshot a join is checked against. A challenge
 * fetch is free and counts nowhere. */
const asking = async (api, product) => (await api.challenge(product, "watcher")).body.parameters.data.level;

/** Waits until the edge asks at least `level` of `product`'s joins, and
 * logs how long that took: the edge's next snapshot, bounded by its
 * freshness (SNAPSHOT_FRESH_MS, which src/edge/cache.rs's tests check
 * without a clock); bench/freshness.mjs measures it. */
async function untilAsking(api, product, level) {
  let now;
  const started = Date.now();
  for (const until = started + EVENTUALLY_MS; Date.now() < until; await sleep(200)) {
    now = await asking(api, product);
    if (now >= level) {
      console.log(`${product}: the edge asked level ${now} ${Date.now() - started} ms after the wait began`);
      return now;
    }
  }
  assert.fail(`${product} still asks level ${now}, not ${level}`);
}

/** `product`'s queue stats once the edge has reported at least `refused`
 * refusals (a product read brings the refresh that carries the report). */
async function refusalsReported(api, product, refused) {
  let q;
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
    await api.product(product);
    q = (await api.stats(product)).body;
    if (q.room.pow_required >= refused) break;
  }
  return q;
}

/** Whether place `a` comes before `b` in the waiting room's order (the
 * record's `QueueKey`): the pre-queue first, by tiebreak; then by arrival,
 * ties by tiebreak. */
const rank = (k) => (k.kind === "prequeue" ? [0, k.tiebreak, k.arrived_ms] : [1, k.arrived_ms, k.tiebreak]);
function before(a, b) {
  const [x, y] = [rank(a), rank(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i];
  return false;
}

system.test("a join without a valid proof of work gets a fresh challenge and no ticket, and changes nothing", async () => {
  const api = system.api;
  const P = "pow-fixed";
  // Level 1 first: alice solves a challenge, then the admin raises it.
  const put = await api.put(P, { stock_total: 10, admit_per_s: 50, pow: { mode: "fixed", level: 1 } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const cheaper = await solvedFor(api, P, "alice");
  assert.equal((await api.put(P, { pow: { mode: "fixed", level: 2 } })).status, 200);
  await untilAsking(api, P, 2);
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
    // Solved right, at the level asked before the raise.
    before_the_raise: [cheaper, "level_raised"],
  };
  const before = (await api.stats(P)).body.room;
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
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
    await api.product(P);
    after = (await api.stats(P)).body.room;
    if (after.pow_required >= before.pow_required + refusals) break;
  }
  assert.deepEqual([after.reported, after.waiting], [before.reported, before.waiting], JSON.stringify(after));
  assert.equal(after.pow_required, before.pow_required + refusals, JSON.stringify(after));
  assert.equal(after.pow_infinite_queued, 0);

  // The honest join gets its ticket; a replay of the same payload is the
  // same join again, counted once.
  const joined = await api.join(P, "alice", { "flashgate-pow": good });
  assert.equal(joined.status, 201, JSON.stringify(joined.body));
  const again = await api.join(P, "alice", { "flashgate-pow": good });
  assert.equal(again.status, 201, JSON.stringify(again.body));
  assert.equal(ticketClaims(again.body.ticket).h, ticketClaims(joined.body.ticket).h, "the same buyer's draw");
  let counted;
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
    await api.product(P);
    counted = (await api.stats(P)).body.room;
    if (counted.reported + counted.rejoins_uncounted >= 2) break;
  }
  assert.deepEqual([counted.reported, counted.rejoins_uncounted], [1, 1], JSON.stringify(counted));
  // And with the ticket, alice reserves.
  let reserved;
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
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
  const deadline = Date.now() + EVENTUALLY_MS;
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
  const q = (await api.stats(P)).body.room;
  assert.equal(q.pow_infinite_queued, 3, JSON.stringify(q));
  assert.equal(q.pow_required, 0, JSON.stringify(q));
  assert.equal(q.reported, honest.length, `the bots are not in the line: ${JSON.stringify(q)}`);
  assert.equal(q.pow_infinite_queue, true);
});

/** A farm's stock of payloads solved at level 1, and the state before it
 * joins with them once the room asks more: each join is refused with a
 * fresh challenge at the level now (in the infinite queue too), no ticket
 * is counted, and only the refusals are. */
async function farmRefused(api, P, farm, stock, level) {
  const before = (await api.stats(P)).body;
  for (const [i, b] of farm.entries()) {
    const r = await api.join(P, b, { "flashgate-pow": stock[i] });
    assert.equal(r.status, 403, `${b}: ${JSON.stringify(r.body)}`);
    assert.deepEqual([r.body.code, r.body.reason, r.body.ticket], ["pow_required", "level_raised", undefined], b);
    const fresh = r.body.challenge.parameters;
    assert.ok(fresh.data.level >= level, JSON.stringify(fresh));
    assert.deepEqual([fresh.data.buyer, fresh.keyPrefix], [b, "0".repeat(fresh.data.level)]);
    assert.equal(r.body.expected_tries, 16 ** fresh.data.level);
  }
  const after = await refusalsReported(api, P, before.room.pow_required + farm.length);
  assert.equal(after.room.pow_required, before.room.pow_required + farm.length, JSON.stringify(after.room));
  assert.deepEqual(
    [after.room.reported, after.room.rejoins_uncounted, after.room.pow_infinite_queued, after.available, after.held],
    [before.room.reported, before.room.rejoins_uncounted, before.room.pow_infinite_queued, before.available, before.held],
  );
}

system.test("a payload solved before the level rose does not join at the old price (fixed, both kinds of room)", async () => {
  const api = system.api;
  for (const infinite_queue of [false, true]) {
    const P = `pow-raised${infinite_queue ? "-infinite" : ""}`;
    const put = await api.put(P, { stock_total: 10, admit_per_s: 50, pow: { mode: "fixed", level: 1, infinite_queue } });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    // A farm of 12 accounts solves at level 1, then the admin raises it.
    const farm = Array.from({ length: 12 }, (_, i) => `farm${i}`);
    const stock = await Promise.all(farm.map((b) => solvedFor(api, P, b)));
    assert.equal(decode(stock[0]).challenge.parameters.data.level, 1);
    assert.equal((await api.put(P, { pow: { mode: "fixed", level: 4, infinite_queue } })).status, 200);
    await untilAsking(api, P, 4);
    await farmRefused(api, P, farm, stock, 4);
  }
});

system.test("a payload solved before the level rose does not join at the old price (adaptive)", async () => {
  const api = system.api;
  const P = "pow-raised-adaptive";
  const put = await api.put(P, { stock_total: 10, admit_per_s: 1, pow: { mode: "adaptive", level: 1 } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  // The farm fetches and solves its challenges while the room is quiet,
  // at level 1; then a paying crowd raises the level.
  const farm = Array.from({ length: 12 }, (_, i) => `farm${i}`);
  const stock = await Promise.all(farm.map((b) => solvedFor(api, P, b)));
  assert.equal(await asking(api, P), 1);
  const crowd = Array.from({ length: 60 }, (_, i) => `rush${i}`);
  const paid = await Promise.all(crowd.map((b) => solvedFor(api, P, b)));
  const joins = await Promise.all(crowd.map((b, i) => api.join(P, b, { "flashgate-pow": paid[i] })));
  const level = await untilAsking(api, P, 2);
  // A crowd's join that came after the rise is refused too: the farm's
  // count starts once the edge has reported the crowd's.
  const late = joins.filter((r) => r.status === 403).length;
  assert.ok(joins.every((r) => r.status === 201 || r.body.reason === "level_raised"), JSON.stringify(joins.map((r) => r.body.code)));
  await refusalsReported(api, P, late);
  await farmRefused(api, P, farm, stock, level);
});

/** An honest buyer caught by a raise: it fetched a challenge at `from` and
 * solved it while the level rose to `to`; its join is asked once more, at
 * `to`, and the second solve joins. The number of solves it made. */
async function caughtByARaise(api, P, buyer, raise, to) {
  const c = await api.challenge(P, buyer);
  const solving = solve(c.body); // under way while the admin raises
  await raise();
  await untilAsking(api, P, to);
  const first = await api.join(P, buyer, { "flashgate-pow": await solving });
  assert.equal(first.status, 403, JSON.stringify(first.body));
  assert.deepEqual([first.body.code, first.body.reason], ["pow_required", "level_raised"]);
  assert.equal(first.body.challenge.parameters.data.level, to);
  const second = await api.join(P, buyer, { "flashgate-pow": await solve(first.body.challenge) });
  assert.equal(second.status, 201, JSON.stringify(second.body));
  return second.body.ticket;
}

system.test("an honest buyer mid-solve when the level rises joins after one more solve, and is admitted (the infinite queue too)", async () => {
  const api = system.api;
  for (const infinite_queue of [false, true]) {
    const P = `pow-midsolve${infinite_queue ? "-infinite" : ""}`;
    const put = await api.put(P, { stock_total: 10, admit_per_s: 50, pow: { mode: "fixed", level: 1, infinite_queue } });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const ticket = await caughtByARaise(api, P, "honest", () => api.put(P, { pow: { mode: "fixed", level: 2, infinite_queue } }), 2);
    // A ticket in the line, not the infinite queue's: counted, admitted,
    // and it reserves.
    let r;
    for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
      r = await api.reserve(P, "honest", 1, `k-${P}`, { "flashgate-ticket": ticket });
      if (r.status === 201) break;
    }
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const q = (await api.stats(P)).body.room;
    assert.deepEqual([q.reported, q.pow_required, q.pow_infinite_queued], [1, 1, 0], JSON.stringify(q));
  }
});

system.test("a bot's poll, record and reserve agree that it is not admitted, beside an honest ticket's that agree it is", async () => {
  const api = system.api;
  const P = "pow-agree";
  const put = await api.put(P, { stock_total: 20, admit_per_s: 5, pow: { mode: "fixed", level: 1, infinite_queue: true } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.product(P);
  // Bots join first, without a solution; honest buyers after them.
  const bots = ["bot1", "bot2", "bot3"];
  const botTickets = (await Promise.all(bots.map((b) => api.join(P, b)))).map((r) => {
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.ticket;
  });
  await sleep(50);
  const honest = ["fair1", "fair2"];
  const tickets = [];
  for (const h of honest) {
    const r = await api.join(P, h, { "flashgate-pow": await solvedFor(api, P, h) });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    tickets.push(r.body.ticket);
  }
  // Until the honest buyers are admitted, so that the watermark has
  // passed every bot's place.
  let fair;
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
    fair = await Promise.all(honest.map((h, i) => api.record(P, h, tickets[i])));
    if (fair.every((r) => r.body.ticket.admitted)) break;
  }
  for (const [i, h] of honest.entries()) {
    const rec = fair[i].body;
    assert.equal(rec.ticket.admitted, true, JSON.stringify(rec));
    assert.equal(typeof rec.ticket.admitted_at_ms, "number");
    assert.ok(before(rec.ticket.place, rec.now.below));
    assert.equal((await api.standing(P, h, tickets[i])).body.admitted, true);
  }
  const shown = fair[0].body;
  const stateBefore = (await api.stats(P)).body;
  for (const [i, b] of bots.entries()) {
    const poll = await api.standing(P, b, botTickets[i]);
    const rec = (await api.record(P, b, botTickets[i])).body;
    // The honest record has passed it: its place is below the watermark
    // an honest ticket is shown.
    assert.ok(before(rec.ticket.place, shown.now.below), JSON.stringify([rec.ticket.place, shown.now.below]));
    // Its own answers agree: not admitted, in the poll, in the record
    // (its place is not below the watermark it is shown, nor below any
    // point of it), and at the reserve.
    assert.deepEqual([poll.status, poll.body.admitted], [200, false], JSON.stringify(poll.body));
    assert.ok(poll.body.position >= 1);
    assert.deepEqual([rec.ticket.admitted, rec.ticket.admitted_at_ms], [false, null], JSON.stringify(rec));
    assert.equal(before(rec.ticket.place, rec.now.below), false, JSON.stringify(rec));
    for (const p of rec.points) assert.equal(before(rec.ticket.place, p.below), false, JSON.stringify(p));
    // The same shape as an honest record, and the points it shows are
    // the record's own.
    assert.deepEqual(Object.keys(rec).sort(), Object.keys(shown).sort());
    assert.deepEqual(Object.keys(rec.ticket).sort(), Object.keys(shown.ticket).sort());
    assert.deepEqual(rec.points, shown.points.slice(0, rec.points.length));
    assert.deepEqual(rec.lottery, shown.lottery);
    const r = await api.reserve(P, b, 1, `k-${b}`, { "flashgate-ticket": botTickets[i] });
    assert.deepEqual([r.status, r.body.code], [403, "not_admitted"], JSON.stringify(r.body));
  }
  // The honest ones reserve; the bots' refusals changed nothing.
  const stateAfter = (await api.stats(P)).body;
  assert.deepEqual(
    [stateAfter.available, stateAfter.held, stateAfter.room.reported, stateAfter.counters.reserve],
    [stateBefore.available, stateBefore.held, stateBefore.room.reported, stateBefore.counters.reserve],
  );
  for (const [i, h] of honest.entries()) {
    const r = await api.reserve(P, h, 1, `k-${h}`, { "flashgate-ticket": tickets[i] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
});

system.test("adaptive proof of work rises with the joins that paid, and is stated in the challenge", async () => {
  const api = system.api;
  const P = "pow-adaptive";
  const put = await api.put(P, { stock_total: 10, admit_per_s: 1, pow: { mode: "adaptive", level: 1 } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.product(P);
  assert.equal(await asking(api, P), 1, "quiet: the lowest level");
  // A crowd of 60 buyers who paid level 1, joining at once: at least 20
  // are counted before the level rises (the edge reports once a second),
  // 2 a second over the 10 s window, past the admission rate.
  const crowd = Array.from({ length: 60 }, (_, i) => `crowd${i}`);
  const payloads = await Promise.all(crowd.map((b) => solvedFor(api, P, b)));
  const joins = await Promise.all(crowd.map((b, i) => api.join(P, b, { "flashgate-pow": payloads[i] })));
  // Those that came after the level rose were asked the level now.
  for (const j of joins) {
    assert.ok(j.status === 201 || (j.status === 403 && j.body.reason === "level_raised"), JSON.stringify(j.body));
  }
  const level = await untilAsking(api, P, 2);
  const c = await api.challenge(P, "alice");
  assert.equal(c.body.parameters.keyPrefix, "0".repeat(level));
  assert.equal(c.body.expected_tries, 16 ** level);
  const q = (await api.stats(P)).body.room;
  assert.ok(q.joins_per_s >= 2 && q.pow_level === level, JSON.stringify(q));
  assert.equal((await api.product(P)).body.pow.asking >= level, true);
});

system.test("free joins, rejoins and challenge fetches do not raise an adaptive level", async () => {
  const api = system.api;
  const P = "pow-adaptive-free";
  const put = await api.put(P, { stock_total: 10, admit_per_s: 1, pow: { mode: "adaptive", level: 1, infinite_queue: true } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await api.product(P);
  // 300 challenge fetches, 300 joins without a payload (infinite-queue
  // tickets), 300 with a forged one, and one buyer who paid rejoining 30
  // times with the same payload: 30 a second and more, for nothing.
  const paid = await solvedFor(api, P, "rejoiner");
  await Promise.all(Array.from({ length: 300 }, (_, i) => api.challenge(P, `fetcher${i}`)));
  const free = await Promise.all(Array.from({ length: 300 }, (_, i) => api.join(P, `free${i}`)));
  const forged = await Promise.all(Array.from({ length: 300 }, (_, i) => api.join(P, `forged${i}`, { "flashgate-pow": "e30=" })));
  for (const j of [...free, ...forged]) assert.equal(j.status, 201, JSON.stringify(j.body));
  for (let i = 0; i < 30; i++) {
    const r = await api.join(P, "rejoiner", { "flashgate-pow": paid });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  // Every report in: the stats count them, and the level has not moved.
  let q;
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(300)) {
    await api.product(P);
    q = (await api.stats(P)).body.room;
    if (q.pow_infinite_queued >= 600 && q.reported + q.rejoins_uncounted >= 30) break;
  }
  assert.equal(q.pow_infinite_queued, 600, JSON.stringify(q));
  assert.deepEqual([q.reported, q.rejoins_uncounted], [1, 29], JSON.stringify(q));
  assert.deepEqual([q.joins_per_s, q.pow_level], [0, 1], JSON.stringify(q));
  assert.equal(await asking(api, P), 1);
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
