// The endgame of a sale over K stock shards, judged from outside by
// flashgate-load: every `sold_out` answer must be true when it is given
// (flashgate_wire::bounds::SOLD_OUT_LAG_MS allowed for units that came
// back), and no unit may be left available while a buyer was refused.
// The load tool judges both (its verdict's `false_sold_outs` and
// `available_while_refused`, load/src/sold_out.rs); a buyer refused
// `sold_out` is never retried here.
//
// - Sequential buyers: one connection, one buyer after another, exactly as
//   many as the stock: every one of them gets a unit, at K = 1, 2 and 8.
// - A crowd: 2,000 buyers at 32 connections for 400 units, every hold
//   paid, at K = 1, 2 and 8: the 400 units sell, and none of the 1,600
//   refusals is false.
//
// E2E_SEED replays a run (it is the load's --seed).
import { describe } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { join } from "node:path";
import * as keys from "../support/keys.mjs";
import { ROOT } from "../support/runtime.mjs";
import { SEED, why } from "../support/seed.mjs";
import { useGate } from "../support/system.mjs";

const target = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: ROOT })).target_directory;
const LOAD = join(target, "debug", "flashgate-load");

const sale = useGate({ origin: true });

/** Runs flashgate-load with `args`; resolves to its exit code, JSON report
 * and stderr. */
function load(args) {
  return new Promise((ok) => {
    const proc = spawn(LOAD, [...args, "--json"], { env: { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN } });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (d) => (stdout += d));
    proc.stderr.on("data", (d) => (stderr += d));
    proc.on("close", (code) => ok({ code, report: stdout ? JSON.parse(stdout) : null, stderr }));
  });
}

/** Holds outlive any run here, so that every hold is paid in time and no
 * unit comes back, even on a slow machine. */
const HOLD_TTL_MS = 600_000;

/** A sale of `stock` units over `shards` shards to `buyers` buyers at
 * `connections` at once, every hold paid, checked against the origin. */
async function endgame({ gate, origin }, { product, shards, stock, buyers, connections }) {
  const run = await load([
    "--url", gate.url, "--product", product, "--stock", String(stock), "--shards", String(shards),
    "--buyers", String(buyers), "--connections", String(connections), "--seed", String(SEED),
    "--hold-ttl-ms", String(HOLD_TTL_MS), "--shares", "100,0,0", "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--payment-keys", keys.PAYMENT_KEYS,
    "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  ]);
  const r = run.report;
  const v = r?.verdict;
  // The figures a failure is read by, and the line that shows them.
  const figures = {
    status: r?.status,
    outcomes: r?.outcomes,
    fates: r?.fates,
    sold_out_answers: v?.sold_out_answers,
    false_sold_outs: v?.false_sold_outs,
    available_at_end: v?.available_at_end,
    available_while_refused: v?.available_while_refused,
    unavailable_answers: r?.unavailable_answers,
    escrow_waits: r?.escrow_waits,
    examples: v?.false_sold_out_examples,
    violations: v?.violations,
  };
  console.log(`endgame ${product} (K = ${shards}, ${buyers} buyers at ${connections} for ${stock} units): ${JSON.stringify(figures)}`);
  const seen = why(`${product}, K = ${shards}: exit ${run.code}: ${JSON.stringify(figures)} ${r ? "" : run.stderr}`);
  assert.ok(r, seen);
  assert.equal(r.incomplete, null, seen);
  return { r, v, seen, code: run.code };
}

describe("the endgame over K stock shards: every sold_out true, no unit left while a buyer is refused", () => {
  for (const shards of [1, 2, 8]) {
    sale.test(`sequential: 60 buyers one after another for 60 units, K = ${shards}: every one gets a unit`, { timeout: 180_000 }, async (system) => {
      const { r, v, seen, code } = await endgame(system, { product: `endgame-seq-${shards}`, shards, stock: 60, buyers: 60, connections: 1 });
      assert.equal(v.false_sold_outs, 0, seen);
      assert.deepEqual(r.outcomes, { reserved: 60 }, seen);
      assert.deepEqual(r.fates, { pay: 60 }, seen);
      assert.equal(v.sold_out_answers, 0, seen);
      assert.equal(v.available_at_end, 0, seen);
      assert.deepEqual(v.violations, [], seen);
      assert.equal(code, 0, seen);
    });
  }

  for (const shards of [1, 2, 8]) {
    sale.test(`a crowd: 2,000 buyers at 32 connections for 400 units, K = ${shards}: no false sold-out, every unit sold`, { timeout: 300_000 }, async (system) => {
      const { r, v, seen, code } = await endgame(system, { product: `endgame-crowd-${shards}`, shards, stock: 400, buyers: 2000, connections: 32 });
      assert.equal(v.false_sold_outs, 0, seen);
      assert.equal(v.available_while_refused, 0, seen);
      // Every hold is paid, so nothing comes back: the 400 units sell and
      // every other buyer is refused, none left waiting on a 503.
      assert.deepEqual(r.outcomes, { reserved: 400, sold_out: 1600 }, seen);
      assert.deepEqual(r.fates, { pay: 400 }, seen);
      assert.equal(v.sold_out_answers, 1600, seen);
      assert.equal(v.available_at_end, 0, seen);
      assert.deepEqual(v.violations, [], seen);
      assert.equal(code, 0, seen);
    });
  }
});
