// flashgate-load against the gate on bare workerd and its origin: the whole
// buyer flow (dev sessions, the waiting room, reserve, pay, cancel, walk
// away), its figures, and its verdict. The binary is the debug build
// scripts/test makes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import * as keys from "../support/keys.mjs";
import { EVENTUALLY_MS, sleep } from "../support/client.mjs";
import { cargoBinary, requireBuilt } from "../support/runtime.mjs";
import { withGate } from "../support/system.mjs";

const LOAD_BUILT = cargoBinary("flashgate-load", "debug");
const LOAD = LOAD_BUILT[0];

/** Runs flashgate-load with `args`; resolves to its exit code, JSON report
 * and stderr. `signal` ({ name, afterMs }) sends it a signal mid-run. */
function load(args, { signal } = {}) {
  // Unbuilt, the spawn fails with a bare ENOENT; this names the command.
  requireBuilt([LOAD_BUILT]);
  return new Promise((ok, fail) => {
    const proc = spawn(LOAD, [...args, "--json"], { env: { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN } });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (d) => (stdout += d));
    proc.stderr.on("data", (d) => (stderr += d));
    proc.on("error", fail);
    const timer = signal && setTimeout(() => proc.kill(signal.name), signal.afterMs);
    proc.on("close", (code) => {
      clearTimeout(timer);
      ok({ code, report: stdout ? JSON.parse(stdout) : null, stderr });
    });
  });
}

/** The commands the object decided, by the gate's own counters. */
const decisions = (stats) => ["reserve", "confirm", "cancel"].reduce((a, op) => a + Object.values(stats.counters[op]).reduce((x, y) => x + y, 0), 0);

test("a sale through the waiting room with dev sessions: pay, cancel and walk away; the verdict holds", { timeout: 180_000 }, () => withGate({ origin: true }, async ({ api, gate, origin }) => {
  // An admin console open on the product all along: its polls of the
  // stats and the product reach the object too, and must not be counted
  // as the run's.
  let polling = true;
  let polls = 0;
  const console_ = (async () => {
    while (polling) {
      const s = await api.stats("load-room");
      if (s.status === 200) polls += 1;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const run = load([
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
  const { code, report, stderr } = await run;
  polling = false;
  await console_;
  assert.equal(code, 0, `exit ${code}: ${stderr} ${JSON.stringify(report?.verdict)}`);
  assert.equal(report.status, "pass");
  assert.equal(report.incomplete, null);
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
  // The gate's history of the run agrees with what its buyers saw.
  assert.deepEqual(report.history.violations, [], `${seen} ${JSON.stringify(report.history)}`);
  assert.equal(report.history.history.confirmed, report.fates.pay, JSON.stringify(report.history));
  // Served in arrival order, but for the races a refresh leaves. The load
  // tool's fairness is Kendall's tau between the buyers' arrival order and
  // the order their units came, over the buyers who got one. The room
  // admits in arrival order (FIFO, which `--audit` checks below) at 400 a
  // second, faster than the ramp's 75 arrivals a second, so each buyer is
  // let in about one edge refresh (a second) after joining, with those
  // who joined in the same refresh; who of them asks first is a race of
  // their own polls. So a buyer who arrived a refresh before another is
  // served first, if at all, and only pairs within a refresh can be
  // discordant: the first 40 units went to about one refresh's buyers,
  // which in random order would leave tau about 0.6 over the 60-odd
  // served. Six runs measured 0.68 to 0.75 (62 to 66 buyers). 0.4 is
  // below them all, and far above an order unrelated to arrival (tau 0,
  // standard deviation 0.11 at the 40 buyers asked for, less with more)
  // or a reversed one (-1).
  console.log(`fairness: Kendall tau ${report.fairness_tau} over ${report.fairness_pairs} buyers with units`);
  assert.ok(report.fairness_pairs >= 40, seen);
  assert.ok(report.fairness_tau >= 0.4, `service follows arrival: tau ${report.fairness_tau}: ${seen}`);
  assert.ok(report.reached_object > 0 && report.reached_object < 1, seen);
  // What reached the object were the buyers' own reserves, confirms and
  // cancels, at most one decision each: the console's polls are not among
  // them.
  assert.ok(polls > 50, `the console polled (${polls})`);
  const own = ["reserve", "confirm", "cancel"].reduce((a, e) => a + report.endpoints[e].latency.count, 0);
  assert.ok(Math.round(report.reached_object * report.requests) <= own, `${report.reached_object} of ${report.requests} requests, ${own} of them reserves, confirms or cancels: ${seen}`);
  assert.equal(report.db_writes, report.fates.pay, `one origin row per paid order: ${seen}`);
  assert.deepEqual(report.shares, { pay: 60, cancel: 20, abandon: 20, note: null });
  // The run made the product, and closed it at its end.
  assert.deepEqual(report.product_made, { left: "closed" });
  assert.equal((await api.stats("load-room")).body.state, "closed");
}));

test("stopped by SIGINT mid-sale, it still reports what it measured, marked incomplete, and closes its product", { timeout: 120_000 }, () => withGate({ origin: true }, async ({ api, gate }) => {
  const before = Date.now();
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", "load-stop", "--stock", "50", "--buyers", "400", "--connections", "16",
    "--arrival", "ramp:30000", "--shares", "50,50,0", "--seed", "12", "--progress", "lines",
    "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--payment-keys", keys.PAYMENT_KEYS,
  ], { signal: { name: "SIGINT", afterMs: 4_000 } });
  const seen = `seed 12: ${stderr} ${JSON.stringify({ incomplete: report?.incomplete, outcomes: report?.outcomes, verdict: report?.verdict })}`;
  // That it stopped before the 30 s ramp ended is told by the buyers it
  // never served (`stopped` below): a run that ignored the signal would
  // have served them all. How soon it stopped is logged.
  console.log(`SIGINT at 4 s: the run ended ${Date.now() - before} ms after it began`);
  assert.equal(code, 2, seen);
  assert.equal(report.status, "incomplete", seen);
  assert.match(report.incomplete, /interrupted \(SIGINT\)/, seen);
  // What it measured before the stop: some buyers served, the rest
  // stopped, none of them lost from the count.
  assert.equal(Object.values(report.outcomes).reduce((a, b) => a + b, 0), 400, seen);
  assert.ok(report.outcomes.stopped > 100 && report.outcomes.reserved > 0, seen);
  assert.ok(report.requests > 0 && report.endpoints.reserve.latency.count > 0, seen);
  // The checks it could make passed; the orders it never read are said to be unchecked.
  assert.deepEqual(report.verdict.violations, [], seen);
  assert.equal(report.verdict.orders_checked, false, seen);
  // Progress came as lines, since its stderr is not a terminal.
  assert.match(stderr, /flashgate-load: \d+ s · \d+ of 400 buyers answered/, seen);
  assert.deepEqual(report.product_made, { left: "closed" }, seen);
  const stats = await api.stats("load-stop");
  assert.equal(stats.body.state, "closed", seen);
}));

test("--deadline-s and SIGTERM stop a run as Ctrl-C does: a report, incomplete, saying why", { timeout: 120_000 }, () => withGate({}, async ({ gate }) => {
  const args = (product, seed) => [
    "--url", gate.url, "--product", product, "--stock", "20", "--buyers", "200", "--connections", "8",
    "--arrival", "ramp:30000", "--seed", String(seed), "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--payment-keys", keys.PAYMENT_KEYS,
  ];
  const deadline = await load([...args("load-deadline", 16), "--deadline-s", "2"]);
  const seen = `seed 16: ${deadline.stderr} ${JSON.stringify(deadline.report?.outcomes)}`;
  assert.equal(deadline.code, 2, seen);
  assert.equal(deadline.report.incomplete, "the run reached --deadline-s 2", seen);
  assert.ok(deadline.report.outcomes.stopped > 0 && deadline.report.requests > 0, seen);
  assert.deepEqual(deadline.report.product_made, { left: "closed" }, seen);
  const term = await load(args("load-term", 17), { signal: { name: "SIGTERM", afterMs: 2_000 } });
  assert.equal(term.code, 2, term.stderr);
  assert.equal(term.report.incomplete, "terminated (SIGTERM)", term.stderr);
  assert.equal(term.report.status, "incomplete");
}));

test("its own reads meet the admin rate limit: it waits as Retry-After says and finishes; an error later still reports, incomplete", { timeout: 180_000 }, () => withGate({ origin: true, vars: { RATE_LIMITS: "ip=1000000/10;buyer=1000000/10;admin=2/10" } }, async ({ gate, origin }) => {
  // Two admin requests in 10 s: the setup and the first stats read pass,
  // the stats read after the buyers meets a 429 with Retry-After: 10.
  const started = Date.now();
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", "load-limited", "--stock", "10", "--buyers", "30", "--connections", "8", "--seed", "13",
    "--shares", "100,0,0", "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--payment-keys", keys.PAYMENT_KEYS,
    "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  ]);
  const seen = `seed 13: ${stderr} ${JSON.stringify({ incomplete: report?.incomplete, verdict: report?.verdict, retries: report?.read_retries })}`;
  assert.equal(code, 0, seen);
  assert.equal(report.status, "pass", seen);
  assert.ok(report.read_retries >= 1, seen);
  assert.match(stderr, /stats: 429 rate_limited: .*trying again in 10\.0 s, as its Retry-After says/, seen);
  assert.ok(Date.now() - started >= 9_000, `it waited the 10 s the gate asked for: ${seen}`);
  assert.equal(report.verdict.orders_checked, true, seen);
  assert.equal(report.fates.pay, 10, seen);

  // The origin refuses a wrong read token: a read that cannot succeed.
  // The run stops there and still prints what it measured.
  const wrong = await load([
    "--url", gate.url, "--product", "load-wrong", "--stock", "5", "--buyers", "10", "--connections", "4", "--seed", "14",
    "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--payment-keys", keys.PAYMENT_KEYS,
    "--origin", origin.url, "--origin-read-token", "not-the-read-token",
  ]);
  const seenWrong = `seed 14: ${wrong.stderr} ${JSON.stringify(wrong.report)}`;
  assert.equal(wrong.code, 2, seenWrong);
  assert.equal(wrong.report.status, "incomplete", seenWrong);
  assert.match(wrong.report.incomplete, /^origin orders: 401/, seenWrong);
  assert.equal(wrong.report.outcomes.reserved, 5, seenWrong);
  assert.equal(wrong.report.verdict.orders_checked, false, seenWrong);
}));

test("without payment keys nobody pays, and the report says which shares were followed", { timeout: 60_000 }, () => withGate({}, async ({ gate }) => {
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", "load-nokeys", "--stock", "5", "--buyers", "10", "--connections", "4", "--seed", "15",
    "--buyer-keys", keys.BUYER_TOKEN_KEYS, "--settle-timeout-ms", "1000",
  ]);
  // No origin: the outbox keeps its events, and no order is checked; the
  // run is whole all the same.
  assert.equal(code, 0, stderr);
  assert.equal(report.status, "pass");
  assert.equal(report.settle_ms, null);
  assert.equal(report.fates.pay, undefined, JSON.stringify(report.fates));
  assert.deepEqual({ ...report.shares, note: undefined }, { pay: 0, cancel: 10, abandon: 90, note: undefined });
  assert.match(report.shares.note, /no --payment-keys: nobody could pay, so the 80% who would have paid walked away/);
  assert.match(stderr, /NOTE: no --payment-keys/);
}));

test("--audit: an honest sale through a pre-queue passes the audit from outside", { timeout: 180_000 }, () => withGate(async ({ gate, api }) => {
  // The pre-queue opens now and the sale in 3 s, so the load reads the
  // commitment before the key is out, and the lottery orders everyone.
  const P = "load-audit";
  const put = await api.put(P, { stock_total: 30, opens_at_ms: Date.now() + 3_000, prequeue_ms: 60_000, admit_per_s: 40, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 2_000 });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", P, "--buyers", "120", "--connections", "32", "--seed", "12", "--audit",
  ]);
  const seen = `seed 12: ${JSON.stringify({ outcomes: report?.outcomes, audit: report?.audit })} ${stderr}`;
  assert.equal(code, 0, `exit ${code}: ${seen}`);
  assert.equal(report.audit.violations.length, 0, seen);
  assert.equal(report.audit.tickets, 120, seen);
  assert.ok(report.audit.points > 0, seen);
  // Nobody pays here, so holds expire and their units sell again.
  assert.ok(report.outcomes.reserved >= 30, seen);
}));

test("--pow-level: every buyer solves the waiting room's proof of work natively and joins; the verdict holds", { timeout: 180_000 }, () => withGate(async ({ gate, api }) => {
  const { code, report, stderr } = await load([
    "--url", gate.url, "--product", "load-pow", "--stock", "30", "--buyers", "120", "--connections", "32",
    "--admit-per-s", "200", "--pow-level", "2", "--seed", "13",
  ]);
  const seen = `seed 13: ${JSON.stringify({ outcomes: report?.outcomes, pow: report?.pow, join: report?.endpoints?.join })} ${stderr}`;
  assert.equal(code, 0, `exit ${code}: ${seen}`);
  assert.equal(report.verdict.violations.length, 0, seen);
  // Each buyer was refused once with a challenge, solved it and joined.
  assert.equal(report.pow.solved, 120, seen);
  assert.equal(report.endpoints.join.answers.pow_required, 120, seen);
  assert.equal(report.endpoints.join.answers["201"], 120, seen);
  // Cancelled units sell again, so at least the stock was reserved.
  assert.ok(report.outcomes.reserved >= 30, seen);
  // The edge reports its tickets home with its next refresh, which a
  // buyer's request makes once the snapshot is about a second old: the
  // count arrives eventually while buyers come. A product read stands in
  // for the next buyer, since on a loaded machine the run's last requests
  // can all fall within a second of its last join (the admin's stats do
  // not pass through the edge's snapshot).
  const deadline = Date.now() + EVENTUALLY_MS;
  let q = (await api.stats("load-pow")).body.room;
  while (q.reported < 120 && Date.now() < deadline) {
    await sleep(200);
    await api.product("load-pow");
    q = (await api.stats("load-pow")).body.room;
  }
  assert.deepEqual([q.pow_mode, q.pow_level, q.reported], ["fixed", 2, 120], JSON.stringify(q));
}));

test("a refused setup or an unreachable gate is exit 2, not a verdict; the report still says so", async () => {
  const { code, report, stderr } = await load(["--url", "http://127.0.0.1:9", "--stock", "1", "--buyers", "1"]);
  assert.equal(code, 2, stderr);
  assert.match(stderr, /setup/);
  assert.equal(report.status, "incomplete");
  assert.match(report.incomplete, /^setup: no answer/);
  assert.equal(report.requests, 0);
});
