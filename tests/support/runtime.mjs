// Starts the built Worker (build/index.js + build/index_bg.wasm) on bare
// `workerd serve`, with disk-backed Durable Object storage, on a free port.
// Used by the end-to-end tests, the benchmark and `scripts/dev --bare`.
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as keys from "./keys.mjs";

export const ROOT = resolve(fileURLToPath(import.meta.url), "../../..");
export const WORKERD = join(ROOT, "node_modules/.bin/workerd");

/**
 * Stops a run before it spawns or copies a file that is not built (a fresh
 * clone has none of them), naming the command that builds each, where the
 * spawn would fail with a bare ENOENT. `needs` are [path, command] pairs;
 * every missing one is named at once.
 */
export function requireBuilt(needs) {
  const missing = new Map();
  for (const [path, command] of needs) {
    if (!existsSync(path)) missing.set(command, [...(missing.get(command) ?? []), path]);
  }
  if (missing.size === 0) return;
  const lines = [...missing].map(([command, paths]) => `  ${command}    (builds ${paths.join(", ")})`);
  throw new Error(`not built yet; run, from ${ROOT}:\n${lines.join("\n")}`);
}

/** For a script: as `requireBuilt`, but says so and exits 1 without a
 * stack trace, since nothing is wrong but a step not yet taken. */
export function exitUnlessBuilt(needs) {
  try {
    requireBuilt(needs);
  } catch (e) {
    console.error(e.message);
    process.exit(1);
  }
}

/** The runtime and the built Worker a gate runs on, as requireBuilt's pairs. */
export const GATE_BUILT = [
  [WORKERD, "npm ci"],
  [join(ROOT, "build/index.js"), "scripts/build"],
  [join(ROOT, "build/index_bg.wasm"), "scripts/build"],
];

let targetDirectory;
/** The workspace's cargo target directory (`CARGO_TARGET_DIR` included). */
export function targetDir() {
  targetDirectory ??= JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: ROOT })).target_directory;
  return targetDirectory;
}

/** A binary of the workspace's package `name` in cargo's `profile`, with
 * the command that builds it, as a requireBuilt pair. */
export function cargoBinary(name, profile) {
  return [join(targetDir(), profile, name), `cargo build${profile === "release" ? " --release" : ""} -p ${name}`];
}
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

/** The platform's rate limiter, as miniflare gives it to workerd: a
 * wrapped binding over an internal module (the same code wrangler dev runs). */
export const RATELIMIT_MODULE = join(ROOT, "node_modules/miniflare/dist/src/workers/ratelimit/ratelimit.worker.js");
const LIMITERS = { ip: "RATE_LIMIT_IP", buyer: "RATE_LIMIT_BUYER", admin: "RATE_LIMIT_ADMIN" };

/** Limits so high that no functional test meets them; the tests of the
 * limits themselves use wrangler.toml's (`wranglerRateLimits`). */
export const UNLIMITED = "ip=1000000000/10;buyer=1000000000/10;admin=1000000000/10";

/** The RATE_LIMITS var of wrangler.toml: the policies deployed. */
export function wranglerRateLimits() {
  const toml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
  return /^RATE_LIMITS = "([^"]+)"/m.exec(toml)[1];
}

/** A limit of the core (`core/src/config.rs`'s `limits`), read from its one
 * definition so that a test cannot drift from it. */
export function coreLimit(name) {
  const src = readFileSync(join(ROOT, "core/src/config.rs"), "utf8");
  const m = new RegExp(`pub const ${name}: \\w+ = ([0-9_]+|[A-Z][A-Z0-9_]*);`).exec(src);
  if (!m) throw new Error(`no limit ${name} in core/src/config.rs`);
  // A limit defined as another (`DEFAULT = MAX`) reads as that one.
  return /^[A-Z]/.test(m[1]) ? coreLimit(m[1]) : Number(m[1].replaceAll("_", ""));
}

export function rateLimitBindings(policies) {
  return policies.split(";").map((p, i) => {
    const [name, quota] = p.split("=");
    const [limit, period] = quota.split("/");
    return `    (name = ${capnpString(LIMITERS[name.trim()])}, wrapped = (
      moduleName = "flashgate-internal:ratelimit",
      innerBindings = [
        (name = "namespaceId", json = ${capnpString(JSON.stringify(String(1001 + i)))}),
        (name = "limit", json = ${capnpString(limit)}),
        (name = "period", json = ${capnpString(period)}),
      ],
    )),`;
  });
}

/** Writes the workerd config for the gate and returns its path. */
export function writeConfig({ dir, stateDir, port, vars }) {
  requireBuilt(GATE_BUILT);
  // Embedded paths are relative to the config file, so the build is copied
  // beside it; a rebuild during a run then cannot change a running gate.
  for (const f of ["index.js", "index_bg.wasm"]) copyFileSync(join(ROOT, "build", f), join(dir, f));
  copyFileSync(RATELIMIT_MODULE, join(dir, "ratelimit.worker.js"));
  const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .gate),
    (name = "disk", disk = (path = ${capnpString(stateDir)}, writable = true)),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [ ( name = "http", address = ${capnpString(`127.0.0.1:${port}`)}, http = (), service = "main" ) ],
  extensions = [(
    modules = [(name = "flashgate-internal:ratelimit", internal = true, esModule = embed "ratelimit.worker.js")],
  )],
);
const gate :Workerd.Worker = (
  modules = [
    (name = "index.js", esModule = embed "index.js"),
    (name = "index_bg.wasm", wasm = embed "index_bg.wasm"),
  ],
  compatibilityDate = ${capnpString(COMPATIBILITY_DATE)},
  durableObjectNamespaces = [
    (className = "ProductGate", uniqueKey = "flashgate-product-gate", enableSql = true),
    (className = "Catalog", uniqueKey = "flashgate-catalog", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "disk"),
  globalOutbound = "internet",
  bindings = [
    (name = "PRODUCT_GATE", durableObjectNamespace = "ProductGate"),
    (name = "CATALOG", durableObjectNamespace = "Catalog"),
${rateLimitBindings(vars.RATE_LIMITS).join("\n")}
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
    RATE_LIMITS: UNLIMITED,
    ...overrides,
  };
}

/**
 * Every stop of a gate this process started, as `{ url, from, to }`: from
 * when its stop began to when a gate answered on the same url again
 * (`Infinity` until one does). A request in flight to a gate while it was
 * down may fail for that reason alone (tests/support/retries.mjs).
 */
export const gateOutages = [];

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
  // A gate on the url of one stopped before ends that one's outage.
  for (const o of gateOutages) if (o.url === url && o.to === Infinity) o.to = Date.now();
  const exited = new Promise((ok) => proc.once("exit", ok));
  const down = () => gateOutages.push({ url, from: Date.now(), to: Infinity });
  return {
    url,
    port,
    stateDir,
    proc,
    readyMs,
    stderr: () => stderr,
    /** Stops gracefully. */
    async stop() {
      down();
      if (proc.exitCode === null) proc.kill("SIGTERM");
      await exited;
    },
    /** Stops hard, as a crash would. */
    async kill() {
      down();
      if (proc.exitCode === null) proc.kill("SIGKILL");
      await exited;
    },
  };
}
