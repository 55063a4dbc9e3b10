// The waiting room's honesty, end to end on bare workerd: the odds a poll
// tells (a line three times the stock: the back hears `unlikely` at once,
// everyone hears `sold_out` once the last unit has gone),
// and the lottery and admission record a buyer can check (the commitment
// before the opening, the key after, each tiebreak recomputed from it, the
// record's watermark never moving back and admitting in the key's order).
import { test } from "node:test";
import assert from "node:assert/strict";
import { EVENTUALLY_MS, sleep } from "../support/client.mjs";
import { compareKeys, lotteryCommitment, lotteryTiebreak, ticketClaims } from "../support/keys.mjs";
import { why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

// How soon a poll hears `sold_out` is bounded by the edge's snapshot
// freshness (SNAPSHOT_FRESH_MS, about a second), which src/edge/cache.rs's
// tests check without a clock; bench/freshness.mjs measures the lag. Here
// everyone must hear it, and the worst lag is logged.
test("honest odds: with a line three times the stock, the back hears unlikely at once and all hear sold_out", () => withGate(async ({ api }) => {
  const P = "odds";
  const STOCK = 20;
  // Everyone joins in the pre-queue, so the whole line stands at once. The
  // opening is set so late that no machine is too slow to place the line
  // before it, and brought forward once the line is placed.
  const farOff = Date.now() + 2 * EVENTUALLY_MS;
  await api.put(P, { stock_total: STOCK, opens_at_ms: farOff, prequeue_ms: 3 * EVENTUALLY_MS, admit_per_s: 20, per_buyer_max: 1, quantity_max: 1 });
  await api.product(P);
  const buyers = Array.from({ length: 3 * STOCK }, (_, i) => `b${String(i).padStart(2, "0")}`);
  const tickets = (await Promise.all(buyers.map((b) => api.join(P, b)))).map((j) => {
    assert.equal(j.status, 201, JSON.stringify(j.body));
    return j.body;
  });
  // Once the edge has reported the line (its next refresh, about a second),
  // a poll places each buyer in it, by lottery: the back third of the line
  // hears `unlikely`, the front `likely`, before the sale even opens. The
  // line is placed once two rounds of polls in a row tell everyone the
  // same place, the back 2 x STOCK or more ahead: one answer from the
  // placed line is not enough, as the polls of a round can straddle the
  // refresh (in one run, 59 of them said 1 ahead and one 45).
  let first;
  let previous = [];
  for (const until = Date.now() + EVENTUALLY_MS; Date.now() < until; await sleep(200)) {
    first = await Promise.all(buyers.map((b, i) => api.standing(P, b, tickets[i].ticket)));
    const ahead = first.map((r) => (r.status === 200 ? r.body.ahead : null));
    if (Math.max(...ahead) >= 2 * STOCK && ahead.every((a, i) => a !== null && a === previous[i])) break;
    previous = ahead;
  }
  assert.ok(Date.now() < farOff, "placed before the opening");
  const line = first.map((r) => r.body).sort((a, b) => a.ahead - b.ahead);
  const shown = JSON.stringify(line.map((b) => [b.verdict, b.ahead]));
  assert.ok(line.slice(2 * STOCK).every((b) => b.verdict === "unlikely"), why(`the back: ${shown}`));
  assert.ok(line.slice(0, STOCK / 2).every((b) => b.verdict === "likely"), why(`the front: ${shown}`));
  for (const r of first) {
    assert.deepEqual([r.body.available, r.body.held, r.body.waiting_for_returns], [STOCK, 0, false], JSON.stringify(r.body));
  }
  // The line placed, the admin opens the sale in a second.
  const opened = await api.put(P, { opens_at_ms: Date.now() + 1_000 });
  assert.equal(opened.status, 200, JSON.stringify(opened.body));

  // Everyone polls, as the page does; an admitted buyer reserves and pays
  // at once. The last unit goes with the STOCK-th payment.
  const state = buyers.map(() => ({ done: false, soldOutAt: null, sawReturns: false, verdicts: new Set() }));
  let paid = 0;
  let lastUnitAt = null;
  const deadline = Date.now() + EVENTUALLY_MS;
  await Promise.all(buyers.map(async (b, i) => {
    const s = state[i];
    while (Date.now() < deadline) {
      const r = await api.standing(P, b, tickets[i].ticket);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      s.verdicts.add(r.body.verdict);
      if (r.body.waiting_for_returns) {
        s.sawReturns = true;
        assert.ok(r.body.held > 0 && r.body.available === 0, JSON.stringify(r.body));
      }
      if (r.body.verdict === "sold_out") {
        assert.equal(r.body.available + r.body.held, 0, JSON.stringify(r.body));
        s.soldOutAt ??= Date.now();
        return;
      }
      if (r.body.admitted && !s.done) {
        s.done = true;
        const h = await api.reserve(P, b, 1, `k-${b}`, { "flashgate-ticket": tickets[i].ticket });
        if (h.status === 201) {
          await sleep(150); // a moment at the payment page
          const c = await api.confirm(P, b, h.body.reservation_id);
          assert.equal(c.status, 200, JSON.stringify(c.body));
          if (++paid === STOCK) lastUnitAt = Date.now();
        } else {
          assert.equal(h.body.code, "sold_out", JSON.stringify(h.body));
        }
      }
      await sleep(200);
    }
  }));
  assert.equal(paid, STOCK);
  assert.ok(lastUnitAt, "the last unit went");
  assert.ok(state.every((s) => s.soldOutAt), why(`everyone heard sold_out: ${state.filter((s) => !s.soldOutAt).length} never did`));
  const worst = Math.max(...state.map((s) => s.soldOutAt - lastUnitAt));
  console.log(`odds: every poll said sold_out at most ${worst} ms after the last unit went; ${state.filter((s) => s.sawReturns).length} buyers saw "waiting for returns"`);
  // The room is closed: a join is refused, and the state is unchanged.
  const before = (await api.stats(P)).body;
  const late = await api.join(P, "latecomer");
  assert.equal(late.status, 409);
  assert.equal(late.body.code, "sold_out");
  const after = (await api.stats(P)).body;
  assert.deepEqual([after.available, after.held, after.sold], [before.available, before.held, before.sold]);
}));

test("the lottery and the admission record: commitment first, key at the opening, tiebreaks and order anyone can recompute", () => withGate(async ({ api }) => {
  const P = "fair";
  const opens = Date.now() + 3_000;
  await api.put(P, { stock_total: 100, opens_at_ms: opens, prequeue_ms: 60_000, admit_per_s: 10, per_buyer_max: 1, quantity_max: 1 });
  const before = (await api.product(P)).body;
  assert.match(before.lottery_commitment, /^[0-9a-f]{64}$/, JSON.stringify(before));
  assert.equal(before.lottery_key, null, "the key is secret before the opening");
  const buyers = Array.from({ length: 20 }, (_, i) => `fair-${i}`);
  const tickets = await Promise.all(buyers.map((b) => api.join(P, b)));
  assert.ok(tickets.every((t) => t.status === 201), JSON.stringify(tickets[0].body));

  // Bad requests for the record: no ticket, another buyer's, no token.
  const statsBefore = (await api.stats(P)).body;
  const url = `${api.base}/api/products/${P}/queue/record`;
  const bad = [
    ["no ticket", { authorization: `Bearer ${api.tokenOf("fair-0")}` }, 403, "ticket_required"],
    ["another buyer's ticket", { authorization: `Bearer ${api.tokenOf("fair-1")}`, "flashgate-ticket": tickets[0].body.ticket }, 403, "ticket_invalid"],
    ["no token", { "flashgate-ticket": tickets[0].body.ticket }, 401, null],
  ];
  for (const [what, headers, status, code] of bad) {
    const r = await fetch(url, { headers });
    const body = await r.json();
    assert.equal(r.status, status, `${what}: ${JSON.stringify(body)}`);
    assert.match(r.headers.get("content-type"), /problem\+json/, what);
    if (code) assert.equal(body.code, code, what);
  }
  const statsAfter = (await api.stats(P)).body;
  assert.deepEqual(statsAfter.room, statsBefore.room, "refused reads change nothing");

  // Everyone polls until admitted, noting when.
  const admittedAt = new Map();
  while (admittedAt.size < buyers.length && Date.now() < opens + EVENTUALLY_MS) {
    await Promise.all(buyers.map(async (b, i) => {
      if (admittedAt.has(b)) return;
      const s = await api.standing(P, b, tickets[i].body.ticket);
      if (s.body.admitted) admittedAt.set(b, Date.now());
    }));
    await sleep(200);
  }
  assert.equal(admittedAt.size, buyers.length, "everyone got in");
  assert.ok(Math.min(...admittedAt.values()) >= opens, "nobody before the opening");

  const after = (await api.product(P)).body;
  assert.match(after.lottery_key ?? "", /^[0-9a-f]{64}$/, JSON.stringify(after));
  assert.equal(lotteryCommitment(after.lottery_key), before.lottery_commitment, "the key is the one committed to");
  for (const [i, t] of tickets.entries()) {
    assert.equal(ticketClaims(t.body.ticket).h, lotteryTiebreak(after.lottery_key, P, buyers[i]), `${buyers[i]}'s tiebreak`);
  }
  // Each buyer's record: their place, and a watermark that never went back
  // and admitted in the order the key gives.
  const records = await Promise.all(buyers.map(async (b, i) => {
    const r = await fetch(url, { headers: { authorization: `Bearer ${api.tokenOf(b)}`, "flashgate-ticket": tickets[i].body.ticket } });
    assert.equal(r.status, 200);
    return r.json();
  }));
  const rec = records[0];
  assert.equal(rec.lottery.key, after.lottery_key);
  assert.ok(rec.points.length > 0 && rec.points.length <= 128, JSON.stringify(rec.points));
  for (let k = 1; k < rec.points.length; k++) {
    assert.ok(rec.points[k].at_ms > rec.points[k - 1].at_ms, "points in time order");
    assert.ok(compareKeys(rec.points[k - 1].below, rec.points[k].below) <= 0, "the watermark never moves back");
  }
  const places = records.map((r) => r.ticket);
  for (const [i, p] of places.entries()) {
    assert.equal(p.place.kind, "prequeue");
    assert.equal(p.tiebreak, lotteryTiebreak(after.lottery_key, P, buyers[i]));
    assert.equal(p.admitted, true);
    assert.ok(p.admitted_at_ms !== null && p.admitted_at_ms >= opens, JSON.stringify(p));
  }
  // A buyer's check, from one record: when each place was first admitted
  // by its points. In the key's order, a ticket ahead is admitted no later
  // than one behind; and each buyer saw its turn no earlier than that.
  const firstIn = (place) => rec.points.find((p) => compareKeys(place, p.below) < 0)?.at_ms ?? Infinity;
  const order = [...places].sort((a, b) => compareKeys(a.place, b.place));
  for (let k = 1; k < order.length; k++) {
    assert.ok(firstIn(order[k - 1].place) <= firstIn(order[k].place), `${order[k - 1].buyer_id} before ${order[k].buyer_id}`);
  }
  assert.ok(order.filter((p) => firstIn(p.place) < Infinity).length >= buyers.length / 2, "the record covers most admissions");
}));
