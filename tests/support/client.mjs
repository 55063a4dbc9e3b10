// A small HTTP client for the gate's API, used by the tests and benchmarks.
import { randomUUID } from "node:crypto";

export const ADMIN_TOKEN = "test-admin-token";

export function client(base, adminToken = ADMIN_TOKEN) {
  const json = async (r) => {
    const text = await r.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = { unparsed: text };
    }
    return { status: r.status, headers: r.headers, body };
  };
  const admin = { "content-type": "application/json", authorization: `Bearer ${adminToken}` };
  const buyerHeaders = (buyer, key) => ({
    "content-type": "application/json",
    "x-buyer-id": buyer,
    ...(key === undefined ? {} : { "idempotency-key": `"${key}"` }),
  });
  return {
    base,
    raw: (path, init) => fetch(base + path, init).then(json),
    put: (product, settings) =>
      fetch(`${base}/admin/products/${product}`, { method: "PUT", headers: admin, body: JSON.stringify(settings) }).then(json),
    restock: (product, units) =>
      fetch(`${base}/admin/products/${product}/restock`, { method: "POST", headers: admin, body: JSON.stringify({ units }) }).then(json),
    stats: (product) => fetch(`${base}/admin/products/${product}/stats`, { headers: admin }).then(json),
    product: (product) => fetch(`${base}/api/products/${product}`).then(json),
    reserve: (product, buyer, quantity, key = randomUUID()) =>
      fetch(`${base}/api/products/${product}/reservations`, {
        method: "POST",
        headers: buyerHeaders(buyer, key),
        body: JSON.stringify({ quantity }),
      }).then(json),
    reservation: (product, buyer, rid) =>
      fetch(`${base}/api/products/${product}/reservations/${rid}`, { headers: { "x-buyer-id": buyer } }).then(json),
    confirm: (product, buyer, rid, payment_ref = `pay-${rid}`) =>
      fetch(`${base}/api/products/${product}/reservations/${rid}/confirm`, {
        method: "POST",
        headers: buyerHeaders(buyer),
        body: JSON.stringify({ payment_ref }),
      }).then(json),
    cancel: (product, buyer, rid) =>
      fetch(`${base}/api/products/${product}/reservations/${rid}/cancel`, {
        method: "POST",
        headers: buyerHeaders(buyer),
      }).then(json),
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

/** A seeded generator (mulberry32), so every test's inputs can be replayed. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
