// 2,000 sockets on one product, on bare workerd: every one receives the
// update after a reservation. It runs alone (scripts/test runs this folder
// after the others, one file at a time): 2,000 sockets load a 2-core
// machine enough to disturb the timing-sensitive tests beside it.
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { withGate } from "../support/system.mjs";

const SOCKETS = 2000;

test("2,000 sockets on one product all receive the update after a reservation", () => withGate({ vars: { LIVE_SOCKETS_MAX: String(SOCKETS) } }, async (sys) => {
  const { api: bigApi, gate: big } = sys;
  const sockets = [];
  // Before the gate stops: a socket left open would hold workerd's exit.
  sys.defer(() => {
    for (const s of sockets) s.ws.terminate();
  });
  assert.equal((await bigApi.put("crowd", { stock_total: 10 })).status, 201);
  const url = `${big.url.replace("http", "ws")}/api/products/crowd/live`;
  for (let i = 0; i < SOCKETS; i += 100) {
    await Promise.all(Array.from({ length: 100 }, () => new Promise((ok, fail) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      const s = { ws, latest: null };
      ws.on("message", (d) => (s.latest = JSON.parse(d.toString())));
      ws.on("open", () => ok(sockets.push(s)));
      ws.on("error", fail);
    })));
  }
  const t0 = Date.now();
  assert.equal((await bigApi.reserve("crowd", "one", 1)).status, 201);
  for (let i = 0; i < 100 && sockets.some((s) => s.latest?.available !== 9); i++) await new Promise((ok) => setTimeout(ok, 50));
  const behind = sockets.filter((s) => s.latest?.available !== 9).length;
  console.log(`${SOCKETS} sockets: all updated ${Date.now() - t0} ms after the reservation was sent`);
  assert.equal(behind, 0, `${behind} of ${SOCKETS} sockets missed the update`);
}));
