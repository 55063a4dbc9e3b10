// The wrangler configuration scripts/dev runs the gate with, made from
// wrangler.toml (the deployed one, which stays as it is):
//
// - without its [build] table: scripts/dev builds the Worker once itself.
//   wrangler 4.86 runs a [build] command twice on every start (once to find
//   the entry, again when its file watcher is ready, printing "The file src
//   changed, restarting build..." although no file changed; workers-sdk
//   issue 7934), and each run of scripts/build costs about 20 s here.
// - with `--load`, rate limits sized for a crowd simulated from this one
//   machine (LOAD_LIMITS): every simulated buyer comes from 127.0.0.1, so
//   the per-address limit meant for one real client would stop the crowd
//   at its 100th request. The per-buyer limit stays as deployed: each
//   simulated buyer is its own buyer. The limits are the platform's rate
//   limiting bindings, configured as deployed ones are; no request can
//   turn them off.
//
// Usage: node scripts/dev-config.mjs [--load] > FILE (in the repository's
// root, so that `main` and .dev.vars resolve as they do for wrangler.toml).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

/** The load profile's policies, in RATE_LIMITS' grammar: ip 20,000 a second
 * (far more than one machine's wrangler dev answers), admin 50 a second
 * (the load tool's stats polls and an open console), buyer as deployed. */
export const LOAD_LIMITS = "ip=200000/10;buyer=20/10;admin=3000/60";

/** `ip=100/10;...` as { ip: { limit, period }, ... }. */
export function parsePolicies(text) {
  return Object.fromEntries(text.split(";").map((p) => {
    const m = /^\s*(\w+)=(\d+)\/(\d+)\s*$/.exec(p);
    if (!m) throw new Error(`a policy that does not parse: ${p}`);
    return [m[1], { limit: Number(m[2]), period: Number(m[3]) }];
  }));
}

/** The config text for `profile` ("deployed" or "load") from wrangler.toml's text. */
export function devConfig(toml, profile) {
  const lines = toml.split("\n");
  const out = ["# Made by scripts/dev from wrangler.toml (scripts/dev-config.mjs); do not edit.", `# Profile: ${profile}.`];
  const policies = profile === "load" ? parsePolicies(LOAD_LIMITS) : null;
  let inBuild = false;
  let binding = null;
  for (const line of lines) {
    const header = /^\s*\[/.test(line);
    if (header) inBuild = line.trim() === "[build]";
    if (inBuild) continue;
    const name = /^\s*name = "RATE_LIMIT_(\w+)"/.exec(line);
    if (name) binding = name[1].toLowerCase();
    if (policies && /^\s*simple = /.test(line)) {
      const p = policies[binding];
      if (!p) throw new Error(`no load policy for the rate limit binding of ${binding}`);
      out.push(`simple = { limit = ${p.limit}, period = ${p.period} }`);
      binding = null;
      continue;
    }
    if (policies && /^RATE_LIMITS = /.test(line)) {
      out.push(`RATE_LIMITS = "${LOAD_LIMITS}"`);
      continue;
    }
    out.push(line);
  }
  return out.join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const profile = process.argv.includes("--load") ? "load" : "deployed";
  process.stdout.write(devConfig(readFileSync(join(root, "wrangler.toml"), "utf8"), profile));
}
