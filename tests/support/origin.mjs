// Starts the origin service binary (built by scripts/test) on a given or free
// port, with SQLite in a data dir.
import { spawn, execFile } from "node:child_process";
import http from "node:http";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cargoBinary, freePort, requireBuilt } from "./runtime.mjs";

import * as keys from "./keys.mjs";

/**
 * The origin binary: FLASHGATE_ORIGIN_BIN, or the one cargo built in the
 * profile FLASHGATE_ORIGIN_PROFILE names (`debug` for the tests, which share
 * the test build; `release` for the benchmarks), with the command that
 * builds it (`requireBuilt`).
 */
export function originBinary() {
  const named = process.env.FLASHGATE_ORIGIN_BIN;
  if (named) return [named, "a build of flashgate-origin at FLASHGATE_ORIGIN_BIN"];
  return cargoBinary("flashgate-origin", process.env.FLASHGATE_ORIGIN_PROFILE ?? "debug");
}

/** The origin binary's path, or an error naming the command that builds it. */
export function originBin() {
  const needed = originBinary();
  requireBuilt([needed]);
  return needed[0];
}

/** The origin's settings in the tests; `env` overrides or adds. */
export function originEnv({ port, dataDir, gateUrl, forwardKeys = keys.FORWARD_KEYS, env = {} }) {
  const out = {
    ...process.env,
    FORWARD_KEYS: forwardKeys,
    ORIGIN_READ_TOKENS: `r1:${keys.READ_TOKEN}`,
    ORIGIN_SHOP_TOKENS: `s1:${keys.SHOP_TOKEN}`,
    BUYER_TOKEN_KEYS: keys.BUYER_TOKEN_KEYS,
    FLASHGATE_DATA_DIR: dataDir,
    FLASHGATE_ORIGIN_LISTEN: `127.0.0.1:${port}`,
    RUST_LOG: process.env.RUST_LOG ?? "warn",
    ...env,
  };
  if (gateUrl) {
    Object.assign(out, {
      FLASHGATE_DEMO_PAYMENTS: "true",
      PAYMENT_KEYS: keys.PAYMENT_KEYS,
      FLASHGATE_GATE_URL: gateUrl,
      FLASHGATE_DEMO_ALLOW_ORIGIN: gateUrl,
    });
  }
  return out;
}

export async function startOrigin({ port, dataDir, databaseUrl, gateUrl, forwardKeys, env: extra } = {}) {
  port ??= await freePort();
  dataDir ??= mkdtempSync(join(tmpdir(), "flashgate-origin-"));
  const env = originEnv({ port, dataDir, gateUrl, forwardKeys, env: extra });
  if (databaseUrl) env.DATABASE_URL = databaseUrl;
  else delete env.DATABASE_URL;
  const proc = spawn(originBin(), ["serve"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const url = `http://127.0.0.1:${port}`;
  const read = { authorization: `Bearer ${keys.READ_TOKEN}` };
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`origin exited ${proc.exitCode}: ${stderr}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {}
    if (i > 400) throw new Error(`origin did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = new Promise((ok) => proc.once("exit", ok));
  return {
    url,
    port,
    dataDir,
    proc,
    stderr: () => stderr,
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      await exited;
    },
    /** Every order the origin stored, following the cursor. */
    async orders(productId) {
      const all = [];
      let after = 0;
      for (;;) {
        const q = new URLSearchParams({ limit: "1000", after: String(after) });
        if (productId) q.set("product_id", productId);
        const page = await (await fetch(`${url}/v1/orders?${q}`, { headers: read })).json();
        all.push(...page.orders);
        if (page.next_after === null) return all;
        after = page.next_after;
      }
    },
    async product(id) {
      const r = await fetch(`${url}/v1/products/${id}`, { headers: read });
      return r.ok ? r.json() : null;
    },
    async metrics() {
      return (await fetch(`${url}/metrics`, { headers: read })).text();
    },
  };
}

/**
 * Runs `flashgate-origin reconcile --json` and resolves to its report lines and
 * exit code; with `json: false`, to the summary for a person it prints
 * without the flag (`text`). Asynchronous, so that servers in this process
 * (a TLS proxy) keep answering while it runs.
 */
export function reconcile({ dataDir, gateUrl, adminToken = keys.ADMIN_TOKEN, products = [], args: extra = [], json = true }) {
  const args = ["reconcile", ...(json ? ["--json"] : []), "--gate-url", gateUrl, ...extra, ...products.flatMap((p) => ["--product", p])];
  const env = { ...process.env, FLASHGATE_DATA_DIR: dataDir, ADMIN_TOKEN: adminToken };
  delete env.DATABASE_URL;
  return new Promise((ok) => {
    execFile(originBin(), args, { env, encoding: "utf8" }, (e, out, err) => {
      const code = e ? e.code : 0;
      if (!json) return ok({ code, text: out, stderr: err });
      const lines = out.trim() ? out.trim().split("\n").map((l) => JSON.parse(l)) : [];
      ok({ code, products: lines.slice(0, -1), summary: lines.at(-1), stderr: err });
    });
  });
}

/**
 * A proxy in front of the origin that loses the answers of the first
 * `lose` batch deliveries after the origin committed them, answering 500
 * instead, as a connection dropped after the commit would. Only tests add
 * this fault; the origin binary has no fault switch.
 */
export async function startAnswerLosingProxy(originUrl, { lose, stall = false }) {
  const port = await freePort();
  const target = new URL(originUrl);
  let left = lose;
  let lost = 0;
  const stalled = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const upstream = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
        (ures) => {
          const body = [];
          ures.on("data", (c) => body.push(c));
          ures.on("end", () => {
            const isBatch = req.method === "POST" && req.url === "/v1/batches";
            if (isBatch && ures.statusCode === 200 && left > 0 && stall) {
              // The origin's headers and half its body, then nothing.
              left--;
              lost++;
              const whole = Buffer.concat(body);
              res.writeHead(ures.statusCode, { ...ures.headers, "content-length": String(whole.length) });
              res.write(whole.subarray(0, whole.length >> 1));
              stalled.push(res);
              return;
            }
            if (isBatch && ures.statusCode === 200 && left > 0) {
              left--;
              lost++;
              res.writeHead(500, { "content-type": "text/plain" });
              res.end("answer lost after commit");
              return;
            }
            res.writeHead(ures.statusCode, ures.headers);
            res.end(Buffer.concat(body));
          });
        },
      );
      upstream.on("error", () => {
        res.writeHead(502);
        res.end();
      });
      upstream.end(Buffer.concat(chunks));
    });
  });
  await new Promise((ok) => server.listen(port, "127.0.0.1", ok));
  return {
    url: `http://127.0.0.1:${port}`,
    lost: () => lost,
    stop: () => {
      for (const res of stalled) res.destroy();
      return new Promise((ok) => server.close(ok));
    },
  };
}
