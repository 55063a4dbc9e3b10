// A small HTTP client for the gate's API, used by the tests and benchmarks.
// Buyers prove themselves with tokens minted as the shop would mint them;
// confirmations are signed as the shop's payment backend signs them.
import { randomUUID } from "node:crypto";
import { ADMIN_TOKEN, PAYMENT_KEYS, buyerToken, signedConfirm } from "./keys.mjs";

export { ADMIN_TOKEN };

export const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

export async function json(r) {
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { unparsed: text };
  }
  return { status: r.status, headers: r.headers, body };
}

/** How long a test waits for something that must happen in the end (an
 * expired hold's unit back at the edge, a level the edge asks, a report in
 * the stats): so long that only what never happens misses it, however
 * loaded the machine. How long it took is a figure for a benchmark, which
 * a test may log but does not assert. */
export const EVENTUALLY_MS = 60_000;

/**
 * Every attempt the clients sent again after a network error or a hang,
 * in order: `{ method, url, error, attempt, attempts, sentAt, failedAt }`
 * (the times in ms since the epoch). The end-to-end tests fail a test
 * during which one was sent while its gate was up
 * (tests/support/retries.mjs).
 */
export const networkRetries = [];

/**
 * `fetch` for requests that are safe to repeat (reads, and writes with an
 * idempotency key or a replayable signature): a network error, or no answer
 * within `ATTEMPT_MS` (undici's fetch has been seen to wait forever on a
 * connection the server reset), is retried with the same request, as a
 * real client retries with the same key. Answers, whatever their status,
 * are never retried. Each retry is logged and kept in `networkRetries`, so
 * that resets stay visible and a test can refuse them.
 */
const ATTEMPT_MS = 30_000;
export async function fetchAgain(url, init = {}, attempts = 3) {
  for (let i = 1; ; i++) {
    const sentAt = Date.now();
    try {
      return await fetch(url, { ...init, signal: AbortSignal.timeout(ATTEMPT_MS) });
    } catch (e) {
      if (i >= attempts) throw e;
      const method = init.method ?? "GET";
      const error = e.cause?.code ?? e.name;
      networkRetries.push({ method, url: String(url), error, attempt: i, attempts, sentAt, failedAt: Date.now() });
      console.error(`client: ${method} ${url}: ${error}; retrying (${i}/${attempts - 1})`);
      await sleep(100 * i);
    }
  }
}

export function client(base, adminToken = ADMIN_TOKEN) {
  const admin = { "content-type": "application/json", authorization: `Bearer ${adminToken}` };
  // One token per buyer per client, as a browser keeps its session.
  const tokens = new Map();
  const tokenOf = (buyer) => {
    if (!tokens.has(buyer)) tokens.set(buyer, buyerToken(buyer));
    return tokens.get(buyer);
  };
  const asBuyer = (buyer, extra = {}) => ({ authorization: `Bearer ${tokenOf(buyer)}`, ...extra });
  const base_ = (product) => `${base}/api/products/${product}`;
  return {
    base,
    tokenOf,
    raw: (path, init) => fetch(base + path, init).then(json),
    put: (product, settings) =>
      fetchAgain(`${base}/admin/products/${product}`, { method: "PUT", headers: admin, body: JSON.stringify(settings) }).then(json),
    restock: (product, units) =>
      fetch(`${base}/admin/products/${product}/restock`, { method: "POST", headers: admin, body: JSON.stringify({ units }) }).then(json),
    void: (product, rid) => fetchAgain(`${base}/admin/products/${product}/reservations/${rid}/void`, { method: "POST", headers: admin }).then(json),
    stats: (product) => fetchAgain(`${base}/admin/products/${product}/stats`, { headers: admin }).then(json),
    product: (product) => fetchAgain(base_(product)).then(json),
    session: () => fetch(`${base}/api/session`, { method: "POST" }).then(json),
    reserve: (product, buyer, quantity, key = randomUUID(), extra = {}) =>
      fetchAgain(`${base_(product)}/reservations`, {
        method: "POST",
        headers: asBuyer(buyer, { "content-type": "application/json", "idempotency-key": `"${key}"`, ...extra }),
        body: JSON.stringify({ quantity }),
      }).then(json),
    /** Joins the product's waiting room; the body holds the ticket. */
    join: (product, buyer, extra = {}) => fetch(`${base_(product)}/queue`, { method: "POST", headers: asBuyer(buyer, extra) }).then(json),
    /** A proof-of-work challenge for the buyer's join. */
    challenge: (product, buyer, extra = {}) => fetchAgain(`${base_(product)}/queue/challenge`, { headers: asBuyer(buyer, extra) }).then(json),
    /** A ticket's standing in the waiting room. */
    standing: (product, buyer, ticket, extra = {}) =>
      fetchAgain(`${base_(product)}/queue`, { headers: asBuyer(buyer, { "flashgate-ticket": ticket, ...extra }) }).then(json),
    /** The waiting room's admission record, with the ticket's own place. */
    record: (product, buyer, ticket, extra = {}) =>
      fetchAgain(`${base_(product)}/queue/record`, { headers: asBuyer(buyer, { "flashgate-ticket": ticket, ...extra }) }).then(json),
    reservation: (product, buyer, rid) => fetchAgain(`${base_(product)}/reservations/${rid}`, { headers: asBuyer(buyer) }).then(json),
    /** A confirmation from the shop's payment backend, signed. */
    confirm: (product, buyer, rid, paymentRef = `pay-${rid}`, { keys = PAYMENT_KEYS } = {}) => {
      const { path, init } = signedConfirm(product, rid, { buyer, paymentRef, keys });
      return fetchAgain(base + path, init).then(json);
    },
    cancel: (product, buyer, rid) => fetchAgain(`${base_(product)}/reservations/${rid}/cancel`, { method: "POST", headers: asBuyer(buyer) }).then(json),
  };
}

/** Runs `tasks` (functions returning promises) with at most `limit` in flight. */
export async function pool(tasks, limit) {
  const results = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
}

/** The product's gate stats once its outbox is empty, or at `timeoutMs`
 * as they are then (the caller asserts the backlog). */
export async function drained(api, product, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = (await api.stats(product)).body;
    if (s.outbox.backlog === 0 || Date.now() > deadline) return s;
    await sleep(200);
  }
}

/** The state part of a product's gate stats: everything but the outcome
 * counters, the object's work telemetry (every stats read is itself a
 * command in a batch) and the outbox's delivery attempts, which go on while
 * no origin answers. */
export function stateOf(stats) {
  // `snapshots` counts the edges' snapshot fetches: telemetry, which grows
  // whenever an edge's copy is older than its freshness, as `work` does.
  const { counters, next_deadline_ms, outbox, work, snapshots, ...state } = stats;
  const { backlog, backlog_units, acked_seq } = outbox;
  return { ...state, outbox: { backlog, backlog_units, acked_seq } };
}
