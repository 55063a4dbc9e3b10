// The runtime ceiling (bench/baseline/ceiling.js, a copy of the project's
// yardstick) on bare workerd, for bench/edge.mjs and bench/profile.mjs; and,
// with `worker`, another JS Worker of the same shape (a `Ceiling` object
// bound as CEILING): bench/floor.js, for bench/floor.mjs (`startFloor`).
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { BUYER_TOKEN_KEYS, buyerToken, ID_SECRET, parseKeys } from "../tests/support/keys.mjs";
import { freePort, RATELIMIT_MODULE, rateLimitBindings, requireBuilt, ROOT, UNLIMITED, WORKERD } from "../tests/support/runtime.mjs";

/** Starts the ceiling on bare workerd; with `inspector`, workerd listens
 * for the V8 inspector on that port. `worker` (a path from the root) runs
 * in its place; with `limiters`, it gets the gate's rate limiting bindings,
 * unlimited, as wrangler dev gives them. Ready once `readyPath` answers
 * 200. `vars`: its text bindings. */
export async function startCeiling({ inspector, worker = "bench/baseline/ceiling.js", limiters = false, readyPath = "/plain", vars = {} } = {}) {
  requireBuilt([[WORKERD, "npm ci"]]);
  const dir = mkdtempSync(join(tmpdir(), "flashgate-ceiling-"));
  mkdirSync(join(dir, "do-state"));
  const module = basename(worker);
  copyFileSync(join(ROOT, worker), join(dir, module));
  if (limiters) copyFileSync(RATELIMIT_MODULE, join(dir, "ratelimit.worker.js"));
  const port = await freePort();
  const extensions = limiters
    ? `
  extensions = [(
    modules = [(name = "flashgate-internal:ratelimit", internal = true, esModule = embed "ratelimit.worker.js")],
  )],`
    : "";
  writeFileSync(
    join(dir, "ceiling.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .ceilingWorker), (name = "disk", disk = (path = "do-state", writable = true)) ],
  sockets = [ ( name = "http", address = "127.0.0.1:${port}", http = (), service = "main" ) ],${extensions}
);
const ceilingWorker :Workerd.Worker = (
  modules = [ (name = "${module}", esModule = embed "${module}") ],
  compatibilityDate = "2025-09-01",
  durableObjectNamespaces = [ (className = "Ceiling", uniqueKey = "ceiling", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [
    (name = "CEILING", durableObjectNamespace = "Ceiling"),
${limiters ? rateLimitBindings(UNLIMITED).join("\n") : ""}
${Object.entries(vars).map(([name, text]) => `    (name = "${name}", text = ${JSON.stringify(text)}),`).join("\n")}
  ],
);
`,
  );
  const args = ["serve", "ceiling.capnp", "--experimental"];
  if (inspector) args.push(`--inspector-addr=127.0.0.1:${inspector}`);
  const proc = spawn(WORKERD, args, { cwd: dir, stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(`${url}${readyPath}`);
      await r.text();
      if (r.status !== 200) throw new Error(`${readyPath} answered ${r.status}`);
      break;
    } catch (e) {
      if (i > 600) throw new Error(`${worker} did not start: ${e.message}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { url, proc, stop: () => proc.kill("SIGTERM") };
}

/** The keys bench/floor.js's read with the gate's duties is given, the
 * tests' own: its buyer tokens' key id and HS256 secret, and the key of its
 * reservation ids' permutation. */
const tokenKey = parseKeys(BUYER_TOKEN_KEYS)[0];
const FLOOR_KEYS = { TOKEN_KID: tokenKey.kid, TOKEN_SECRET: tokenKey.secret, ID_KEY: ID_SECRET };

/** bench/floor.js on bare workerd, as `startCeiling` starts it, with the
 * request of each of its paths: `hop`, `limited`, `command`, `rpc`, `duties` (a
 * buyer's read of its hold, with its HS256 token and its hold's id),
 * `plain`, `product` and `soldout` (a buyer's reserve).
 * The duties are checked done before it is handed out: the hold comes back
 * under its id, a forged signature, another id or a bad body is refused,
 * and the reserve is refused as sold out. */
export async function startFloor({ inspector } = {}) {
  const w = await startCeiling({ inspector, worker: "bench/floor.js", limiters: true, readyPath: "/limited", vars: FLOOR_KEYS });
  try {
    // Valid for a day: a long run must not outlive it.
    const token = buyerToken("reader", { claims: { exp: Math.floor(Date.now() / 1000) + 86_400 } });
    // The token with one character of its signature changed.
    const at = token.length - 5;
    const forged = `${token.slice(0, at)}${token[at] === "A" ? "B" : "A"}${token.slice(at + 1)}`;
    const holdId = async (n) => (await fetch(`${w.url}/duties-id/${n}`)).text();
    const requests = {
      hop: { path: "/hop" },
      limited: { path: "/limited" },
      command: { path: "/command" },
      rpc: { path: "/rpc" },
      duties: { path: `/duties/${await holdId(7)}`, headers: { authorization: `Bearer ${token}` } },
      plain: { path: "/plain" },
      product: { path: "/product" },
      soldout: { method: "POST", path: "/soldout", headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": '"floor-1"' }, body: '{"quantity":1}' },
    };
    const ask = async ({ method, path, headers, body }) => {
      const r = await fetch(`${w.url}${path}`, { method, headers, body });
      return { status: r.status, body: await r.text() };
    };
    const checks = [
      [requests.duties, 200, JSON.stringify({ ...JSON.parse((await ask(requests.command)).body), reservation_id: await holdId(7) })],
      [{ ...requests.duties, headers: { authorization: `Bearer ${forged}` } }, 401],
      [{ ...requests.duties, path: `/duties/${await holdId(8)}` }, 404],
      [requests.rpc, 200, (await ask(requests.command)).body],
      [requests.product, 200],
      [requests.soldout, 409],
      [{ ...requests.soldout, headers: { ...requests.soldout.headers, authorization: `Bearer ${forged}` } }, 401],
      [{ ...requests.soldout, body: '{"quantity":0}' }, 400],
    ];
    for (const [request, status, body] of checks) {
      const r = await ask(request);
      if (r.status !== status || (body !== undefined && r.body !== body)) throw new Error(`${request.path} answered ${r.status} ${r.body}, not ${status}`);
    }
    return { ...w, requests };
  } catch (e) {
    w.stop();
    throw e;
  }
}
