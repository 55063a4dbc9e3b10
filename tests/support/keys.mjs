// The test deployment's secrets, and the two things the tests do with them
// that the shop would: mint buyer tokens (JWT, HS256) and sign payment
// confirmations (flashgate-v2 signatures). Independent of the Rust code, so
// the end-to-end tests check the wire formats against a second
// implementation.
import { createHash, createHmac, randomBytes } from "node:crypto";

/**
 * A secret as an operator makes one (`openssl rand -hex 32`): made afresh
 * by each test process, so that no usable secret is written in the
 * repository, and each passes the services' check for random secrets.
 */
export const randomSecret = () => randomBytes(32).toString("hex");

export const ADMIN_TOKEN = randomSecret();
export const ADMIN_TOKENS = `a1:${ADMIN_TOKEN}`;
export const BUYER_TOKEN_KEYS = `b1:${randomSecret()}`;
export const PAYMENT_KEYS = `p1:${randomSecret()}`;
export const FORWARD_KEYS = `f1:${randomSecret()}`;
export const ID_SECRET = randomSecret();
export const READ_TOKEN = randomSecret();
export const SHOP_TOKEN = randomSecret();
export const AUDIENCE = "flashgate";

/** The keys of a `kid:secret,kid@activate_ms:secret,...` set. */
export function parseKeys(set) {
  return set.split(",").map((entry) => {
    const at = entry.indexOf(":");
    const [kid, activate] = entry.slice(0, at).split("@");
    return { kid, activateMs: Number(activate ?? 0), secret: entry.slice(at + 1) };
  });
}

/** The key a signer uses at `nowMs`: the active key that activated last. */
export function firstKey(set, nowMs = Date.now()) {
  const keys = parseKeys(set);
  const active = keys.filter((k) => k.activateMs <= nowMs).sort((a, b) => b.activateMs - a.activateMs);
  return active[0] ?? keys.sort((a, b) => a.activateMs - b.activateMs)[0];
}

const b64url = (buf) => Buffer.from(buf).toString("base64url");

/** A buyer token as a shop's login would mint it. `claims` overrides. */
export function buyerToken(sub, { keys = BUYER_TOKEN_KEYS, header = {}, claims = {}, nowS = Math.floor(Date.now() / 1000) } = {}) {
  const { kid, secret } = firstKey(keys, nowS * 1000);
  const h = b64url(JSON.stringify({ alg: "HS256", typ: "JWT", kid, ...header }));
  const c = b64url(JSON.stringify({ sub, aud: AUDIENCE, iat: nowS, exp: nowS + 600, ...claims }));
  const sig = b64url(createHmac("sha256", secret).update(`${h}.${c}`).digest());
  return `${h}.${c}.${sig}`;
}

/** The signature headers of a request, as flashgate-v2 defines them, and
 * the body's digest. */
export function signHeaders({ keys, purpose, method, path, body, nowMs = Date.now() }) {
  const { kid, secret } = firstKey(keys, nowMs);
  const digest = createHash("sha256").update(body ?? "").digest("hex");
  const canonical = ["flashgate-v2", purpose, kid, String(nowMs), method.toUpperCase(), path, digest].map((f) => `${f}\n`).join("");
  const sig = createHmac("sha256", secret).update(canonical).digest("hex");
  // The digest as signed, so that a receiver can check the signature
  // before the body (the origin requires it of batches).
  return { "x-flashgate-key-id": kid, "x-flashgate-timestamp": String(nowMs), "x-flashgate-signature": `v2=${sig}`, "x-flashgate-content-sha256": digest };
}

/**
 * A confirmation of reservation `rid` as the shop's payment backend sends
 * it: the path and the request, signed (flashgate-v2, purpose "payment").
 * The body names `buyer` and `paymentRef`, or is `body` as given. The other
 * options forge one: signed with other `keys`, at another time (`nowMs`),
 * for another `purpose`, or over another path (`signedPath`) or body
 * (`signedBody`) than the one sent.
 */
export function signedConfirm(product, rid, { buyer, paymentRef = `pay-${rid}`, body, keys = PAYMENT_KEYS, nowMs, purpose = "payment", signedPath, signedBody } = {}) {
  const path = confirmPath(product, rid);
  body ??= JSON.stringify({ buyer_id: buyer, payment_ref: paymentRef });
  const signature = signHeaders({ keys, purpose, method: "POST", path: signedPath ?? path, body: signedBody ?? body, nowMs });
  return { path, init: { method: "POST", headers: { "content-type": "application/json", ...signature }, body } };
}

/** The path of reservation `rid`'s confirm. */
export const confirmPath = (product, rid) => `/api/products/${product}/reservations/${rid}/confirm`;

/** A waiting-room ticket as the gate signs it (src/edge/ticket.rs), minted here
 * independently: `claims` overrides any of p, b, t, h, e. */
export function queueTicket(claims, { idSecret = ID_SECRET } = {}) {
  const key = createHmac("sha256", idSecret).update("flashgate waiting-room tickets\n").digest();
  const tag = (parts) => {
    const mac = createHmac("sha256", key);
    for (const part of parts) {
      const bytes = Buffer.from(part);
      const len = Buffer.alloc(8);
      len.writeBigUInt64BE(BigInt(bytes.length));
      mac.update(len).update(bytes);
    }
    return mac.digest();
  };
  const body = b64url(JSON.stringify(claims));
  return `v1.${body}.${b64url(tag(["v1", body]))}`;
}

/** The key the gate signs its proof-of-work challenges with, as ALTCHA's
 * libraries take it (`src/ids.rs`, `PowKey`): a test that knows
 * `ID_SECRET` signs challenges the gate would have issued (an expired one). */
export const powSecret = (idSecret = ID_SECRET) =>
  createHmac("sha256", idSecret).update("flashgate proof of work\n").digest("hex");

/** The waiting room's lottery, recomputed from a published key (64 hex
 * digits): its commitment, and a buyer's tiebreak (openapi.yaml, `Product`). */
export const lotteryCommitment = (keyHex) => createHash("sha256").update(Buffer.from(keyHex, "hex")).digest("hex");
export function lotteryTiebreak(keyHex, product, buyer) {
  const d = createHash("sha256")
    .update("flashgate-tiebreak-v1")
    .update(Buffer.from(keyHex, "hex"))
    .update(Buffer.from([Math.min(Buffer.byteLength(product), 255)]))
    .update(product)
    .update(buyer)
    .digest();
  return d.readUInt32BE(0);
}

/** A ticket's claims, as its holder can read them (the middle part). */
export const ticketClaims = (ticket) => JSON.parse(Buffer.from(ticket.split(".")[1], "base64url").toString());

/** The order of two places in the waiting room (`QueueKey`): pre-queue
 * first, by tiebreak then arrival; then regular, by arrival then tiebreak. */
export function compareKeys(a, b) {
  const rank = (k) => (k.kind === "prequeue" ? [0, k.tiebreak, k.arrived_ms] : [1, k.arrived_ms, k.tiebreak]);
  const [x, y] = [rank(a), rank(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}
