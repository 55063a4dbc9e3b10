// How soon the edge's answers follow the object's state, on bare workerd:
// the lags the end-to-end tests log but do not assert (on a loaded machine
// a test can only say that the change arrives). Each is bounded by the
// edge's snapshot freshness (SNAPSHOT_FRESH_MS, about a second, which
// src/edge/cache.rs's tests check without a clock), plus the polling here.
//
//   node bench/freshness.mjs          (after scripts/build)
//   BENCH_RUNS=10 node bench/freshness.mjs
//
// Per run, each on a product of its own:
// - back: a hold expires; from its expires_at_ms to a second buyer's
//   reserve (sent every 50 ms, answered sold_out at the edge until then)
//   getting the unit (tests/e2e-serial/admission.test.mjs);
// - sold out: the last unit of a waiting room is paid; from the payment's
//   answer to the last of 10 buyers' polls (every 100 ms) saying sold_out
//   (tests/e2e-serial/odds.test.mjs);
// - level: the admin raises the proof of work's level; from the change's
//   answer to a challenge (fetched every 50 ms) at the new level
//   (tests/e2e/pow.test.mjs).
//
// Prints the median and the range over BENCH_RUNS runs (default 5). Never
// fails on the figures; exits non-zero only when it cannot measure.
import { cpus } from "node:os";
import { client, sleep } from "../tests/support/client.mjs";
import { startGate } from "../tests/support/runtime.mjs";
import { median } from "./load.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
/** A lag past this is a failure to measure, not a figure. */
const GIVE_UP_MS = 60_000;

const gate = await startGate();
const api = client(gate.url);

function must(r, status, what) {
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Polls `read` every `everyMs` until `done` holds of its value. */
async function until(read, done, everyMs, what) {
  for (const end = Date.now() + GIVE_UP_MS; Date.now() < end; await sleep(everyMs)) {
    if (done(await read())) return Date.now();
  }
  throw new Error(`${what} never happened`);
}

async function back(run) {
  const P = `back-${run}`;
  must(await api.put(P, { stock_total: 1, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 2_000 }), 201, "create");
  const held = must(await api.reserve(P, "first", 1), 201, "hold");
  await until(async () => (await api.product(P)).body.available, (a) => a === 0, 50, "the edge seeing the hold");
  let n = 0;
  const at = await until(() => api.reserve(P, "second", 1, `again-${run}-${n++}`), (r) => r.status === 201, 50, "the unit coming back");
  return at - held.expires_at_ms;
}

async function soldOut(run) {
  const P = `sold-out-${run}`;
  const stock = 3;
  must(await api.put(P, { stock_total: stock, admit_per_s: 100, per_buyer_max: 1, quantity_max: 1 }), 201, "create");
  const join = async (b) => must(await api.join(P, b), 201, `join ${b}`).ticket;
  const buyers = await Promise.all(Array.from({ length: stock }, (_, i) => join(`buyer-${i}`)));
  const watchers = await Promise.all(Array.from({ length: 10 }, (_, i) => join(`watcher-${i}`)));
  const rids = [];
  for (const [i, ticket] of buyers.entries()) {
    const b = `buyer-${i}`;
    await until(async () => (await api.standing(P, b, ticket)).body.admitted, Boolean, 50, `${b} admitted`);
    rids.push(must(await api.reserve(P, b, 1, undefined, { "flashgate-ticket": ticket }), 201, `${b} reserves`).reservation_id);
  }
  for (const [i, rid] of rids.slice(0, -1).entries()) must(await api.confirm(P, `buyer-${i}`, rid), 200, "pay");
  must(await api.confirm(P, `buyer-${stock - 1}`, rids.at(-1)), 200, "pay the last unit");
  const paid = Date.now();
  const heard = await Promise.all(
    watchers.map((ticket, i) => until(async () => (await api.standing(P, `watcher-${i}`, ticket)).body.verdict, (v) => v === "sold_out", 100, "sold_out")),
  );
  return Math.max(...heard) - paid;
}

async function level(run) {
  const P = `level-${run}`;
  must(await api.put(P, { stock_total: 10, admit_per_s: 10, pow: { mode: "fixed", level: 1 } }), 201, "create");
  const asking = async () => (await api.challenge(P, "watcher")).body.parameters.data.level;
  await until(asking, (l) => l === 1, 50, "level 1 asked");
  must(await api.put(P, { pow: { mode: "fixed", level: 2 } }), 200, "raise");
  const raised = Date.now();
  return (await until(asking, (l) => l === 2, 50, "level 2 asked")) - raised;
}

try {
  console.log(`machine: ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; ${new Date().toISOString()}; ${RUNS} runs`);
  const lags = { back: [], "sold out": [], level: [] };
  for (let run = 0; run < RUNS; run++) {
    lags.back.push(await back(run));
    lags["sold out"].push(await soldOut(run));
    lags.level.push(await level(run));
  }
  for (const [what, ms] of Object.entries(lags)) {
    console.log(`${what.padEnd(9)} median ${String(median(ms)).padStart(5)} ms, ${Math.min(...ms)} to ${Math.max(...ms)} ms`);
  }
} finally {
  await gate.stop();
}
