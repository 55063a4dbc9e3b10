// The wrangler configuration scripts/dev runs (scripts/dev-config.mjs):
// wrangler.toml without its [build] table, and with --load the load
// profile's rate limits, stated alike to the bindings and to RATE_LIMITS.
// The gate that runs on it is tried by the load run itself; this checks
// that nothing else of wrangler.toml changes on the way.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../support/runtime.mjs";
import { devConfig, LOAD_LIMITS, parsePolicies } from "../../scripts/dev-config.mjs";

const toml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");

/** Each [[ratelimits]] binding's { limit, period }, by policy name. */
function bindings(text) {
  const out = {};
  let name = null;
  for (const line of text.split("\n")) {
    const n = /^name = "RATE_LIMIT_(\w+)"/.exec(line.trim());
    if (n) name = n[1].toLowerCase();
    const s = /^simple = \{ limit = (\d+), period = (\d+) \}/.exec(line.trim());
    if (s) out[name] = { limit: Number(s[1]), period: Number(s[2]) };
  }
  return out;
}
const ratelimitsVar = (text) => /^RATE_LIMITS = "([^"]+)"/m.exec(text)[1];
/** The lines of `text` that are not comments, blank, or the [build] table. */
const body = (text) => text.split("\n").filter((l) => l.trim() && !l.trim().startsWith("#") && l.trim() !== "[build]" && !l.startsWith("command = "));

test("the deployed profile is wrangler.toml without its build command", () => {
  const dev = devConfig(toml, "deployed");
  assert.ok(/^\[build\]$/m.test(toml) && /^command = "scripts\/build"$/m.test(toml), "wrangler.toml has the build the dev config drops");
  assert.doesNotMatch(dev, /^\[build\]|^command = /m);
  assert.deepEqual(body(dev), body(toml));
  // And the script prints the same.
  assert.equal(execFileSync("node", [join(ROOT, "scripts/dev-config.mjs")], { encoding: "utf8" }), dev);
});

test("the load profile raises the per-address and admin limits only, alike in the bindings and RATE_LIMITS", () => {
  const dev = devConfig(toml, "load");
  const deployed = parsePolicies(ratelimitsVar(toml));
  const load = parsePolicies(LOAD_LIMITS);
  assert.equal(ratelimitsVar(dev), LOAD_LIMITS);
  assert.deepEqual(bindings(dev), load, "each binding as its policy says");
  assert.deepEqual(bindings(toml), deployed, "wrangler.toml itself is unchanged");
  assert.ok(load.ip.limit / load.ip.period >= 1000 * (deployed.ip.limit / deployed.ip.period), "the per-address limit serves a crowd");
  assert.ok(load.admin.limit / load.admin.period > deployed.admin.limit / deployed.admin.period);
  assert.deepEqual(load.buyer, deployed.buyer, "each simulated buyer meets the per-buyer limit as deployed");
  for (const p of Object.values(load)) assert.ok([10, 60].includes(p.period), "the platform's periods are 10 s or 60 s");
  // Everything else is as deployed.
  const strip = (text) => body(text).filter((l) => !/^(simple|RATE_LIMITS) = /.test(l.trim()));
  assert.deepEqual(strip(dev), strip(toml));
  assert.equal(execFileSync("node", [join(ROOT, "scripts/dev-config.mjs"), "--load"], { encoding: "utf8" }), dev);
});
