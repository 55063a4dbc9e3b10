// Schemathesis against both services, from `openapi.yaml`: the gate on bare
// workerd and the origin binary (SQLite, with demo payments on), each started
// here. Every run uses positive and negative data and checks that no answer is
// a 5xx and that every response conforms to the spec (status, content type,
// headers, schema). hooks.py supplies credentials by each operation's security
// scheme. Three runs:
//   1. the gate as a buyer (a buyer token, and payment signatures for
//      confirms, but no admin token), against the spec's example product,
//      which holds another buyer's live reservation: hooks.py reads its state
//      around every request, and any refused request that changed it fails;
//   2. the gate with the admin token as well;
//   3. the origin, with batches signed as the gate signs them and the shop's
//      read and shop tokens, so every route is tested past its 401.
// Exits non-zero on any failure. SCHEMATHESIS is the binary's path
// (scripts/ensure-tools installs it).
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { freePort, startGate, ROOT } from "../support/runtime.mjs";
import { startOrigin } from "../support/origin.mjs";
import { client } from "../support/client.mjs";
import * as keys from "../support/keys.mjs";

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

const gatePort = await freePort();
const origin = await startOrigin({ gateUrl: `http://127.0.0.1:${gatePort}` });
const gate = await startGate({ port: gatePort, originUrl: origin.url, demoPaymentUrl: origin.url });
const failures = [];
try {
  const api = client(gate.url);
  // The product the spec's examples name, with one live hold of another
  // buyer whose TTL outlasts the run, so that no expiry changes its state
  // meanwhile.
  assert.equal((await api.put("guard", { stock_total: 5, hold_ttl_ms: 3_600_000 })).status, 201);
  assert.equal((await api.reserve("guard", "alice", 1, "guard-hold")).status, 201);
  // The product's creation put its stock total in the outbox; wait until it
  // is delivered, so that no delivery changes the guarded state mid-run.
  for (let i = 0; (await api.stats("guard")).body.outbox.backlog > 0; i++) {
    assert.ok(i < 200, "the guard product's outbox did not drain");
    await new Promise((r) => setTimeout(r, 50));
  }

  // A token for a buyer of schemathesis's own, valid for the whole run.
  const buyer = keys.buyerToken("schemathesis", { claims: { exp: Math.floor(Date.now() / 1000) + 3600 } });
  const signers = { FLASHGATE_PAYMENT_KEYS: keys.PAYMENT_KEYS, FLASHGATE_FORWARD_KEYS: keys.FORWARD_KEYS };
  const guarded = {
    ...signers,
    FLASHGATE_CREDENTIALS: JSON.stringify({ buyerToken: buyer }),
    FLASHGATE_GATE_URL: gate.url,
    FLASHGATE_GUARD_PRODUCT: "guard",
    FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN,
  };
  const withRefusalCheck = ["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,refusal_changes_nothing"];
  if (await schemathesis("gate, as a buyer, every refusal checked", ["--url", gate.url, "--include-tag", "gate", ...withRefusalCheck], guarded) !== 0) {
    failures.push("gate (buyer)");
  }
  const admin = { ...signers, FLASHGATE_CREDENTIALS: JSON.stringify({ buyerToken: buyer, adminToken: keys.ADMIN_TOKEN }) };
  if (await schemathesis("gate, as the admin", ["--url", gate.url, "--include-tag", "gate"], admin) !== 0) {
    failures.push("gate (admin)");
  }
  const shop = {
    ...signers,
    FLASHGATE_CREDENTIALS: JSON.stringify({ buyerToken: buyer, readToken: keys.READ_TOKEN, shopToken: keys.SHOP_TOKEN }),
  };
  if (await schemathesis("origin, as the gate and the shop", ["--url", origin.url, "--include-tag", "origin"], shop) !== 0) {
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
