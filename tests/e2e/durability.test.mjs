// Durability: kill the runtime hard (SIGKILL) in the middle of a load, start
// it again on the same state, and check that every 2xx a client saw is still
// true. Requests in flight at the kill may or may not have committed; a
// client that saw no answer may find either. A request may fail only once
// the kill has begun: an error before it fails the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { sleep } from "../support/client.mjs";
import { rng, why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

test("every acknowledged reserve and confirm survives a SIGKILL", () => withGate(async (sys) => {
  let api = sys.api;
  const product = "durable";
  const total = 100_000;
  const r = await api.put(product, { stock_total: total, per_buyer_max: 1000, quantity_max: 3, hold_ttl_ms: 3_600_000 });
  assert.equal(r.status, 201);

  const rand = rng();
  const reserved = new Map(); // rid -> { buyer, quantity }
  const confirmed = new Set(); // rid
  let stop = false;
  // Every request that got no answer: when, and how. Each loop goes on
  // after one, so that an error before the kill is seen, not hidden by a
  // loop that stopped there.
  const errors = [];
  const clientLoop = async (c) => {
    for (let n = 0; !stop; n++) {
      const buyer = `buyer-${c}-${n % 50}`;
      const quantity = 1 + Math.floor(rand() * 3);
      try {
        const res = await api.reserve(product, buyer, quantity);
        if (res.status !== 201) continue;
        reserved.set(res.body.reservation_id, { buyer, quantity });
        if (rand() < 0.5) {
          const ok = await api.confirm(product, buyer, res.body.reservation_id);
          if (ok.status === 200) confirmed.add(res.body.reservation_id);
        }
      } catch (e) {
        errors.push({ at: Date.now(), client: c, error: e.cause?.code ?? e.message });
      }
    }
  };
  const loops = Array.from({ length: 32 }, (_, c) => clientLoop(c));
  // Kill once a few hundred decisions are acknowledged (however long a
  // loaded machine takes to get there), in the middle of the load.
  const t0 = Date.now();
  while (reserved.size < 300 && Date.now() - t0 < 30_000) await sleep(20);
  await sleep(rand() * 200);
  const killedAt = Date.now();
  await sys.stopGate({ kill: true });
  stop = true;
  await Promise.all(loops);
  assert.ok(reserved.size > 50, why(`only ${reserved.size} reserves were acknowledged before the kill`));
  const early = errors.filter((e) => e.at < killedAt);
  assert.deepEqual(
    early.map((e) => `client ${e.client}: ${e.error}, ${killedAt - e.at} ms before the kill`),
    [],
    why("requests failed before the kill"),
  );
  const cut = errors.length ? ` (${Math.min(...errors.map((e) => e.at)) - killedAt} to ${Math.max(...errors.map((e) => e.at)) - killedAt} ms after the kill began)` : "";

  await sys.startGate();
  api = sys.api;
  for (const [rid, { buyer, quantity }] of reserved) {
    const v = await api.reservation(product, buyer, rid);
    assert.equal(v.status, 200, why(`reservation ${rid} lost: ${JSON.stringify(v.body)}`));
    assert.equal(v.body.quantity, quantity, why(`reservation ${rid} quantity`));
    const want = confirmed.has(rid) ? ["confirmed"] : ["held", "confirmed"];
    assert.ok(want.includes(v.body.state), why(`reservation ${rid} is ${v.body.state}`));
  }
  const s = (await api.stats(product)).body;
  const heldSeen = [...reserved].filter(([rid]) => !confirmed.has(rid)).reduce((a, [, v]) => a + v.quantity, 0);
  const soldSeen = [...confirmed].reduce((a, rid) => a + reserved.get(rid).quantity, 0);
  assert.equal(s.available + s.held + s.sold, total, why("I1 after restart"));
  assert.ok(s.sold >= soldSeen, why(`sold ${s.sold} < acknowledged ${soldSeen}`));
  assert.ok(s.held + s.sold >= heldSeen + soldSeen, why("acknowledged units missing"));
  assert.ok(s.outbox.backlog >= confirmed.size, why("confirmations missing from the outbox"));
  // The gate still decides after the restart.
  const more = await api.reserve(product, "after-restart", 1);
  assert.equal(more.status, 201, why(JSON.stringify(more.body)));
  console.log(
    `durability: ${reserved.size} reserves and ${confirmed.size} confirms acknowledged before SIGKILL, ${errors.length} requests cut off${cut}; all present after restart`,
  );
}));

// A paid order leaves the object's memory once written
// (flashgate_core::archive): every request that names it afterwards is
// answered from SQLite, before and after a SIGKILL, and a void brings it
// back for the change.
test("paid orders are answered from storage: replays, reads, the buyer's limit and a void, across a SIGKILL", () => withGate(async (sys) => {
  let api = sys.api;
  const P = "archived";
  const put = await api.put(P, { stock_total: 10, per_buyer_max: 3, quantity_max: 3, hold_ttl_ms: 600_000 });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const first = await api.reserve(P, "ann", 2, "ann-key-1");
  assert.equal(first.status, 201, JSON.stringify(first.body));
  const rid = first.body.reservation_id;
  const paid = await api.confirm(P, "ann", rid, "pay-ann-1");
  assert.equal(paid.status, 200, JSON.stringify(paid.body));

  const checks = async (when) => {
    const msg = (m, body) => why(`${when}: ${m}: ${JSON.stringify(body)}`);
    const replay = await api.reserve(P, "ann", 2, "ann-key-1");
    assert.equal(replay.status, 200, msg("replay", replay.body));
    assert.equal(replay.body.reservation_id, rid, msg("replay id", replay.body));
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    const conflict = await api.reserve(P, "ann", 1, "ann-key-1");
    assert.equal(conflict.status, 422, msg("same key, other quantity", conflict.body));
    assert.equal(conflict.body.code, "idempotency_conflict", msg("code", conflict.body));
    const again = await api.confirm(P, "ann", rid, "pay-other");
    assert.equal(again.status, 200, msg("confirm again", again.body));
    assert.deepEqual(again.body, paid.body, msg("the first confirmation", again.body));
    const cancel = await api.cancel(P, "ann", rid);
    assert.equal(cancel.status, 409, msg("cancel", cancel.body));
    const read = await api.reservation(P, "ann", rid);
    assert.equal(read.status, 200, msg("read", read.body));
    assert.equal(read.body.state, "confirmed", msg("read state", read.body));
    // Another buyer learns nothing of it, and cannot pay or cancel it.
    assert.equal((await api.reservation(P, "bob", rid)).status, 404, msg("bob reads ann's", {}));
    assert.equal((await api.cancel(P, "bob", rid)).status, 404, msg("bob cancels ann's", {}));
    assert.equal((await api.confirm(P, "bob", rid)).status, 404, msg("bob pays ann's", {}));
    // Her paid units still count against her limit: 2 of 3.
    const over = await api.reserve(P, "ann", 2, `ann-over-${when.replaceAll(" ", "-")}`);
    assert.equal(over.status, 403, msg("over the buyer's limit", over.body));
    assert.equal(over.body.code, "buyer_limit", msg("code", over.body));
    assert.equal(over.body.remaining, 1, msg("remaining", over.body));
    const s = (await api.stats(P)).body;
    assert.equal(s.sold, 2, msg("sold", s));
    assert.equal(s.available + s.held + s.sold, s.stock_total, msg("I1", s));
  };
  await checks("before the kill");
  await sys.restartGate({ kill: true });
  api = sys.api;
  await checks("after the restart");

  // A void reads the order back, refunds it, and answers the same again.
  const v = await api.void(P, rid);
  assert.equal(v.status, 200, why(JSON.stringify(v.body)));
  const v2 = await api.void(P, rid);
  assert.deepEqual(v2.body, v.body, why("a second void answers the same"));
  const read = await api.reservation(P, "ann", rid);
  assert.equal(read.body.state, "voided", why(JSON.stringify(read.body)));
  const s = (await api.stats(P)).body;
  assert.equal(s.sold, 0, why(JSON.stringify(s)));
  // Her limit is free again.
  const more = await api.reserve(P, "ann", 3, "ann-key-2");
  assert.equal(more.status, 201, why(JSON.stringify(more.body)));
}));
