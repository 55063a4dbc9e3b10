// Bounded work per event, and a restore at the cap. A product is filled to
// its `reservations_max` with holds; the runtime is killed (SIGKILL) and
// kept down until every hold has expired, so that they are all due at once
// when it comes back. The object must restore every row, then settle the
// backlog (expiries, then purges of the tombstones) over several events,
// none doing more than the core's per-event limit, and sell again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { coreLimit } from "../support/runtime.mjs";
import { pool, sleep } from "../support/client.mjs";
import { why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

test("holds that all expire while the object is down are settled over several events, none above the limit", () => withGate(async (sys) => {
  const perEvent = coreLimit("SETTLE_PER_EVENT_MAX");
  // Expiries and purges together are more than two events' worth.
  const cap = perEvent + 500;
  let api = sys.api;
  const P = "backlog";
  const ttl = 15_000;
  const put = await api.put(P, {
    stock_total: cap + 10,
    per_buyer_max: 1,
    quantity_max: 1,
    hold_ttl_ms: ttl,
    idem_window_ms: 0,
    reservations_max: cap,
  });
  assert.equal(put.status, 201, JSON.stringify(put.body));

  const t0 = Date.now();
  const buyers = Array.from({ length: cap }, (_, i) => `hold-${i}`);
  const holds = await pool(buyers.map((b) => () => api.reserve(P, b, 1)), 64);
  const filled = Date.now() - t0;
  assert.ok(holds.every((h) => h.status === 201), why(JSON.stringify(holds.find((h) => h.status !== 201)?.body)));
  const lastExpiry = Math.max(...holds.map((h) => Date.parse(h.body.expires_at)));
  assert.ok(lastExpiry - Date.now() > 1_000, why(`filling took ${filled} ms, longer than the holds live`));
  // The cap holds: one more is refused, and changes nothing.
  const over = await api.reserve(P, "one-too-many", 1);
  assert.equal(over.status, 503, why(JSON.stringify(over.body)));
  assert.equal(over.body.code, "overloaded", why(JSON.stringify(over.body)));
  const before = (await api.stats(P)).body;
  assert.equal(before.live_holds, cap);
  assert.ok(before.work.batch_commands_max > 1, why(`no batch held more than one command: ${JSON.stringify(before.work)}`));

  await sys.stopGate({ kill: true });
  await sleep(Math.max(0, lastExpiry - Date.now() + 300));

  await sys.startGate();
  api = sys.api;
  const t1 = Date.now();
  const first = await api.stats(P);
  const restoreMs = Date.now() - t1;
  assert.equal(first.status, 200);
  assert.ok(first.body.work.rows_loaded >= cap, why(`restored ${first.body.work.rows_loaded} rows`));
  // Alarms and requests both settle; poll until the backlog is gone.
  let s = first.body;
  for (let i = 0; i < 200 && (s.live_holds > 0 || s.tombstones > 0); i++) {
    await sleep(50);
    s = (await api.stats(P)).body;
  }
  const events = s.work.alarms + s.work.batches;
  console.log(
    `backlog: ${cap} holds filled in ${filled} ms; after SIGKILL and their expiry, the first answer (restore of ${first.body.work.rows_loaded} rows) came in ${restoreMs} ms; ` +
      `${2 * cap} expiries and purges settled over ${s.work.alarms} alarms and ${s.work.batches} batches, at most ${s.work.settled_per_event_max} in one event (limit ${perEvent})`,
  );
  assert.equal(s.live_holds, 0, why(`holds left: ${JSON.stringify(s)}`));
  assert.equal(s.tombstones, 0, why(`tombstones left: ${JSON.stringify(s)}`));
  assert.equal(s.available, cap + 10);
  assert.equal(s.counters.holds_expired, cap);
  assert.ok(s.work.settled_per_event_max <= perEvent, why(`one event settled ${s.work.settled_per_event_max}`));
  assert.equal(s.work.settled_per_event_max, perEvent, why("no event reached the limit: the backlog was not a backlog"));
  assert.ok(events >= Math.ceil((2 * cap) / perEvent), why(`${events} events`));
  // The gate sells again, and I1 holds.
  const again = await api.reserve(P, "after-backlog", 1);
  assert.equal(again.status, 201, why(JSON.stringify(again.body)));
}));
