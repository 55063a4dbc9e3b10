// The runtime ceiling (bench/baseline/ceiling.js, a copy of the project's
// yardstick) on bare workerd, for bench/edge.mjs and bench/profile.mjs.
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, requireBuilt, ROOT, WORKERD } from "../tests/support/runtime.mjs";

/** Starts the ceiling on bare workerd; with `inspector`, workerd listens
 * for the V8 inspector on that port. */
export async function startCeiling({ inspector } = {}) {
  requireBuilt([[WORKERD, "npm ci"]]);
  const dir = mkdtempSync(join(tmpdir(), "flashgate-ceiling-"));
  mkdirSync(join(dir, "do-state"));
  copyFileSync(join(ROOT, "bench/baseline/ceiling.js"), join(dir, "ceiling.js"));
  const port = await freePort();
  writeFileSync(
    join(dir, "ceiling.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .ceilingWorker), (name = "disk", disk = (path = "do-state", writable = true)) ],
  sockets = [ ( name = "http", address = "127.0.0.1:${port}", http = (), service = "main" ) ],
);
const ceilingWorker :Workerd.Worker = (
  modules = [ (name = "ceiling.js", esModule = embed "ceiling.js") ],
  compatibilityDate = "2025-09-01",
  durableObjectNamespaces = [ (className = "Ceiling", uniqueKey = "ceiling", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [ (name = "CEILING", durableObjectNamespace = "Ceiling") ],
);
`,
  );
  const args = ["serve", "ceiling.capnp", "--experimental"];
  if (inspector) args.push(`--inspector-addr=127.0.0.1:${inspector}`);
  const proc = spawn(WORKERD, args, { cwd: dir, stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      await (await fetch(`${url}/plain`)).text();
      break;
    } catch {
      if (i > 600) throw new Error("ceiling did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { url, proc, stop: () => proc.kill("SIGTERM") };
}

