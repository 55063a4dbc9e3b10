// What a buyer token's proof costs the edge: workerd's CPU per request for
// a reserve of a sold-out product (answered at the edge, after the token's
// proof and before any object) carrying an HS256 token (the MAC in the
// wasm), a provider's RS256 or ES256 token (the claims in the wasm, the
// signature by WebCrypto, src/wasm/edge/verify.rs), and each of them
// forged (its signature refused: the proof alone, and a 401). The
// differences from HS256's row are the verify's cost. Beside it, what importing a key costs against a verify in
// Node's WebCrypto, which is why the edge imports each key once per isolate.
//
//   node bench/tokens.mjs       BENCH_RUNS rounds (default 5) of
//                               BENCH_REQUESTS requests a row (default 2000)
//
// Every request carries a token of its own, made before the round, so that
// the load generator signs nothing while workerd's CPU is read. Never fails
// on speed; exits non-zero only when a run could not be made.
import { cpus } from "node:os";
import { webcrypto } from "node:crypto";
import { cpuUs, median } from "./load.mjs";
import { client, json, pool } from "../tests/support/client.mjs";
import { buyerToken } from "../tests/support/keys.mjs";
import { claims, ISSUER, joseToken, jwks, signingKey } from "../tests/support/provider.mjs";
import { gateVars, startGate } from "../tests/support/runtime.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
// Enough requests that the CPU, read in clock ticks of 10 ms, is exact to
// a few per cent.
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 2000);
const CONCURRENCY = 16;

const rsa = signingKey("RS256", "bench-rsa");
const ec = signingKey("ES256", "bench-ec");
const gate = await startGate({ vars: gateVars({ overrides: { BUYER_TOKEN_JWKS: jwks([rsa, ec]), BUYER_TOKEN_ISSUER: ISSUER } }) });
const api = client(gate.url);
console.log(`machine: ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; workerd pid ${gate.proc.pid}; ${new Date().toISOString()}`);

const P = "bench-sold-out";
/** workerd's CPU µs per reserve of the sold-out product, one per token. */
async function cpuPerRequest(tokens, expect) {
  const before = cpuUs(gate.proc.pid);
  const statuses = {};
  await pool(tokens.map((t, i) => async () => {
    const r = await fetch(`${gate.url}/api/products/${P}/reservations`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${t}`, "idempotency-key": `"k${i}"` },
      body: '{"quantity":1}',
    }).then(json);
    const key = `${r.status} ${r.body?.code}`;
    statuses[key] = (statuses[key] ?? 0) + 1;
  }), CONCURRENCY);
  const cpu = cpuUs(gate.proc.pid) - before;
  if (statuses[expect] !== tokens.length) throw new Error(`want ${expect} each time: ${JSON.stringify(statuses)}`);
  return cpu / tokens.length;
}

/** Median µs of `n` awaited calls of `f` in this process. */
async function timed(n, f) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await f(i);
    times.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return median(times);
}

try {
  if ((await api.put(P, { stock_total: 0 })).status !== 201) throw new Error("the product was not created");
  // A forged token differs from a valid one in one character inside its
  // signature (the last may only carry padding bits, which the gate
  // refuses as malformed before any verify): refused at the signature
  // check, it isolates the proof's cost from the sold-out answer's.
  const forge = (t) => {
    const i = t.length - 8;
    return t.slice(0, i) + (t[i] === "A" ? "B" : "A") + t.slice(i + 1);
  };
  const kinds = {
    HS256: { make: (i, r) => buyerToken(`hs-${r}-${i}`), expect: "409 sold_out" },
    RS256: { make: (i, r) => joseToken(rsa, claims(`auth0|rs-${r}-${i}`)), expect: "409 sold_out" },
    ES256: { make: (i, r) => joseToken(ec, claims(`auth0|es-${r}-${i}`)), expect: "409 sold_out" },
    "HS256, forged": { make: (i, r) => forge(buyerToken(`hs-${r}-${i}`)), expect: "401 token_invalid" },
    "RS256, forged": { make: async (i, r) => forge(await joseToken(rsa, claims(`auth0|rs-${r}-${i}`))), expect: "401 token_invalid" },
    "ES256, forged": { make: async (i, r) => forge(await joseToken(ec, claims(`auth0|es-${r}-${i}`))), expect: "401 token_invalid" },
  };
  const figures = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
  for (let r = -1; r < RUNS; r++) {
    for (const [name, kind] of Object.entries(kinds)) {
      const n = r < 0 ? 50 : REQUESTS; // round -1 warms each path
      const tokens = await Promise.all(Array.from({ length: n }, (_, i) => kind.make(i, r)));
      const cpu = await cpuPerRequest(tokens, kind.expect);
      if (r >= 0) figures[name].push(cpu);
    }
  }
  // Each round measures every row once, one after the other; a row's cost
  // over HS256's is the median of its differences within a round, which a
  // machine whose speed drifts from round to round disturbs less than a
  // difference of medians.
  const base = (name) => figures[name.endsWith("forged") ? "HS256, forged" : "HS256"];
  console.log(`\nworkerd CPU per sold-out reserve answered at the edge, by its token (${REQUESTS} requests × ${RUNS} rounds, medians):`);
  console.log("| token | workerd CPU µs/request | over HS256's, within a round |");
  console.log("|---|---|---|");
  for (const [name, v] of Object.entries(figures)) {
    const over = median(v.map((x, r) => x - base(name)[r]));
    console.log(`| ${name} | ${median(v).toFixed(0)} | ${name.startsWith("HS256") ? "-" : `${over >= 0 ? "+" : ""}${over.toFixed(0)} µs`} |`);
  }

  // Import against verify, in Node's WebCrypto (workerd's is BoringSSL,
  // Node's OpenSSL: the same order of magnitude).
  const data = new TextEncoder().encode("header.claims");
  console.log("\nNode's WebCrypto on this machine, median µs of 500 calls:");
  console.log("| key | importKey | verify |");
  console.log("|---|---|---|");
  for (const [key, alg, verifyAlg] of [
    [rsa, { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, { name: "RSASSA-PKCS1-v1_5" }],
    [ec, { name: "ECDSA", namedCurve: "P-256" }, { name: "ECDSA", hash: "SHA-256" }],
  ]) {
    const imported = await webcrypto.subtle.importKey("jwk", key.jwk, alg, false, ["verify"]);
    const priv = await webcrypto.subtle.importKey("jwk", key.privateKey.export({ format: "jwk" }), alg, false, ["sign"]);
    const sig = await webcrypto.subtle.sign(verifyAlg, priv, data);
    const importUs = await timed(500, () => webcrypto.subtle.importKey("jwk", key.jwk, alg, false, ["verify"]));
    const verifyUs = await timed(500, () => webcrypto.subtle.verify(verifyAlg, imported, sig, data));
    console.log(`| ${key.alg} | ${importUs.toFixed(0)} | ${verifyUs.toFixed(0)} |`);
  }
} finally {
  await gate.stop();
}
