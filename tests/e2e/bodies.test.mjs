// Bodies the edge answers without reading, on keep-alive connections: the
// client's rate-limit 429, `POST /api/session`, a waiting-room join and an
// unknown route all answer before (or without) reading a POST's body. A
// client that sends one there must keep its connection: no reset, and the
// next request on the same socket. Bodies up to the edge's limit are tried,
// and over it (the 413), up to 40 KB.
//
// A body the client breaks off (shorter than its declared length, or a
// chunked body cut mid-chunk) is a 400 and changes nothing.
//
// Beyond that, workerd itself resets a keep-alive connection whose unread
// body is larger than about 64 KB, for the JavaScript ceiling's plain Worker
// as well (docs/decisions.md); the edge does not read an
// oversized body to spare the connection, so that case is not tried here.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { buyerToken } from "../support/keys.mjs";
import { withGate } from "../support/system.mjs";

/** Sends `requests` one after another on one keep-alive socket; returns the
 * statuses, the network errors, and how many went on a reused socket. */
async function onOneSocket(url, requests) {
  const target = new URL(url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const statuses = [];
  const errors = [];
  let reused = 0;
  for (const { method = "POST", path, headers = {}, body } of requests) {
    try {
      statuses.push(
        await new Promise((ok, fail) => {
          const req = http.request(
            { host: target.hostname, port: target.port, method, path, agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } },
            (res) => {
              res.resume();
              res.on("end", () => ok(res.statusCode));
            },
          );
          req.on("error", fail);
          if (req.reusedSocket) reused++;
          req.end(body);
        }),
      );
    } catch (e) {
      errors.push(`${path}: ${e.code ?? e.message}`);
    }
  }
  agent.destroy();
  return { statuses, errors, reused };
}

// The client's limit is tight, so that most requests get the 429.
const tightClientLimit = { vars: { RATE_LIMITS: "ip=4/60;buyer=1000000000/10;admin=1000000000/10" } };

test("bodies the edge answers without reading keep the connection, up to 40 KB", () => withGate(tightClientLimit, async ({ api, gate }) => {
  assert.equal((await api.put("bodies", { stock_total: 100, per_buyer_max: 100 })).status, 201);
  assert.equal((await api.put("bodies-room", { stock_total: 100, per_buyer_max: 100, admit_per_s: 10 })).status, 201);
  // The edge's limit, as its 413 states it.
  const tooLarge = await fetch(`${gate.url}/api/products/bodies/reservations`, {
    method: "POST",
    headers: { "cf-connecting-ip": "198.51.100.200", "content-type": "application/json" },
    body: "x".repeat(100_000),
  });
  assert.equal(tooLarge.status, 413);
  const limit = Number(/at most (\d+) bytes/.exec((await tooLarge.json()).detail)[1]);
  assert.ok(limit > 0 && limit < 40_000, `limit ${limit}`);

  const sizes = [1, 100, limit - 20, limit, limit + 1, 16_000, 40_000];
  // A reservation's body of `n` bytes, padded with JSON's whitespace (an
  // unknown field would be refused); one too short to hold it is not
  // JSON.
  const shortest = '{"quantity":1}'.length;
  const body = (n) => (n < shortest ? "x".repeat(n) : '{"quantity":1}' + " ".repeat(n - shortest));
  const buyer = { authorization: `Bearer ${buyerToken("body-buyer")}`, "content-type": "application/json" };
  let ip = 0;
  const cases = {
    // The first four from the address reach the object (or get their
    // 413); the rest get the 429 without the body being read.
    "the client's limit (429)": (n, i) => ({ path: "/api/products/bodies/reservations", headers: { ...buyer, "idempotency-key": `"k-${n}-${i}"`, "cf-connecting-ip": `198.51.100.${ip}` }, body: body(n) }),
    "a dev session": (n) => ({ path: "/api/session", headers: { "cf-connecting-ip": `203.0.113.${ip}` }, body: body(n) }),
    "a waiting-room join": (n) => ({ path: "/api/products/bodies-room/queue", headers: { ...buyer, "cf-connecting-ip": `192.0.2.${ip}` }, body: body(n) }),
    "an unknown route": (n) => ({ path: "/api/nowhere", headers: { "cf-connecting-ip": `198.18.0.${ip}` }, body: body(n) }),
  };
  for (const [name, make] of Object.entries(cases)) {
    for (const n of sizes) {
      ip++;
      const requests = Array.from({ length: 8 }, (_, i) => make(n, i));
      const { statuses, errors, reused } = await onOneSocket(gate.url, requests);
      const seen = `${name}, ${n}-byte bodies: statuses ${statuses}, errors ${errors}`;
      assert.deepEqual(errors, [], seen);
      assert.equal(reused, requests.length - 1, `every request after the first on the same socket: ${seen}`);
      if (name.startsWith("the client's limit")) {
        assert.ok(statuses.slice(4).every((s) => s === 429), seen);
        assert.ok(statuses.slice(0, 4).every((s) => s === (n > limit ? 413 : n < shortest ? 400 : 201)), seen);
      } else {
        assert.ok(statuses.slice(0, 4).every((s) => s < 500 && s !== 429), seen);
      }
    }
  }
}));

/** Writes `text` on a new connection, closes the writing side, and returns
 * what came back. */
function raw(port, text) {
  return new Promise((ok) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.write(text);
      socket.end();
    });
    let out = "";
    socket.on("data", (d) => (out += d));
    socket.on("close", () => ok(out));
    socket.on("error", (e) => ok(`error ${e.code}`));
  });
}

test("a body broken off before its end is a 400 with a JSON body, and changes nothing", () => withGate(async ({ api, gate }) => {
  assert.equal((await api.put("broken", { stock_total: 10, per_buyer_max: 5 })).status, 201);
  const head = (key, framing) =>
    "POST /api/products/broken/reservations HTTP/1.1\r\nhost: gate\r\ncontent-type: application/json\r\n" +
    `authorization: Bearer ${buyerToken("broken-buyer")}\r\nidempotency-key: "${key}"\r\n${framing}\r\n\r\n`;
  const cases = {
    "shorter than its content-length": head("short", "content-length: 100") + '{"quantity":1',
    "a chunked body cut mid-chunk": head("chunked", "transfer-encoding: chunked") + '9\r\n{"quan',
  };
  for (const [name, text] of Object.entries(cases)) {
    const answer = await raw(gate.port, text);
    assert.match(answer, /^HTTP\/1\.1 400 /, `${name}: ${answer.slice(0, 300)}`);
    const problem = JSON.parse(answer.split("\r\n\r\n")[1]);
    assert.equal(problem.code, "malformed_json", name);
    assert.equal(problem.status, 400, name);
  }
  const stats = (await api.stats("broken")).body;
  assert.equal(stats.held, 0, "nothing was reserved");
  assert.equal(stats.available, 10);
}));
