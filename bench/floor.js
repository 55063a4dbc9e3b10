// The JS hop of bench/baseline/ceiling.js, and the same hop with what a
// buyer's read of its hold cannot leave out, for bench/floor.mjs. Every
// request goes to one object.
//   /hop      the ceiling's hop, as it is
//   /limited  RATE_LIMIT_IP and RATE_LIMIT_BUYER asked, then the hop
//   /command  the limits, then the read as a command in a request of its
//             own (a field of JSON, as the gate sends it), which the object
//             parses and answers with its hold as JSON
const HOLD = { reservation_id: "3f9c1d2e4b5a6978", status: "held", quantity: 1, expires_at_ms: 1_900_000_000_000 };
export class Ceiling {
  async fetch(req) {
    const command = req.headers.get("flashgate-command");
    if (command === null) return new Response("ok");
    const { buyer, reservation_id } = JSON.parse(command).GetReservation;
    if (buyer !== "reader" || reservation_id !== 7) return new Response("unknown", { status: 404 });
    return new Response(JSON.stringify(HOLD), { headers: { "content-type": "application/json" } });
  }
}
const ids = new Map();
export default {
  async fetch(req, env) {
    const path = new URL(req.url).pathname;
    if (path !== "/hop") {
      const ip = await env.RATE_LIMIT_IP.limit({ key: req.headers.get("cf-connecting-ip") ?? "127.0.0.1" });
      const buyer = await env.RATE_LIMIT_BUYER.limit({ key: "reader" });
      if (!ip.success || !buyer.success) return new Response("limited", { status: 429 });
    }
    let id = ids.get("p1");
    if (id === undefined) ids.set("p1", (id = env.CEILING.idFromName("p1")));
    if (path !== "/command") return env.CEILING.get(id).fetch(req);
    const command = JSON.stringify({ GetReservation: { product_id: "p1", buyer: "reader", reservation_id: 7 } });
    return env.CEILING.get(id).fetch("https://product-gate/command", { method: "POST", headers: { "flashgate-command": command } });
  },
};
