// README.md's examples, run as they are written against a real gate and
// origin, so that the README cannot rot. A block fenced ```LANG readme NAME
// is run (js with node, python with python3, sh with sh -e), reading the
// ports and secrets from the environment as a shop's code would; a block
// fenced ```sh command is a command that needs a Cloudflare account or runs
// the project itself (scripts/dev, scripts/test, wrangler deploy) and is
// not run here, and ```text is a picture. Any other fenced block fails this
// test, as does a readme block this test does not know, so that no example
// is left unrun.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startGate, gateVars, ROOT } from "../support/runtime.mjs";
import { startOrigin } from "../support/origin.mjs";
import { client, sleep } from "../support/client.mjs";
// A test fails if its clients retried a request while the gate was up.
import "../support/retries.mjs";
import * as keys from "../support/keys.mjs";

/** Every fenced block of the README: its info string and its text. */
function blocks() {
  const text = readFileSync(join(ROOT, "README.md"), "utf8");
  return [...text.matchAll(/^```([^\n]*)\n([\s\S]*?)^```$/gm)].map(([, info, code]) => {
    const [lang, kind, name] = info.trim().split(/\s+/);
    return { info: info.trim(), lang, kind, name, code };
  });
}

/** The examples this test runs, by name, in the order it runs them. */
const RUN = ["secrets", "rotate", "face", "mint-at-origin", "reserve", "confirm", "idp-token", "orders"];

/** The examples of docs/security.md this test runs beside the README's
 * (fenced ```LANG example NAME): an HS256 token signed by hand, the
 * identity provider's JWKS stripped to fit a variable, and the buyer id a
 * shop derives from its user id. */
function docExamples() {
  const text = readFileSync(join(ROOT, "docs/security.md"), "utf8");
  const found = [...text.matchAll(/^```(\w+) example ([\w-]+)\n([\s\S]*?)^```$/gm)].map(([, lang, name, code]) => [name, { lang, name, code }]);
  const examples = Object.fromEntries(found);
  assert.deepEqual(Object.keys(examples).sort(), ["buyer-id", "mint-yourself", "strip-jwks"], "docs/security.md's examples");
  return examples;
}

const RUNNERS = {
  js: (dir, code) => {
    const file = join(dir, "example.mjs");
    writeFileSync(file, code);
    return ["node", [file]];
  },
  python: (dir, code) => ["python3", ["-c", code]],
  sh: (dir, code) => ["sh", ["-e", "-c", code]],
};

/** Runs one example in `dir` with `env`; resolves to its stdout, and fails
 * with its stderr if it exits non-zero. */
function run(example, dir, env) {
  const [cmd, args] = RUNNERS[example.lang](dir, example.code);
  return new Promise((ok, fail) => {
    execFile(cmd, args, { cwd: dir, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, encoding: "utf8", timeout: 30_000 }, (e, out, err) => {
      if (e) fail(new Error(`README example ${example.name} (${example.lang}) failed: ${e.message}\n${err}`));
      else ok(out);
    });
  });
}

/** `NAME=value` lines as an object. */
const envFile = (text) => Object.fromEntries(text.trim().split("\n").map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));

test("every fenced block of the README is an example this test runs, or a marked command", () => {
  const all = blocks();
  const picture = (b) => b.info === "text";
  const command = (b) => b.lang === "sh" && b.kind === "command" && b.name === undefined;
  const unknown = all.filter((b) => !picture(b) && !command(b) && !(b.kind === "readme" && RUN.includes(b.name)));
  assert.deepEqual(unknown.map((b) => b.info), [], "a README block that no test runs: fence it ```LANG readme NAME and run it here, ```sh command, or ```text for a picture");
  const named = all.filter((b) => b.kind === "readme").map((b) => b.name);
  assert.deepEqual([...named].sort(), [...RUN].sort(), "each example is in the README exactly once");
  for (const b of all.filter((b) => b.kind === "readme")) assert.ok(RUNNERS[b.lang], `no runner for ${b.lang}`);
});

test("the README's examples mint tokens, reserve, confirm and read the order back, with secrets made as it says", async () => {
  const example = { ...docExamples(), ...Object.fromEntries(blocks().filter((b) => b.kind === "readme").map((b) => [b.name, b])) };
  const dir = mkdtempSync(join(tmpdir(), "flashgate-readme-"));
  // The examples import the packages a shop would install (jose).
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));

  // Deploy: the secrets as the README generates them, and a payment key
  // set rotated as it rotates one. The gate and origin then run on them.
  await run(example.secrets, dir, {});
  const secrets = envFile(readFileSync(join(dir, "gate.secrets"), "utf8"));
  assert.deepEqual(Object.keys(secrets).sort(), ["ADMIN_TOKENS", "BUYER_TOKEN_KEYS", "FORWARD_KEYS", "ID_SECRET", "PAYMENT_KEYS"]);
  for (const [name, value] of Object.entries(secrets)) {
    assert.match(value, name === "ID_SECRET" ? /^[0-9a-f]{64}$/ : /^k1:[0-9a-f]{64}$/, `${name} as generated`);
  }
  const rotated = envFile(await run(example.rotate, dir, { PAYMENT_KEYS: secrets.PAYMENT_KEYS })).PAYMENT_KEYS;
  assert.match(rotated, /^k1:[0-9a-f]{64},k2@\d{13}:[0-9a-f]{64}$/, "the rotated set: the old key, and the new one with its activation");

  // The shop's identity provider: a P-256 signing key, published at a JWKS
  // URL as providers publish theirs (a certificate chain on each key, and
  // an encryption key beside), which docs/security.md's example strips.
  const ISSUER = "https://shop.eu.auth0.example/";
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const providerKey = { kid: "pY3n-2026-04", alg: "ES256" };
  const published = {
    keys: [
      { ...publicKey.export({ format: "jwk" }), ...providerKey, use: "sig", x5t: "q0bYtkqZ2VGGrmjZxY0_2Qlg5OA", x5c: ["MII" + "Q".repeat(1500)] },
      { ...generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey.export({ format: "jwk" }), kid: "enc-1", use: "enc", x5c: ["MII" + "Q".repeat(1500)] },
    ],
  };
  const jwksServer = createServer((req, res) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(published)));
  await new Promise((ok) => jwksServer.listen(0, "127.0.0.1", ok));
  const jwksText = (await run(example["strip-jwks"], dir, { JWKS_URL: `http://127.0.0.1:${jwksServer.address().port}/.well-known/jwks.json` })).trim();
  jwksServer.close();
  const stripped = JSON.parse(jwksText);
  assert.ok(jwksText.length < JSON.stringify(published).length / 2 && jwksText.length <= 5000, `the stripped JWKS is ${jwksText.length} bytes: ${jwksText}`);
  assert.deepEqual(stripped.keys.map((k) => [k.kid, k.alg, k.x5c]), [[providerKey.kid, "ES256", undefined]], "only the signing key, without its certificate chain");

  const origin = await startOrigin({ forwardKeys: secrets.FORWARD_KEYS, env: { BUYER_TOKEN_KEYS: secrets.BUYER_TOKEN_KEYS } });
  const vars = gateVars({ originUrl: origin.url, overrides: { ...secrets, PAYMENT_KEYS: rotated, BUYER_TOKEN_JWKS: jwksText, BUYER_TOKEN_ISSUER: ISSUER } });
  const gate = await startGate({ vars });
  try {
    const product = "readme-tee";
    const adminToken = secrets.ADMIN_TOKENS.slice(secrets.ADMIN_TOKENS.indexOf(":") + 1);
    const env = {
      GATE_URL: gate.url,
      ORIGIN_URL: origin.url,
      SHOP_TOKEN: keys.SHOP_TOKEN,
      READ_TOKEN: keys.READ_TOKEN,
      BUYER_TOKEN_KEY: secrets.BUYER_TOKEN_KEYS,
      PAYMENT_KEY: rotated.split(",")[0],
      PRODUCT: product,
    };

    // The product, created with its face as the README creates it, with
    // the generated admin token; the edge then serves the face.
    const created = JSON.parse(await run(example.face, dir, { ...env, ADMIN_TOKEN: adminToken }));
    assert.equal(created.stock_total, 10, `the generated admin token creates a product: ${JSON.stringify(created)}`);
    assert.deepEqual(created.face.name, { zh: "明前龙井", en: "Longjing tea, spring picking" });
    const shown = (await client(gate.url, adminToken).product(product)).body;
    assert.deepEqual(shown.face, created.face, "the edge serves the face it was given");

    // The shop's login, both ways; each token must be one the gate takes.
    const tokens = {
      alice: (await run(example["mint-at-origin"], dir, env)).trim(),
      bob: (await run(example["mint-yourself"], dir, env)).trim(),
    };
    for (const [buyer, token] of Object.entries(tokens)) {
      assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/, `${buyer}'s token is a JWT`);
      const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
      assert.equal(claims.sub, buyer);

      const held = JSON.parse(await run(example.reserve, dir, { ...env, TOKEN: token }));
      assert.equal(held.state, "held", `${buyer}'s reserve: ${JSON.stringify(held)}`);
      assert.match(held.reservation_id, /^[0-9a-f]{16}$/);
      const again = JSON.parse(await run(example.reserve, dir, { ...env, TOKEN: token }));
      assert.equal(again.reservation_id, held.reservation_id, "the same Idempotency-Key is the same reservation");

      const confirmEnv = { ...env, RESERVATION_ID: held.reservation_id, BUYER_ID: buyer };
      const answer = await run(example.confirm, dir, confirmEnv);
      const [status, ...rest] = answer.trim().split(" ");
      assert.equal(status, "200", `${buyer}'s confirm: ${answer}`);
      const confirmed = JSON.parse(rest.join(" "));
      assert.equal(confirmed.state, "confirmed");
      assert.equal(confirmed.payment_ref, "pay-4711");
      const replayed = await run(example.confirm, dir, confirmEnv);
      assert.equal(replayed.trim().split(" ")[0], "200", `a confirm sent again: ${replayed}`);
    }

    // A token of the identity provider, made by jose as the README makes
    // it: reserved with, and confirmed as the buyer id docs/security.md's
    // example computes from the user id.
    const idpToken = (await run(example["idp-token"], dir, {
      PROVIDER_PRIVATE_JWK: JSON.stringify({ ...privateKey.export({ format: "jwk" }), ...providerKey }),
      BUYER_TOKEN_ISSUER: ISSUER,
    })).trim();
    const idpClaims = JSON.parse(Buffer.from(idpToken.split(".")[1], "base64url").toString());
    assert.match(idpClaims.sub, /^auth0\|/, `a provider's subject: ${JSON.stringify(idpClaims)}`);
    const idpHeld = JSON.parse(await run(example.reserve, dir, { ...env, TOKEN: idpToken }));
    assert.equal(idpHeld.state, "held", `the provider's token's reserve: ${JSON.stringify(idpHeld)}`);
    const idpBuyer = (await run(example["buyer-id"], dir, { USER_ID: idpClaims.sub, BUYER_TOKEN_ISSUER: ISSUER, ID_SECRET: secrets.ID_SECRET })).trim();
    assert.match(idpBuyer, /^h\.[\w-]{43}$/, "a derived buyer id");
    const idpConfirm = await run(example.confirm, dir, { ...env, RESERVATION_ID: idpHeld.reservation_id, BUYER_ID: idpBuyer });
    assert.equal(idpConfirm.trim().split(" ")[0], "200", `the confirm as ${idpBuyer}: ${idpConfirm}`);

    // The orders reach the origin through the outbox; the README's read
    // shows all three, once each.
    const deadline = Date.now() + 30_000;
    let page;
    for (;;) {
      page = JSON.parse(await run(example.orders, dir, env));
      assert.ok(Array.isArray(page.orders), `the orders example read no page: ${JSON.stringify(page)}`);
      if (page.orders.length >= 3 || Date.now() > deadline) break;
      await sleep(200);
    }
    const orders = page.orders.map((o) => [o.buyer_id, o.status, o.quantity, o.payment_ref]).sort();
    assert.deepEqual(orders, [["alice", "accepted", 1, "pay-4711"], ["bob", "accepted", 1, "pay-4711"], [idpBuyer, "accepted", 1, "pay-4711"]].sort(), JSON.stringify(page));
    assert.equal(page.next_after, null);
  } finally {
    await gate.stop();
    await origin.stop();
  }
});
