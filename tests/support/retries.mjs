// The end-to-end tests' clients send a request again after a network error
// or a hang (`fetchAgain` in client.mjs), as a buyer's client would with
// the same key. That keeps a test's requests safe, but it would also let a
// gate that resets connections under load pass unseen. So a test fails if
// any request was sent again during it, unless the attempt that failed was
// in flight to a gate the test itself had stopped or killed (runtime.mjs's
// `gateOutages`): a kill in the middle of a load cuts the requests in
// flight, and those are allowed their retries, around the kill and no
// other time. A test file that uses the clients imports this module, as
// system.mjs does for every test it runs.
import { after, afterEach } from "node:test";
import { networkRetries } from "./client.mjs";
import { gateOutages } from "./runtime.mjs";

/** How long the clients keep an idle connection open. */
const IDLE_KEEP_MS = 1_000;

// workerd closes a keep-alive connection idle for 5 s, without saying so
// in a Keep-Alive header, and node's fetch keeps one for 4 s: a request
// sent on a connection in the last of those 4 s, on a machine whose event
// loop runs a second late, meets the close, and is retried. That is the
// client's doing, not the gate's, so the clients keep idle connections
// IDLE_KEEP_MS instead, 4 s inside workerd's close. Node's fetch takes its
// dispatcher from this symbol (undici's, shared by every copy of it), made
// by its first fetch; a new one of the same class replaces it.
const DISPATCHER = Symbol.for("undici.globalDispatcher.1");
await fetch("data:,").then((r) => r.arrayBuffer());
const Agent = globalThis[DISPATCHER]?.constructor;
if (Agent?.name !== "Agent") throw new Error("node's fetch has no undici Agent to configure; see tests/support/retries.mjs");
globalThis[DISPATCHER] = new Agent({ keepAliveTimeout: IDLE_KEEP_MS, keepAliveMaxTimeout: IDLE_KEEP_MS });

/** Retries listed in a failure; the rest are counted. */
const LISTED_MAX = 20;

/** Whether the attempt `r` failed because the test had stopped its gate:
 * the attempt was sent before a gate answered on its url again, and failed
 * after that gate's stop began. */
const duringAnOutage = (r) => gateOutages.some((o) => r.url.startsWith(`${o.url}/`) && r.failedAt >= o.from && r.sentAt <= o.to);

const clock = (ms) => new Date(ms).toISOString().slice(11, 23);
const requests = (n) => (n === 1 ? "1 request was" : `${n} requests were`);

let checked = 0;

/** Fails if a retry since the last check is not explained by a stop of its
 * gate; names each such request, how its attempt failed, and when. */
function noRetries(where) {
  const fresh = networkRetries.slice(checked);
  checked = networkRetries.length;
  const unexplained = fresh.filter((r) => !duringAnOutage(r));
  const explained = fresh.length - unexplained.length;
  if (explained > 0) console.log(`retries: ${requests(explained)} sent again after the test stopped the gate (${where})`);
  if (unexplained.length === 0) return;
  const lines = unexplained
    .slice(0, LISTED_MAX)
    .map((r) => `  ${r.method} ${r.url}: ${r.error} on attempt ${r.attempt} of ${r.attempts}, sent ${clock(r.sentAt)}, failed ${clock(r.failedAt)}`);
  if (unexplained.length > LISTED_MAX) lines.push(`  and ${unexplained.length - LISTED_MAX} more`);
  throw new Error(
    `${requests(unexplained.length)} sent again after a network error or a hang, with the gate up (${where}); ` +
      `a gate that resets connections would pass unseen behind the retries:\n${lines.join("\n")}`,
  );
}

afterEach((t) => noRetries(`in the test "${t?.name ?? "?"}"`));
// What the file's own hooks sent (a shared system's setup, say).
after(() => noRetries("in the file's hooks"));
