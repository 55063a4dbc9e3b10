// The runtime ceiling (bench/baseline/ceiling.js, a copy of the project's
// yardstick) on bare workerd, for bench/edge.mjs and bench/profile.mjs; and,
// with `worker`, another JS Worker of the same shape (a `Ceiling` object
// bound as CEILING), for bench/floor.mjs.
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { freePort, RATELIMIT_MODULE, rateLimitBindings, requireBuilt, ROOT, UNLIMITED, WORKERD } from "../tests/support/runtime.mjs";

/** Starts the ceiling on bare workerd; with `inspector`, workerd listens
 * for the V8 inspector on that port. `worker` (a path from the root) runs
 * in its place; with `limiters`, it gets the gate's rate limiting bindings,
 * unlimited, as wrangler dev gives them. Ready once `readyPath` answers
 * 200. */
export async function startCeiling({ inspector, worker = "bench/baseline/ceiling.js", limiters = false, readyPath = "/plain" } = {}) {
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
