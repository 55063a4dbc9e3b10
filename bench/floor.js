// The JS hop of bench/baseline/ceiling.js, and the same hop after the two
// rate limiter calls a buyer's read of its hold must make (its address's
// and its own), for bench/floor.mjs. Every request goes to one object.
//   /hop      the ceiling's hop, as it is
//   /limited  RATE_LIMIT_IP and RATE_LIMIT_BUYER asked, then the hop
export class Ceiling {
  async fetch() {
    return new Response("ok");
  }
}
export default {
  async fetch(req, env) {
    if (new URL(req.url).pathname === "/limited") {
      const ip = await env.RATE_LIMIT_IP.limit({ key: req.headers.get("cf-connecting-ip") ?? "127.0.0.1" });
      const buyer = await env.RATE_LIMIT_BUYER.limit({ key: "buyer" });
      if (!ip.success || !buyer.success) return new Response("limited", { status: 429 });
    }
    return env.CEILING.get(env.CEILING.idFromName("p1")).fetch(req);
  },
};
