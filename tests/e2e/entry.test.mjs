// The Worker's entry module (src/wasm/entry.mjs) and the microtask hook
// (src/wasm/microtask.mjs), in Node, in front of a stand-in for the
// wasm-bindgen glue: a trap can't be caused in the real gate from outside
// (no request makes it panic), so the recovery is tried here, against the
// contract the glue keeps (`__worker_init_state`, `__wbg_reset_state`, a
// `fetch` export and one class per Durable Object). The real entry module
// serves every other end-to-end test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT } from "../support/runtime.mjs";

// A glue whose `fetch` and object methods trap (throw a
// WebAssembly.RuntimeError) when asked to, and which counts resets and
// objects built.
const STAND_IN = `
const state = { criticalError: false, instanceId: 0 };
export const calls = { resets: 0, built: 0, trapNext: false };
export function __worker_init_state() { return state; }
export function __wbg_reset_state() { calls.resets++; }
function maybeTrap() {
  if (calls.trapNext) {
    calls.trapNext = false;
    throw new WebAssembly.RuntimeError("unreachable");
  }
}
export function fetch(request, env, ctx) { maybeTrap(); return Promise.resolve({ request, env, ctx }); }
class Base {
  constructor(state, env) { calls.built++; this.generation = calls.resets; this.args = [state, env]; }
  fetch(req) { maybeTrap(); return Promise.resolve({ req, generation: this.generation }); }
  alarm() { return Promise.resolve("alarm"); }
  webSocketClose(ws, code, reason, clean) { return [ws, code, reason, clean]; }
}
export class ProductGate extends Base {
  command(text) { maybeTrap(); return Promise.resolve({ text, generation: this.generation }); }
}
export class Catalog extends Base {}
`;

// The runtime's \`DurableObject\` base class (\`cloudflare:workers\`, which
// Node cannot import): it keeps what it is given, as workerd's does.
const RUNTIME = `
export class DurableObject {
  constructor(ctx, env) { this.ctx = ctx; this.env = env; }
}
`;

async function load() {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-entry-"));
  const source = readFileSync(join(ROOT, "src/wasm/entry.mjs"), "utf8");
  assert.match(source, /from "cloudflare:workers";/);
  writeFileSync(join(dir, "entry.mjs"), source.replace('from "cloudflare:workers";', 'from "./runtime.mjs";'));
  writeFileSync(join(dir, "runtime.mjs"), RUNTIME);
  writeFileSync(join(dir, "index.js"), STAND_IN);
  const listeners = {};
  // workerd's global scope has addEventListener; Node's has none.
  globalThis.addEventListener = (type, fn) => {
    listeners[type] = fn;
  };
  const entry = await import(pathToFileURL(join(dir, "entry.mjs")).href);
  const glue = await import(pathToFileURL(join(dir, "index.js")).href);
  return { entry, calls: glue.calls, listeners, dir };
}

test("the default export passes the request, env and context through, and a trap resets the instance before the next call", async () => {
  const { entry, calls } = await load();
  const answer = await entry.default.fetch("req", "env", "ctx");
  assert.deepEqual(answer, { request: "req", env: "env", ctx: "ctx" });
  calls.trapNext = true;
  assert.throws(() => entry.default.fetch("req", "env", "ctx"), WebAssembly.RuntimeError);
  assert.equal(calls.resets, 0, "the reset waits for the next call");
  await entry.default.fetch("req", "env", "ctx");
  assert.equal(calls.resets, 1);
  await entry.default.fetch("req", "env", "ctx");
  assert.equal(calls.resets, 1, "one trap, one reset");
});

test("a Durable Object keeps its wasm-bindgen object until a reset, then rebuilds it from the same state and env", async () => {
  const { entry, calls, dir } = await load();
  const { DurableObject } = await import(pathToFileURL(join(dir, "runtime.mjs")).href);
  const gate = new entry.ProductGate("state", "env");
  assert.equal(entry.ProductGate.name, "ProductGate");
  // The runtime offers a class's methods by RPC only when it extends its
  // DurableObject.
  assert.ok(gate instanceof DurableObject);
  assert.deepEqual([gate.ctx, gate.env], ["state", "env"]);
  assert.equal(calls.built, 1);
  assert.deepEqual(await gate.fetch("r1"), { req: "r1", generation: 0 });
  assert.deepEqual(await gate.command("{}"), { text: "{}", generation: 0 });
  assert.equal(await gate.alarm(), "alarm");
  assert.deepEqual(gate.webSocketClose("ws", 1000, "bye", true), ["ws", 1000, "bye", true]);
  assert.equal(typeof gate.webSocketMessage, "undefined", "a handler the class lacks is not offered");
  assert.equal(calls.built, 1, "no object is built per call");
  calls.trapNext = true;
  assert.throws(() => gate.fetch("r2"), WebAssembly.RuntimeError);
  const after = await gate.fetch("r3");
  assert.equal(calls.resets, 1);
  assert.equal(calls.built, 2, "the object was rebuilt once");
  assert.equal(after.generation, 1, "by the reset instance");
  assert.deepEqual(gate.inner.args, ["state", "env"]);
  // Another object, built before the reset, rebuilds too on its next call.
  const other = new entry.Catalog("s2", "e2");
  assert.equal(typeof other.command, "undefined", "nor a method the class lacks");
  calls.trapNext = true;
  assert.throws(() => other.fetch("x"), WebAssembly.RuntimeError);
  await gate.fetch("r4");
  assert.equal(calls.resets, 2);
  await other.fetch("y");
  assert.deepEqual(other.inner.args, ["s2", "e2"]);
  assert.equal(other.inner.generation, 2);
});

test("a trap that reaches the global handlers (inside a microtask) marks the instance for reset; other errors do not", async () => {
  const { entry, calls, listeners } = await load();
  listeners.error({ error: new TypeError("not a trap") });
  listeners.unhandledrejection({ reason: new Error("nor this") });
  await entry.default.fetch("a", "b", "c");
  assert.equal(calls.resets, 0);
  listeners.unhandledrejection({ reason: new WebAssembly.RuntimeError("unreachable") });
  await entry.default.fetch("a", "b", "c");
  assert.equal(calls.resets, 1);
  listeners.error({ error: new WebAssembly.RuntimeError("unreachable") });
  await entry.default.fetch("a", "b", "c");
  assert.equal(calls.resets, 2);
});

test("the microtask hook runs callbacks in order, after the current task, and a callback that throws rejects to the unhandledrejection handler", async () => {
  const { queueMicrotask } = await import(pathToFileURL(join(ROOT, "src/wasm/microtask.mjs")).href);
  const seen = [];
  queueMicrotask(() => seen.push(1));
  queueMicrotask(() => seen.push(2));
  seen.push(0);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.deepEqual(seen, [0, 1, 2]);
  // The glue drops the promise the hook returns; here it is kept, to see
  // the rejection that would reach the unhandledrejection handler.
  const thrown = queueMicrotask(() => {
    throw new WebAssembly.RuntimeError("unreachable");
  });
  await assert.rejects(thrown, WebAssembly.RuntimeError);
});

test("the built bundle routes the glue's queueMicrotask through the hook, not workerd's global", async () => {
  const { readFileSync } = await import("node:fs");
  const bundle = readFileSync(join(ROOT, "build/index.js"), "utf8");
  const glue = /__wbg_queueMicrotask_[0-9a-f]+:function\((\w)\)\{(\w+)\(\1\)\}/.exec(bundle);
  assert.ok(glue, "the glue's queueMicrotask import is in the bundle");
  assert.notEqual(glue[2], "queueMicrotask", "the call goes to the injected function");
  assert.match(bundle, new RegExp(`function ${glue[2]}\\((\\w)\\)\\{return \\w+\\.then\\(\\1\\)\\}`));
});
