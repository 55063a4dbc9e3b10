// Starts the built Worker (build/index.js + build/index_bg.wasm) on bare
// `workerd serve`, with disk-backed Durable Object storage, on a free port.
// Used by the end-to-end tests, the benchmark and `scripts/dev --bare`.
import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, writeFileSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as keys from "./keys.mjs";

export const ROOT = resolve(fileURLToPath(import.meta.url), "../../..");
export const WORKERD = join(ROOT, "node_modules/.bin/workerd");
export const COMPATIBILITY_DATE = "2026-04-01";

export async function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

function capnpString(s) {
  return JSON.stringify(String(s));
}

/** Writes the workerd config for the gate and returns its path. */
export function writeConfig({ dir, stateDir, port, vars }) {
  // Embedded paths are relative to the config file, so the build is copied
  // beside it; a rebuild during a run then cannot change a running gate.
  for (const f of ["index.js", "index_bg.wasm"]) copyFileSync(join(ROOT, "build", f), join(dir, f));
  const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .gate),
    (name = "disk", disk = (path = ${capnpString(stateDir)}, writable = true)),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [ ( name = "http", address = ${capnpString(`127.0.0.1:${port}`)}, http = (), service = "main" ) ],
);
const gate :Workerd.Worker = (
  modules = [
    (name = "index.js", esModule = embed "index.js"),
    (name = "index_bg.wasm", wasm = embed "index_bg.wasm"),
  ],
  compatibilityDate = ${capnpString(COMPATIBILITY_DATE)},
  durableObjectNamespaces = [
    (className = "ProductGate", uniqueKey = "flashgate-product-gate", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "disk"),
  globalOutbound = "internet",
  bindings = [
    (name = "PRODUCT_GATE", durableObjectNamespace = "ProductGate"),
${Object.entries(vars)
  .map(([k, v]) => `    (name = ${capnpString(k)}, text = ${capnpString(v)}),`)
  .join("\n")}
  ],
);
`;
  const path = join(dir, "flashgate.capnp");
  writeFileSync(path, config);
  return path;
}

/** The gate's settings in the tests: every secret, dev sessions on. */
export function gateVars({ originUrl = "", demoPaymentUrl = "", overrides = {} } = {}) {
  return {
    ADMIN_TOKENS: keys.ADMIN_TOKENS,
    BUYER_TOKEN_KEYS: keys.BUYER_TOKEN_KEYS,
    PAYMENT_KEYS: keys.PAYMENT_KEYS,
    ID_SECRET: keys.ID_SECRET,
    FORWARD_KEYS: keys.FORWARD_KEYS,
    ORIGIN_URL: originUrl,
    DEV_SESSIONS: "on",
    DEMO_PAYMENT_URL: demoPaymentUrl,
    ...overrides,
  };
}

/**
 * Starts workerd and waits until it answers. Returns { url, proc, stop, kill }.
 * `stateDir` may be reused across starts to test durability.
 */
export async function startGate({ stateDir, port, originUrl = "", demoPaymentUrl = "", vars, quiet = true } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-workerd-"));
  stateDir ??= join(dir, "state");
  mkdirSync(stateDir, { recursive: true });
  port ??= await freePort();
  const config = writeConfig({ dir, stateDir, port, vars: vars ?? gateVars({ originUrl, demoPaymentUrl }) });
  const started = Date.now();
  const proc = spawn(WORKERD, ["serve", config, "--experimental"], {
    stdio: ["ignore", quiet ? "ignore" : "inherit", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (d) => {
    stderr += d;
    if (!quiet) process.stderr.write(d);
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`workerd exited ${proc.exitCode}: ${stderr}`);
    try {
      const r = await fetch(`${url}/api/products/__ready__`);
      await r.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`workerd did not start: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const readyMs = Date.now() - started;
  const exited = new Promise((ok) => proc.once("exit", ok));
  return {
    url,
    port,
    stateDir,
    proc,
    readyMs,
    stderr: () => stderr,
    /** Stops gracefully. */
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      await exited;
    },
    /** Stops hard, as a crash would. */
    async kill() {
      if (proc.exitCode === null) proc.kill("SIGKILL");
      await exited;
    },
  };
}
