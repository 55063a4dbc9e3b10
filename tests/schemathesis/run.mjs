// Schemathesis against both services, from `openapi.yaml`: the gate on bare
// workerd and the origin binary (SQLite), each started here. Every run uses
// positive and negative data and checks that no answer is a 5xx and that
// every response conforms to the spec (status, content type, headers,
// schema). Three runs:
//   1. the gate as a buyer (no admin token), against the spec's example
//      product, which holds a live reservation: hooks.py reads its state
//      around every request, and any refused request that changed it fails;
//   2. the gate with the admin token;
//   3. the origin, with requests signed as the gate signs them (hooks.py),
//      so that the signed routes are tested past their 401.
// Exits non-zero on any failure. SCHEMATHESIS is the binary's path
// (scripts/ensure-tools installs it).
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { startGate, ROOT } from "../support/runtime.mjs";
import { startOrigin, ORIGIN_SECRET } from "../support/origin.mjs";
import { ADMIN_TOKEN, client } from "../support/client.mjs";

const ST = process.env.SCHEMATHESIS ?? "schemathesis";
const SPEC = join(ROOT, "openapi.yaml");
const CONFIG = join(ROOT, "tests/schemathesis/schemathesis.toml");
const work = mkdtempSync(join(tmpdir(), "flashgate-schemathesis-"));

/** Runs schemathesis and resolves to its exit code. Asynchronous, so that
 * this process keeps serving its own sockets meanwhile. */
function schemathesis(label, args, env = {}) {
  console.log(`\n== schemathesis: ${label}`);
  const proc = spawn(ST, ["--config-file", CONFIG, "run", SPEC, "--no-color", ...args], {
    cwd: work,
    stdio: "inherit",
    env: { ...process.env, PYTHONPATH: join(ROOT, "tests/schemathesis"), SCHEMATHESIS_HOOKS: "hooks", ...env },
  });
  return new Promise((ok, fail) => {
    proc.on("error", fail);
    proc.on("exit", (code) => ok(code));
  });
}

const origin = await startOrigin();
const gate = await startGate({ originUrl: origin.url, originSecret: ORIGIN_SECRET });
const failures = [];
try {
  const api = client(gate.url);
  // The product the spec's examples name, with one live hold whose TTL
  // outlasts the run, so that no expiry changes its state meanwhile.
  assert.equal((await api.put("guard", { stock_total: 5, hold_ttl_ms: 3_600_000 })).status, 201);
  assert.equal((await api.reserve("guard", "alice", 1, "guard-hold")).status, 201);

  const guarded = { FLASHGATE_GATE_URL: gate.url, FLASHGATE_GUARD_PRODUCT: "guard", FLASHGATE_ADMIN_TOKEN: ADMIN_TOKEN };
  const withRefusalCheck = ["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,refusal_changes_nothing"];
  if (await schemathesis("gate, as a buyer, every refusal checked", ["--url", gate.url, "--include-tag", "gate", ...withRefusalCheck], guarded) !== 0) {
    failures.push("gate (buyer)");
  }
  const auth = ["-H", `Authorization: Bearer ${ADMIN_TOKEN}`];
  if (await schemathesis("gate, as the admin", ["--url", gate.url, "--include-tag", "gate", ...auth]) !== 0) {
    failures.push("gate (admin)");
  }
  const signing = { FLASHGATE_SIGNING_SECRET: ORIGIN_SECRET };
  if (await schemathesis("origin, signed as the gate", ["--url", origin.url, "--include-tag", "origin"], signing) !== 0) {
    failures.push("origin");
  }
} finally {
  await gate.stop();
  await origin.stop();
}
if (failures.length) {
  console.log(`\nschemathesis failed: ${failures.join(", ")}`);
  process.exit(1);
}
console.log("\nschemathesis: every run passed");
