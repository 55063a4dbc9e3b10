// The runtime's own cost of a broadcast, for bench/live.mjs: a JavaScript
// Durable Object that accepts hibernatable WebSockets exactly as the gate's
// object does (greeting and attachment included), and on each POST sends
// one message to every socket. No storage, no decisions.
import { DurableObject } from "cloudflare:workers";

export class Fanout extends DurableObject {
  async fetch(request) {
    if (request.headers.get("upgrade") === "websocket") {
      const [client, server] = Object.values(new WebSocketPair());
      this.ctx.acceptWebSocket(server);
      server.serializeAttachment({ version: 0 });
      server.send(JSON.stringify({ type: "state", version: 0, available: -1 }));
      return new Response(null, { status: 101, webSocket: client });
    }
    const available = Number(new URL(request.url).searchParams.get("available"));
    const version = Date.now();
    const message = JSON.stringify({ type: "state", version, product_id: "x", state: "open", stock_total: 1000, available, held: 0, sold: 0 });
    for (const ws of this.ctx.getWebSockets()) {
      try {
        ws.send(message);
        const a = ws.deserializeAttachment() || {};
        a.version = version;
        ws.serializeAttachment(a);
      } catch {}
    }
    return new Response("ok");
  }
  webSocketMessage(ws) {
    ws.close(1008, "viewers only listen");
  }
  webSocketClose(ws) {
    try { ws.close(1000, "bye"); } catch {}
  }
}

export default {
  fetch(request, env) {
    return env.FANOUT.get(env.FANOUT.idFromName("x")).fetch(request);
  },
};
