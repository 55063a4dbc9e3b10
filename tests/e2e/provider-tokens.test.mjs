// Buyer tokens of the shop's identity provider, end to end: RS256 and
// ES256 tokens signed by two independent libraries (jose and PyJWT), checked
// by the gate up to the signature and verified by workerd's WebCrypto
// (docs/security.md). Each refusal is a 401 problem whose detail names the
// failing check, and changes nothing; a rotation of the provider's keys
// fails no request.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { UnsecuredJWT } from "jose";
import { json, sleep, stateOf } from "../support/client.mjs";
import * as keys from "../support/keys.mjs";
import { buyerIdOf, claims, ISSUER, joseToken, jwks, pyjwtTokens, signingKey } from "../support/provider.mjs";
import { why } from "../support/seed.mjs";
import { useGate, withGate } from "../support/system.mjs";

const b64url = (x) => Buffer.from(x).toString("base64url");

// The provider's keys: the current pair (-01), the next it publishes ahead
// of signing with them (-02), and a key of another provider's JWKS.
const rsa1 = signingKey("RS256", "rsa-2026-01");
const rsa2 = signingKey("RS256", "rsa-2026-02");
const ec1 = signingKey("ES256", "ec-2026-01");
const ec2 = signingKey("ES256", "ec-2026-02");
const foreign = signingKey("RS256", "rsa-other-tenant");
const JWKS = jwks([rsa1, ec1, rsa2, ec2]);

const system = useGate({ vars: { BUYER_TOKEN_JWKS: JWKS, BUYER_TOKEN_ISSUER: ISSUER } });

/** A reserve of one unit of `product` with `token`. */
const reserve = (product, token, key = randomBytes(6).toString("hex")) =>
  fetch(`${system.url}/api/products/${product}/reservations`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": `"${key}"` },
    body: '{"quantity":1}',
  }).then(json);

/** A provider-style subject: Auth0's `auth0|` and 24 hex digits. */
const auth0 = () => `auth0|${randomBytes(12).toString("hex")}`;

system.test("RS256 and ES256 tokens of jose and PyJWT are accepted, aud a string or an array, the buyer a provider's subject", async () => {
  const { api } = system;
  const P = "idp-accept";
  assert.equal((await api.put(P, { stock_total: 100, per_buyer_max: 1, quantity_max: 1 })).status, 201);
  const cases = [];
  for (const key of [rsa1, ec1]) {
    for (const aud of [keys.AUDIENCE, ["https://api.shop.example", keys.AUDIENCE]]) {
      for (const lib of ["jose", "pyjwt"]) cases.push({ name: `${lib} ${key.alg} aud ${JSON.stringify(aud)}`, key, lib, sub: auth0(), aud });
    }
  }
  // A subject that is a buyer id is the buyer itself.
  cases.push({ name: "jose ES256, a plain subject", key: ec1, lib: "jose", sub: `u-${randomBytes(4).toString("hex")}`, aud: keys.AUDIENCE });
  const py = pyjwtTokens(cases.filter((c) => c.lib === "pyjwt").map((c) => [c.key, claims(c.sub, { aud: c.aud })]));
  for (const c of cases) c.token = c.lib === "pyjwt" ? py.shift() : await joseToken(c.key, claims(c.sub, { aud: c.aud }));
  for (const c of cases) {
    const r = await reserve(P, c.token);
    assert.equal(r.status, 201, why(`${c.name} (sub ${c.sub}): ${JSON.stringify(r.body)}`));
    c.rid = r.body.reservation_id;
  }
  for (const c of cases) {
    // The same user is the same buyer whichever library signed: the other
    // library's token reads the reservation, and the per-buyer limit of 1
    // holds across them.
    const other = c.lib === "pyjwt" ? await joseToken(c.key, claims(c.sub)) : pyjwtTokens([[c.key, claims(c.sub)]])[0];
    const read = await fetch(`${system.url}/api/products/${P}/reservations/${c.rid}`, { headers: { authorization: `Bearer ${other}` } }).then(json);
    assert.equal(read.status, 200, why(`${c.name}: the other library's token of ${c.sub}: ${JSON.stringify(read.body)}`));
    const again = await reserve(P, other);
    assert.equal(again.body?.code, "buyer_limit", why(`${c.name}: a second unit for ${c.sub}: ${again.status} ${JSON.stringify(again.body)}`));
    // The shop's payment backend confirms as the buyer id it derives from
    // its own user id (docs/security.md).
    const buyer = buyerIdOf(c.sub);
    if (c.sub.startsWith("auth0|")) assert.match(buyer, /^h\.[\w-]{43}$/, c.name);
    const confirmed = await api.confirm(P, buyer, c.rid);
    assert.equal(confirmed.status, 200, why(`${c.name}: confirm as ${buyer} (sub ${c.sub}): ${JSON.stringify(confirmed.body)}`));
  }
  // Another user of the same provider is another buyer.
  const stranger = await joseToken(ec1, claims(auth0()));
  const read = await fetch(`${system.url}/api/products/${P}/reservations/${cases[0].rid}`, { headers: { authorization: `Bearer ${stranger}` } }).then(json);
  assert.equal(read.status, 404, why(`another user read ${cases[0].sub}'s reservation: ${JSON.stringify(read.body)}`));
  console.log(`provider tokens: ${cases.length} accepted (jose and PyJWT, RS256 and ES256); each confirmed as the buyer id the shop derives`);
});

system.test("each forged, altered, stale, foreign or oversized token is refused by name, and changes nothing", async () => {
  const { api } = system;
  const P = "idp-refuse";
  assert.equal((await api.put(P, { stock_total: 10, per_buyer_max: 2, quantity_max: 1 })).status, 201);
  assert.equal((await api.reserve(P, "alice", 1)).status, 201);
  const before = stateOf((await api.stats(P)).body);
  const now = Math.floor(Date.now() / 1000);
  const sub = auth0();
  const valid = await joseToken(rsa1, claims(sub));
  const [h, , s] = valid.split(".");
  const altered = b64url(JSON.stringify(claims(auth0())));
  // Alg confusion: an HS256 token naming the RSA key, its MAC keyed with
  // the public key's bytes, as a verifier that takes the header's alg
  // would check it.
  const confused = (secret) => {
    const input = `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT", kid: rsa1.kid }))}.${b64url(JSON.stringify(claims(sub)))}`;
    return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
  };
  const [pyExpired, pyFuture, pyIssuer, pyLarge, pyNoIss] = pyjwtTokens([
    [ec1, claims(sub, { iat: now - 7200, exp: now - 3600 })],
    [ec1, claims(sub, { nbf: now + 3600 })],
    [rsa1, claims(sub, { iss: "https://login.other-shop.example/" })],
    [rsa1, claims(sub, { groups: Array.from({ length: 400 }, (_, i) => `group-${i}-${"x".repeat(12)}`) })],
    [ec1, claims(sub, { iss: undefined })],
  ]);
  assert.ok(pyLarge.length > 8192, `the oversized token is ${pyLarge.length} bytes`);
  const cases = [
    ["alg confusion: HS256 keyed with the RSA key's PEM", confused(rsa1.publicKey.export({ format: "pem", type: "spki" })), "token_invalid", /alg is not the algorithm its key is pinned to/],
    ["alg confusion: HS256 keyed with the RSA key's JWK", confused(JSON.stringify(rsa1.jwk)), "token_invalid", /alg is not the algorithm its key is pinned to/],
    ["ES256 naming the RSA key", await joseToken(ec1, claims(sub), { kid: rsa1.kid }), "token_invalid", /alg is not the algorithm its key is pinned to/],
    ["alg none (jose's unsecured JWT)", new UnsecuredJWT(claims(sub)).encode(), "token_invalid", /alg is not one the gate accepts/],
    ["alg none naming a key", `${b64url(JSON.stringify({ alg: "none", kid: rsa1.kid }))}.${altered}.`, "token_invalid", /alg is not one the gate accepts/],
    ["a kid of another provider's JWKS", await joseToken(foreign, claims(sub)), "token_invalid", /key id is not one the gate accepts/],
    ["another provider's key under our kid", await joseToken({ ...foreign, kid: rsa1.kid }, claims(sub)), "token_invalid", /signature does not match/],
    ["a valid RS256 signature over altered claims", `${h}.${altered}.${s}`, "token_invalid", /signature does not match/],
    ["a valid ES256 signature over altered claims", (await joseToken(ec1, claims(sub))).replace(/\.[^.]+\./, `.${altered}.`), "token_invalid", /signature does not match/],
    ["expired", pyExpired, "token_expired", /has expired/],
    ["not yet valid", pyFuture, "token_invalid", /not valid yet/],
    ["a wrong iss", pyIssuer, "token_invalid", /iss is not the issuer the gate trusts/],
    ["no iss", pyNoIss, "token_invalid", /no iss claim/],
    ["a wrong aud", await joseToken(ec1, claims(sub, { aud: ["https://api.shop.example"] })), "token_invalid", /aud does not name this gate/],
    ["oversized", pyLarge, "token_invalid", /longer than 8192 bytes/],
  ];
  for (const [name, token, code, detail] of cases) {
    const r = await reserve(P, token);
    const said = `${name}: ${r.status} ${JSON.stringify(r.body)}; token ${token.slice(0, 120)}...`;
    assert.equal(r.status, 401, why(said));
    assert.equal(r.body?.code, code, why(said));
    assert.match(r.body?.detail ?? "", detail, why(said));
    assert.match(r.headers.get("content-type") ?? "", /application\/problem\+json/, said);
    for (const k of [rsa1, ec1, foreign]) assert.ok(!r.body.detail.includes(k.kid), `${name}: the detail names a key: ${r.body.detail}`);
  }
  assert.deepEqual(stateOf((await api.stats(P)).body), before, "a refused token changed the gate's state");
  // And the token they were forged from is good.
  assert.equal((await reserve(P, valid)).status, 201);
  console.log(`provider tokens: ${cases.length} forged or bad tokens refused, each by its check; the state unchanged`);
});

system.test("a rotation of the provider's keys, old and new side by side in the JWKS, fails no request", async () => {
  const { api } = system;
  const P = "idp-rotate";
  assert.equal((await api.put(P, { stock_total: 100_000, per_buyer_max: 1000, quantity_max: 1 })).status, 201);
  // The provider signs with -01 until T, then with -02; the JWKS holds
  // both throughout, as a provider publishes its next key ahead. Each
  // client signs with one library and one algorithm, for a new user each
  // request (a user's own pace is limited); its tokens are made ahead, so
  // that the loop only sends.
  const PER_PHASE = 120;
  const clients = [];
  for (const [old, next] of [[rsa1, rsa2], [ec1, ec2]]) {
    for (const lib of ["jose", "pyjwt"]) {
      const subs = Array.from({ length: 2 * PER_PHASE }, auth0);
      const specs = subs.map((sub, i) => [i < PER_PHASE ? old : next, claims(sub)]);
      const tokens = lib === "jose" ? await Promise.all(specs.map(([k, c]) => joseToken(k, c))) : pyjwtTokens(specs);
      clients.push({ lib, before: tokens.slice(0, PER_PHASE), after: tokens.slice(PER_PHASE) });
    }
  }
  const T = Date.now() + 2_000;
  const failures = [];
  const kids = new Set();
  let sent = 0;
  // Each client sends until 2 s past T, and at least 5 tokens of the new
  // keys however slow the machine; one that used its old tokens up waits
  // for T.
  const loop = async (c, i) => {
    let [b, a] = [0, 0];
    while (a < PER_PHASE && (Date.now() < T + 2_000 || a < 5)) {
      const early = Date.now() < T;
      if (early && b >= PER_PHASE) {
        await sleep(T - Date.now());
        continue;
      }
      const token = early ? c.before[b++] : c.after[a++];
      kids.add(JSON.parse(Buffer.from(token.split(".")[0], "base64url")).kid);
      const r = await reserve(P, token, `rot-${i}-${early ? "b" : "a"}${early ? b : a}`);
      sent++;
      if (r.status !== 201) failures.push(`${c.lib} ${early ? "before" : "after"} T: ${r.status} ${JSON.stringify(r.body)}`);
      await sleep(20);
    }
  };
  await Promise.all(clients.map(loop));
  assert.deepEqual(failures, [], why("a request failed across the rotation"));
  assert.deepEqual([...kids].sort(), [ec1.kid, ec2.kid, rsa1.kid, rsa2.kid].sort(), "tokens of every key were sent");
  console.log(`provider tokens: ${sent} reserves across the switch from -01 to -02; none failed`);
});

test("a provider configured wrong is refused: the gate serves no API and its log names the setting", async () => {
  const tooLarge = JSON.stringify({ keys: [{ ...rsa1.jwk, x5c: ["MII" + "Q".repeat(16 * 1024)] }] });
  const clash = jwks([{ ...rsa1, jwk: { ...rsa1.jwk, kid: keys.BUYER_TOKEN_KEYS.split(":")[0] } }]);
  const cases = [
    ["an oversized JWKS", { BUYER_TOKEN_JWKS: tooLarge, BUYER_TOKEN_ISSUER: ISSUER }, "BUYER_TOKEN_JWKS: the JWKS is longer than"],
    ["a JWKS without its issuer", { BUYER_TOKEN_JWKS: JWKS }, "BUYER_TOKEN_ISSUER: is required"],
    ["a kid of BUYER_TOKEN_KEYS in the JWKS", { BUYER_TOKEN_JWKS: clash, BUYER_TOKEN_ISSUER: ISSUER }, "BUYER_TOKEN_JWKS: key id b1 is both"],
    ["a private key in the JWKS", { BUYER_TOKEN_JWKS: jwks([{ ...ec1, jwk: ec1.privateKey.export({ format: "jwk" }) }]).replace('"kty"', `"kid":"${ec1.kid}","kty"`), BUYER_TOKEN_ISSUER: ISSUER }, `BUYER_TOKEN_JWKS: key ${ec1.kid} holds private key material`],
  ];
  for (const [name, vars, logged] of cases) {
    await withGate({ vars }, async ({ gate }) => {
      const r = await fetch(`${gate.url}/api/products/x`).then(json);
      assert.equal(r.status, 500, why(`${name}: ${JSON.stringify(r.body)}`));
      assert.equal(r.body.code, "misconfigured", name);
      const deadline = Date.now() + 5_000;
      while (!gate.stderr().includes(logged) && Date.now() < deadline) await sleep(50);
      assert.ok(gate.stderr().includes(`refusing to serve: ${logged}`), `${name}: the log should say ${JSON.stringify(logged)}: ${gate.stderr().slice(-500)}`);
      assert.ok(!gate.stderr().includes(ec1.privateKey.export({ format: "jwk" }).d), `${name}: the log names a private key`);
    });
  }
});
