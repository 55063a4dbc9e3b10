// An identity provider for the tests: its signing keys (RS256 and ES256),
// the JWKS it publishes, and tokens signed by two independent JWT
// libraries, jose (npm) and PyJWT with cryptography (PyPI, in the virtualenv
// scripts/ensure-tools --test makes), as a shop's OpenID Connect provider
// would sign them. Also the buyer id the gate derives from a subject that is
// not a buyer id, computed as docs/security.md tells a shop to.
import { execFileSync } from "node:child_process";
import { createHmac, generateKeyPairSync } from "node:crypto";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { SignJWT } from "jose";
import { AUDIENCE, ID_SECRET } from "./keys.mjs";

export const ISSUER = "https://login.shop.example/";

/** A signing key of `alg` (RS256: RSA 2048; ES256: P-256) named `kid`:
 * the private key (a KeyObject, and as PKCS#8 PEM for PyJWT) and the
 * public JWK a provider publishes. */
export function signingKey(alg, kid) {
  const { privateKey, publicKey } = alg === "RS256"
    ? generateKeyPairSync("rsa", { modulusLength: 2048 })
    : generateKeyPairSync("ec", { namedCurve: "P-256" });
  const jwk = { kid, use: "sig", alg, ...publicKey.export({ format: "jwk" }) };
  return { alg, kid, privateKey, publicKey, jwk, pem: privateKey.export({ format: "pem", type: "pkcs8" }) };
}

/** The JWKS of `keys`, as the gate's BUYER_TOKEN_JWKS holds it. */
export const jwks = (keys) => JSON.stringify({ keys: keys.map((k) => k.jwk) });

/** Claims a provider's token carries, for the gate, valid for 10 minutes
 * from `nowS`, with `extra` over them (`undefined` removes one). */
export function claims(sub, extra = {}, nowS = Math.floor(Date.now() / 1000)) {
  const c = { iss: ISSUER, sub, aud: AUDIENCE, iat: nowS, exp: nowS + 600, ...extra };
  for (const k of Object.keys(c)) if (c[k] === undefined) delete c[k];
  return c;
}

/** A token signed by jose. */
export function joseToken(key, payload, header = {}) {
  return new SignJWT(payload).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: "JWT", ...header }).sign(key.privateKey);
}

/** The Python of the PyJWT virtualenv (scripts/ensure-tools --test). */
export const PYJWT_PYTHON = process.env.PYJWT_PYTHON
  ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "flashgate/pyjwt/bin/python");

const PYJWT_SIGN = `
import json, sys
import jwt
out = [jwt.encode(s["claims"], s["pem"], algorithm=s["alg"], headers={"kid": s["kid"]}) for s in json.load(sys.stdin)]
json.dump(out, sys.stdout)
`;

/** Tokens signed by PyJWT, one per `[key, payload]`, in one Python run. */
export function pyjwtTokens(specs) {
  if (!existsSync(PYJWT_PYTHON)) throw new Error(`PyJWT is not installed at ${PYJWT_PYTHON}: run scripts/ensure-tools --test`);
  const input = JSON.stringify(specs.map(([key, payload]) => ({ alg: key.alg, kid: key.kid, pem: key.pem, claims: payload })));
  return JSON.parse(execFileSync(PYJWT_PYTHON, ["-c", PYJWT_SIGN], { input, encoding: "utf8" }));
}

/** The buyer id the gate gives a provider's user `value` of `issuer`: the
 * value when it is a buyer id, else "h." and the base64url of
 * HMAC-SHA256(key, issuer's length as 8 bytes big-endian, issuer, value),
 * the key being HMAC-SHA256(ID_SECRET, "flashgate buyer ids from a
 * provider\\n"). */
export function buyerIdOf(value, { issuer = ISSUER, idSecret = ID_SECRET } = {}) {
  if (/^[A-Za-z0-9_.-]{1,64}$/.test(value) && !value.startsWith("h.")) return value;
  const key = createHmac("sha256", idSecret).update("flashgate buyer ids from a provider\n").digest();
  const len = Buffer.alloc(8);
  len.writeBigUInt64BE(BigInt(Buffer.byteLength(issuer)));
  return `h.${createHmac("sha256", key).update(len).update(issuer).update(value).digest("base64url")}`;
}
