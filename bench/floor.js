// The JS hop of bench/baseline/ceiling.js, and the same hop with what a
// buyer's read of its hold cannot leave out, for bench/floor.mjs. Every
// request goes to one object.
//   /hop      the ceiling's hop, as it is
//   /limited  RATE_LIMIT_IP and RATE_LIMIT_BUYER asked, then the hop
//   /command  the limits, then the read as a command in a request of its
//             own (a field of JSON, as the gate sends it), which the object
//             parses and answers with its hold as JSON
//   /rpc      /command over Durable Object RPC: the object's `command`
//             method takes the command's JSON and returns the answer's
//             status and body, and the Worker makes the response
//   /duties   /command with the gate's own duties done in JS, as a JS gate
//             would do them, with a synchronous HMAC-SHA256 (below): the
//             buyer's HS256 token verified (its key id, signature,
//             audience and expiry) before the buyer's limit, which is
//             keyed by its subject; the reservation id in the path decoded
//             through the gate's keyed permutation (four HMAC-SHA256
//             rounds, `src/ids.rs`); the object finds the hold by id and
//             owner, and answers it under the id the buyer sent
// and two answers of the edge alone, beside the ceiling's plain Worker:
//   /plain    the ceiling's Worker alone, as it is
//   /product  a product read: the client's limit, then the product's JSON
//             from the isolate's memory, as the gate answers it
//   /soldout  a reserve of a sold-out product: the client's limit, the body
//             read, the buyer's token verified and its limit, the body and
//             the idempotency key checked, then the refusal as the gate's
//             problem document

import { DurableObject } from "cloudflare:workers";

const HOLD = { reservation_id: "3f9c1d2e4b5a6978", status: "held", quantity: 1, expires_at_ms: 1_900_000_000_000 };
// The hold's internal id. `startFloor` (bench/ceiling.mjs) gives the keys
// (TOKEN_KID, TOKEN_SECRET, ID_KEY) and reads the hold's id at /duties-id/7.
const HOLD_ID = 7;

// HMAC-SHA256 in plain JS, each key's inner and outer states computed
// once, as the gate's Rust does (`hmac::Hmac` cloned per use): in V8's JIT
// costs less than node:crypto's `createHmac` (under nodejs_compat), which
// builds an object per use: with it, /duties took 351 us of workerd CPU a
// request against the hop's 179, one 2 s run.
const K = Int32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = Int32Array.from([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
const w = new Int32Array(64);
/** One SHA-256 compression of the 16 words `m` into `h`. */
function compress(h, m) {
  for (let i = 0; i < 16; i++) w[i] = m[i];
  for (let i = 16; i < 64; i++) {
    const x = w[i - 15], y = w[i - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
  }
  let a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (let i = 0; i < 64; i++) {
    const t1 = (k + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
    const t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    k = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}
// Scratch space, reused: no allocation per HMAC.
const h = new Int32Array(8);
const m = new Int32Array(16);
const bytes = new Uint8Array(1024);
/** HMAC-SHA256 of the inner digest now in `h`: the outer hash, into `h`. */
function outer(key) {
  for (let i = 0; i < 8; i++) m[i] = h[i];
  m[8] = 0x80000000;
  m.fill(0, 9, 15);
  m[15] = (64 + 32) * 8;
  h.set(key.outer);
  compress(h, m);
}
/** HMAC-SHA256 of `bytes[0..len]` (at most 1,015 bytes), into `h`. */
function hmacBytes(key, len) {
  bytes.fill(0, len, (Math.ceil((len + 9) / 64) * 64));
  bytes[len] = 0x80;
  const blocks = Math.ceil((len + 9) / 64);
  const last = blocks * 64;
  const bits = (64 + len) * 8;
  bytes[last - 4] = bits >>> 24; bytes[last - 3] = (bits >>> 16) & 255; bytes[last - 2] = (bits >>> 8) & 255; bytes[last - 1] = bits & 255;
  h.set(key.inner);
  for (let off = 0; off < last; off += 64) {
    for (let i = 0, o = off; i < 16; i++, o += 4) m[i] = (bytes[o] << 24) | (bytes[o + 1] << 16) | (bytes[o + 2] << 8) | bytes[o + 3];
    compress(h, m);
  }
  outer(key);
}
function hmacKey(secret) {
  const key = new TextEncoder().encode(secret);
  const pad = (x) => {
    for (let i = 0; i < 16; i++) m[i] = x * 0x01010101;
    for (let i = 0; i < key.length; i++) m[i >> 2] ^= key[i] << (24 - 8 * (i & 3));
    const state = IV.slice();
    compress(state, m);
    return state;
  };
  return { inner: pad(0x36), outer: pad(0x5c) };
}

let idKey;
let tokenKey;
/** The Feistel round: the first word of HMAC(round byte ‖ half, big-endian). */
const round = (r, half) => {
  m[0] = (r << 24) | (half >>> 8);
  m[1] = ((half & 255) << 24) | 0x800000;
  m.fill(0, 2, 15);
  m[15] = (64 + 5) * 8;
  h.set(idKey.inner);
  compress(h, m);
  outer(idKey);
  return h[0] >>> 0;
};
function encodeId(id) {
  let [left, right] = [Math.floor(id / 2 ** 32), id >>> 0];
  for (let r = 0; r < 4; r++) [left, right] = [right, (left ^ round(r, right)) >>> 0];
  return left.toString(16).padStart(8, "0") + right.toString(16).padStart(8, "0");
}
function decodeId(text) {
  if (!/^[0-9a-f]{16}$/.test(text)) return null;
  let [left, right] = [parseInt(text.slice(0, 8), 16), parseInt(text.slice(8), 16)];
  for (let r = 3; r >= 0; r--) [right, left] = [left, (right ^ round(r, left)) >>> 0];
  return left * 2 ** 32 + right;
}
// Base64url decoded in plain JS, into scratch space: `atob` (after two
// replaces) and `encodeInto` are calls into the runtime, and made the
// token's parse 21 us a read in `bench/profile.mjs floor-duties`.
const B64 = new Int8Array(128).fill(-1);
for (let i = 0; i < 64; i++) B64["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".charCodeAt(i)] = i;
const decoded = new Uint8Array(768);
/** Decodes `text[from..to]` into `decoded`: its length, or -1. */
function unbase64url(text, from, to) {
  let n = 0, acc = 0, bits = 0;
  if (to - from > 1024) return -1;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? B64[c] : -1;
    if (v < 0) return -1;
    acc = ((acc << 6) | v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      decoded[n++] = (acc >> bits) & 255;
    }
  }
  return n;
}
/** A decoded JSON part of the token (ASCII, as the gate's tokens are). */
function jsonPart(text, from, to) {
  const n = unbase64url(text, from, to);
  if (n < 0) return null;
  return JSON.parse(String.fromCharCode.apply(null, decoded.subarray(0, n)));
}
/** The buyer a bearer HS256 token names, or null. */
function verifyToken(env, authorization) {
  try {
    return tokenBuyer(env, authorization);
  } catch {
    return null; // not JSON
  }
}
function tokenBuyer(env, authorization) {
  if (authorization === null || !authorization.startsWith("Bearer ") || authorization.length > 1000) return null;
  const first = authorization.indexOf(".", 7);
  const second = first < 0 ? -1 : authorization.indexOf(".", first + 1);
  if (second < 0 || authorization.indexOf(".", second + 1) >= 0) return null;
  const header = jsonPart(authorization, 7, first);
  if (header === null || header.alg !== "HS256" || header.kid !== env.TOKEN_KID) return null;
  // The signing input is ASCII (base64url and a dot): its bytes are its
  // char codes.
  for (let i = 7; i < second; i++) bytes[i - 7] = authorization.charCodeAt(i);
  hmacBytes(tokenKey, second - 7);
  if (unbase64url(authorization, second + 1, authorization.length) !== 32) return null;
  let differ = 0;
  for (let i = 0; i < 32; i++) differ |= decoded[i] ^ ((h[i >> 2] >>> (24 - 8 * (i & 3))) & 255);
  if (differ !== 0) return null;
  const claims = jsonPart(authorization, first + 1, second);
  if (claims === null || claims.aud !== "flashgate" || !(claims.exp * 1000 > Date.now()) || typeof claims.sub !== "string") return null;
  return claims.sub;
}

const holds = new Map([[HOLD_ID, { buyer: "reader", view: HOLD }]]);
// The product as the edge keeps it, in the shape and size of the gate's
// (openapi.yaml, `Product`), and its sold-out refusal.
const PRODUCT = JSON.stringify({
  product_id: "p1", state: "open", stock_total: 1000, available: 0, held: 0, sold: 1000,
  opens_at: "2026-12-06T00:00:00.000Z", opens_at_ms: 1_796_515_200_000, closes_at: null, closes_at_ms: null,
  per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 120_000, shards: 1, admit_per_s: null, prequeue_ms: 0,
  ticket_ttl_ms: 60_000, idem_window_ms: 600_000, reservations_max: 200_000, attempts_per_window_max: 20,
  attempt_window_ms: 10_000, face: null, lottery_commitment: null, lottery_key: null, pow: null,
});
const products = new Map([["p1", { body: PRODUCT, soldOut: true }]]);
const SOLD_OUT = JSON.stringify({ type: "https://flashgate.dev/problems/sold_out", title: "Sold out", status: 409, code: "sold_out", detail: "no unit of p1 is available" });
export class Ceiling extends DurableObject {
  command(command) {
    const { buyer, reservation_id } = JSON.parse(command).GetReservation;
    if (buyer !== "reader" || reservation_id !== 7) return [404, "unknown"];
    return [200, JSON.stringify(HOLD)];
  }
  async fetch(req) {
    const command = req.headers.get("flashgate-command");
    if (command === null) return new Response("ok");
    const parsed = JSON.parse(command);
    const { buyer, reservation_id } = parsed.GetReservation;
    if (req.url.endsWith("/duties")) {
      // The id as the buyer sent it, which the Worker decoded: the leanest
      // a gate can be, where flashgate's object encodes it again.
      const hold = holds.get(reservation_id);
      if (hold === undefined || hold.buyer !== buyer) return new Response("unknown", { status: 404 });
      return new Response(JSON.stringify({ ...hold.view, reservation_id: parsed.shown }), { headers: { "content-type": "application/json" } });
    }
    if (buyer !== "reader" || reservation_id !== 7) return new Response("unknown", { status: 404 });
    return new Response(JSON.stringify(HOLD), { headers: { "content-type": "application/json" } });
  }
}
/** The client's limit, keyed by its address, as the gate's first step. */
const clientLimit = (env, req) => env.RATE_LIMIT_IP.limit({ key: req.headers.get("cf-connecting-ip") ?? "127.0.0.1" });
const ids = new Map();
export default {
  async fetch(req, env) {
    const path = new URL(req.url).pathname;
    if (path === "/plain") return new Response("ok");
    if (path === "/product") {
      const ip = await clientLimit(env, req);
      if (!ip.success) return new Response("limited", { status: 429 });
      const product = products.get("p1");
      return new Response(product.body, { headers: { "content-type": "application/json", "cache-control": "public, max-age=1", "x-content-type-options": "nosniff" } });
    }
    idKey ??= hmacKey(env.ID_KEY);
    tokenKey ??= hmacKey(env.TOKEN_SECRET);
    if (path.startsWith("/duties-id/")) return new Response(encodeId(Number(path.slice("/duties-id/".length))));
    let id = ids.get("p1");
    if (id === undefined) ids.set("p1", (id = env.CEILING.idFromName("p1")));
    if (path === "/soldout") {
      const ip = await clientLimit(env, req);
      if (!ip.success) return new Response("limited", { status: 429 });
      const body = await req.text();
      const buyer = verifyToken(env, req.headers.get("authorization"));
      if (buyer === null) return new Response("unauthorized", { status: 401 });
      const limit = await env.RATE_LIMIT_BUYER.limit({ key: buyer });
      if (!limit.success) return new Response("limited", { status: 429 });
      let quantity;
      try {
        ({ quantity } = JSON.parse(body));
      } catch {
        return new Response("bad body", { status: 400 });
      }
      const key = req.headers.get("idempotency-key");
      if (!Number.isInteger(quantity) || quantity < 1 || key === null || !/^"[\x21\x23-\x7e]{1,64}"$/.test(key)) return new Response("bad request", { status: 400 });
      if (!products.get("p1").soldOut) return new Response("not sold out", { status: 500 });
      return new Response(SOLD_OUT, { status: 409, headers: { "content-type": "application/problem+json", "x-content-type-options": "nosniff" } });
    }
    if (path.startsWith("/duties/")) {
      const ip = await clientLimit(env, req);
      if (!ip.success) return new Response("limited", { status: 429 });
      const buyer = verifyToken(env, req.headers.get("authorization"));
      if (buyer === null) return new Response("unauthorized", { status: 401 });
      const limit = await env.RATE_LIMIT_BUYER.limit({ key: buyer });
      if (!limit.success) return new Response("limited", { status: 429 });
      const shown = path.slice("/duties/".length);
      const rid = decodeId(shown);
      if (rid === null) return new Response("bad id", { status: 400 });
      const command = JSON.stringify({ GetReservation: { product_id: "p1", buyer, reservation_id: rid }, shown });
      return env.CEILING.get(id).fetch("https://product-gate/duties", { method: "POST", headers: { "flashgate-command": command } });
    }
    if (path !== "/hop") {
      const ip = await clientLimit(env, req);
      const buyer = await env.RATE_LIMIT_BUYER.limit({ key: "reader" });
      if (!ip.success || !buyer.success) return new Response("limited", { status: 429 });
    }
    // The hop as the ceiling makes it: the id derived per request.
    if (path === "/hop") return env.CEILING.get(env.CEILING.idFromName("p1")).fetch(req);
    if (path !== "/command" && path !== "/rpc") return env.CEILING.get(id).fetch(req);
    const command = JSON.stringify({ GetReservation: { product_id: "p1", buyer: "reader", reservation_id: 7 } });
    if (path === "/rpc") {
      const [status, body] = await env.CEILING.get(id).command(command);
      return new Response(body, { status, headers: { "content-type": "application/json" } });
    }
    return env.CEILING.get(id).fetch("https://product-gate/command", { method: "POST", headers: { "flashgate-command": command } });
  },
};
