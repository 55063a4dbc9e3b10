// flashgate-load against the gate on bare workerd and its origin: the whole
// buyer flow (dev sessions, the waiting room, reserve, pay, cancel, walk
// away), its figures, and its verdict. The binary is the debug build
// scripts/test makes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { join } from "node:path";
import * as keys from "../support/keys.mjs";
import { ROOT } from "../support/runtime.mjs";
import { withGate } from "../support/system.mjs";

const target = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: ROOT })).target_directory;
const LOAD = join(target, "debug", "flashgate-load");

function load(args) {
  return new Promise((ok) => {
    execFile(LOAD, [...args, "--json"], { env: { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN }, maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      ok({ code: err ? err.code : 0, report: stdout ? JSON.parse(stdout) : null, stderr });
    });
  });
}

test("a sale through the waiting room with dev sessions: pay, cancel and walk away; the verdict holds", { timeout: 180_000 }, () => withGate({ origin: true }, async ({ gate, origin }) => {
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", "load-room", "--stock", "40", "--buyers", "300", "--connections", "32",
    "--admit-per-s", "400", "--shares", "60,20,20", "--hold-ttl-ms", "2000", "--seed", "11",
    // Buyers keep arriving for 4 s. The edge answers sold out from a
    // snapshot up to a second old, so a unit that is cancelled reaches a
    // later buyer only if one still comes after that second. With a burst,
    // whether one did depended on how fast the machine ran: a faster gate
    // finished every buyer first, and the check below saw exactly 40.
    "--arrival", "ramp:4000",
    "--payment-keys", keys.PAYMENT_KEYS, "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  ]);
  assert.equal(code, 0, `exit ${code}: ${stderr} ${JSON.stringify(report?.verdict)}`);
  const seen = `seed 11: ${JSON.stringify({ outcomes: report.outcomes, fates: report.fates, verdict: report.verdict })}`;
  // Every buyer came to an end, through the dev session and the room.
  assert.equal(Object.values(report.outcomes).reduce((a, b) => a + b, 0), 300, seen);
  for (const e of ["session", "join", "reserve", "confirm", "cancel"]) assert.ok(report.endpoints[e]?.latency.count > 0, `${e} was called: ${seen}`);
  assert.ok(report.fates.pay > 0 && report.fates.cancel > 0 && report.fates.abandon > 0, seen);
  // Cancelled units went back on sale, so more buyers than the stock
  // reserved; the paid ones never exceed it.
  assert.ok(report.outcomes.reserved > 40, seen);
  assert.ok(report.fates.pay <= 40, seen);
  assert.equal(report.verdict.violations.length, 0, seen);
  assert.equal(report.verdict.drift_units, 0, seen);
  assert.ok(report.fairness_pairs >= 40 && report.fairness_tau > -1 && report.fairness_tau <= 1, seen);
  assert.ok(report.reached_object > 0 && report.reached_object < 1, seen);
  assert.equal(report.db_writes, report.fates.pay, `one origin row per paid order: ${seen}`);
}));

test("a refused setup or an unreachable gate is exit 2, not a verdict", async () => {
  const { code, stderr } = await load(["--url", "http://127.0.0.1:9", "--stock", "1", "--buyers", "1"]);
  assert.equal(code, 2, stderr);
  assert.match(stderr, /setup/);
});
