// `queueMicrotask` for the wasm-bindgen glue, which wakes every Rust future
// through it: scripts/build injects this module into the bundle (esbuild's
// --inject), so the glue's calls reach this function and nothing else in the
// isolate changes.
//
// workerd's own queueMicrotask wraps each callback in a new function (to
// carry the async context, which the gate does not use) before queueing it;
// a buyer's request wakes a future four to eight times, and bench/profile.mjs
// measured those calls at about a tenth of a sold-out refusal's isolate
// time. A settled promise's `then` queues the same microtask in V8 alone.
// A callback that throws (a trap inside a future's poll) rejects the
// promise `then` returns; the glue drops that promise, so the rejection
// reaches the entry module's `unhandledrejection` handler.
const settled = Promise.resolve();

export function queueMicrotask(callback) {
  return settled.then(callback);
}
