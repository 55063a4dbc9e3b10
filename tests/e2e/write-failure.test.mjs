// A write that fails in the middle of a batch, in real workerd over real
// SQLite. No fault hook is built into the gate: while the runtime is
// stopped, a trigger is added to the object's SQLite file that makes
// SQLite itself abort the insert of one buyer's outbox row. That buyer's
// confirm writes its reservation as confirmed first and its outbox row
// second, so the failure lands between two rows of one command, after the
// rows of the commands decided before it in the same batch. Then:
//   - every request of the failed batch is answered 503, none 2xx;
//   - storage holds nothing of that batch: the confirm's reservation is
//     still held (no confirmed reservation without its order), and no
//     buyer answered 503 has a row;
//   - every 2xx is in storage, every confirmed reservation has its order
//     and every order its reservation;
//   - the gate reloads and sells on, and once the trigger is gone the
//     failed buyers' retries (same keys) are decided afresh.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { why } from "../support/seed.mjs";
import { withGate } from "../support/system.mjs";

const P = "faulty";
const POISON = "poison-buyer";

// Runs SQL against the product's file (python3's sqlite3, a real SQLite)
// and prints the result of the last statement as JSON.
const SQL = `
import json, sqlite3, sys
product, script, query, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def is_product(path):
    with sqlite3.connect(path) as db:
        if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'product'").fetchone()[0] == 0:
            return False
        return db.execute("SELECT product_id FROM product").fetchone()[0] == product
[path] = [p for p in paths if is_product(p)]
db = sqlite3.connect(path)
if script:
    db.executescript(script)
    db.commit()
print(json.dumps(db.execute(query).fetchall() if query else []))
`;

function sql(stateDir, script, query = "") {
  const dir = join(stateDir, "flashgate-product-gate");
  const files = readdirSync(dir).filter((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite");
  const out = execFileSync("python3", ["-c", SQL, P, script, query, ...files.map((f) => join(dir, f))]);
  return JSON.parse(out.toString());
}

const TRIGGER = `
CREATE TRIGGER forced_failure BEFORE INSERT ON outbox WHEN NEW.buyer = '${POISON}'
BEGIN SELECT RAISE(ABORT, 'forced write failure'); END;`;

test("a write that fails in the middle of a batch leaves no part of the batch in storage", () => withGate(async (sys) => {
  const { stateDir } = sys;
  let api = sys.api;
  const put = await api.put(P, { stock_total: 10_000, per_buyer_max: 5, quantity_max: 1, hold_ttl_ms: 3_600_000 });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const hold = await api.reserve(P, POISON, 1, "poison-key");
  assert.equal(hold.status, 201, JSON.stringify(hold.body));
  const rid = hold.body.reservation_id;
  await sys.stopGate();
  sql(stateDir, TRIGGER);

  await sys.startGate();
  api = sys.api;
  // Warm the object, so the bursts below meet a loaded gate in one batch.
  assert.equal((await api.stats(P)).status, 200);

  const acked = new Map(); // buyer -> reservation id (as the API names it)
  const failed = new Map(); // buyer -> idempotency key
  let poisonFailures = 0;
  let sharedFailures = 0;
  for (let round = 0; round < 5; round++) {
    // Reserves on both sides of the confirm, all sent in the same tick.
    const before = Array.from({ length: 12 }, (_, i) => `r${round}-before-${i}`);
    const after = Array.from({ length: 12 }, (_, i) => `r${round}-after-${i}`);
    const reserve = (b) => api.reserve(P, b, 1, `key-${b}`).then((r) => ({ b, r }));
    const answers = await Promise.all([
      ...before.map(reserve),
      api.confirm(P, POISON, rid, "pay-poison").then((r) => ({ b: POISON, r })),
      ...after.map(reserve),
    ]);
    for (const { b, r } of answers) {
      if (b === POISON) {
        assert.equal(r.status, 503, why(`the poisoned confirm: ${r.status} ${JSON.stringify(r.body)}`));
        assert.equal(r.body.code, "unavailable", why(JSON.stringify(r.body)));
        poisonFailures++;
      } else if (r.status === 201) {
        acked.set(b, r.body.reservation_id);
      } else {
        assert.equal(r.status, 503, why(`${b}: ${r.status} ${JSON.stringify(r.body)}`));
        failed.set(b, `key-${b}`);
        sharedFailures++;
      }
    }
  }
  console.log(`5 failed batches: ${sharedFailures} other commands answered 503 with them, ${acked.size} acknowledged`);
  assert.equal(poisonFailures, 5);
  // The confirm shared its batch with other commands at least once: their
  // answers failed with it.
  assert.ok(sharedFailures > 0, why("no other command shared a batch with the failing write"));
  // The gate reloaded after each failure and decides again.
  const later = await api.reserve(P, "later-buyer", 1, "later-key");
  assert.equal(later.status, 201, why(JSON.stringify(later.body)));
  acked.set("later-buyer", later.body.reservation_id);
  await sys.stopGate();

  // Storage, read directly: nothing of a failed batch, everything acked.
  const [[state, outboxRows]] = sql(
    stateDir,
    "",
    `SELECT state, (SELECT count(*) FROM outbox WHERE buyer = '${POISON}') FROM reservations WHERE buyer = '${POISON}'`,
  );
  assert.equal(state, "held", why("the failed confirm left its reservation confirmed"));
  assert.equal(outboxRows, 0);
  // (Stored ids are row numbers; the API's are sealed, so rows are matched
  // by buyer, each of whom reserved once.)
  const rows = new Map(sql(stateDir, "", "SELECT buyer, state FROM reservations"));
  for (const b of acked.keys()) assert.equal(rows.get(b), "held", why(`acknowledged ${b} is not stored`));
  for (const b of failed.keys()) assert.ok(!rows.has(b), why(`${b} was answered 503 but has a row`));
  const [[confirmedWithoutOrder, orderWithoutReservation]] = sql(
    stateDir,
    "",
    `SELECT
       (SELECT count(*) FROM reservations r WHERE r.state = 'confirmed'
          AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.kind = 'order' AND o.reservation_id = r.id)),
       (SELECT count(*) FROM outbox o WHERE o.kind = 'order'
          AND NOT EXISTS (SELECT 1 FROM reservations r WHERE r.id = o.reservation_id AND r.state = 'confirmed'))`,
  );
  assert.deepEqual([confirmedWithoutOrder, orderWithoutReservation], [0, 0]);

  // Without the fault, the failed decisions are made afresh.
  sql(stateDir, "DROP TRIGGER forced_failure;");
  await sys.startGate();
  api = sys.api;
  const stats = (await api.stats(P)).body;
  assert.equal(stats.live_holds, acked.size + 1, why(JSON.stringify(stats)));
  assert.equal(stats.available, 10_000 - acked.size - 1, why(JSON.stringify(stats)));
  for (const [b, key] of failed) {
    const again = await api.reserve(P, b, 1, key);
    assert.equal(again.status, 201, why(`${b}'s retry: ${again.status} (a 200 would replay a decision the 503 disowned)`));
  }
  const paid = await api.confirm(P, POISON, rid, "pay-poison");
  assert.equal(paid.status, 200, why(JSON.stringify(paid.body)));
}));
