// The Worker's entry module: what workerd calls, in front of the glue that
// wasm-bindgen generates (./index.js). scripts/build bundles the two with
// esbuild into build/index.js.
//
// It replaces worker-build's shim, which answers every call through
// Proxies: workerd constructed a `WorkerEntrypoint` for each request, wrapped
// in a Proxy whose `get` built another Proxy around each method it handed
// out, with an `async` wrapper adding a promise to every call. Measured by
// bench/profile.mjs, that machinery was about a tenth of a request's isolate
// time (bench/RESULTS.md, "The gate on bare workerd beside the JavaScript
// ceiling"). Here the default export is a plain object, so no class is
// built per request, and each Durable Object is a small class that holds
// its wasm-bindgen object.
//
// What the shim was for is kept: a WebAssembly trap (a Rust panic aborts)
// can leave the wasm instance's memory mid-update, so after one the next
// call resets the instance (`__wbg_reset_state`, which wasm-bindgen emits
// for `--experimental-reset-state-function`) and each object rebuilds its
// wasm-bindgen half from storage, as after an eviction.
import { DurableObject as Base } from "cloudflare:workers";
import * as wasm from "./index.js";

const initState = wasm.__worker_init_state();

function handleMaybeCritical(error) {
  if (error instanceof WebAssembly.RuntimeError) {
    console.error("flashgate: WebAssembly trap, the instance will be reset", error);
    initState.criticalError = true;
  }
}

function checkReinitialize() {
  if (initState.criticalError) {
    console.log("flashgate: resetting the WebAssembly instance after a trap");
    wasm.__wbg_reset_state();
    initState.criticalError = false;
    initState.instanceId++;
  }
}

// A trap inside a future's poll runs in a microtask, not under any call
// below, so it reaches the global handlers instead.
addEventListener("error", (event) => handleMaybeCritical(event.error));
addEventListener("unhandledrejection", (event) => handleMaybeCritical(event.reason));

export default {
  fetch(request, env, ctx) {
    checkReinitialize();
    try {
      return wasm.fetch(request, env, ctx);
    } catch (error) {
      handleMaybeCritical(error);
      throw error;
    }
  },
};

// The handlers workerd looks for on a Durable Object, and `command`, the
// method the Worker calls by RPC (offered because the class extends the
// runtime's DurableObject); a class that does not define one does not get it.
const OBJECT_METHODS = ["fetch", "command", "alarm", "webSocketMessage", "webSocketClose", "webSocketError"];

/** A Durable Object class around the wasm-bindgen class `Inner`. */
function durableObject(Inner) {
  class DurableObject extends Base {
    constructor(state, env) {
      // The runtime's class keeps them as `ctx` and `env`.
      super(state, env);
      checkReinitialize();
      this.instanceId = initState.instanceId;
      try {
        this.inner = new Inner(state, env);
      } catch (error) {
        handleMaybeCritical(error);
        throw error;
      }
    }
  }
  for (const name of OBJECT_METHODS) {
    if (typeof Inner.prototype[name] !== "function") continue;
    // Four parameters, the most any handler takes (webSocketClose), so
    // that no arguments array is built per call.
    DurableObject.prototype[name] = function (a, b, c, d) {
      checkReinitialize();
      if (this.instanceId !== initState.instanceId) {
        // The instance was reset: the old object's memory is gone.
        this.inner = new Inner(this.ctx, this.env);
        this.instanceId = initState.instanceId;
      }
      try {
        return this.inner[name](a, b, c, d);
      } catch (error) {
        handleMaybeCritical(error);
        throw error;
      }
    };
  }
  Object.defineProperty(DurableObject, "name", { value: Inner.name });
  return DurableObject;
}

export const ProductGate = durableObject(wasm.ProductGate);
export const Catalog = durableObject(wasm.Catalog);
