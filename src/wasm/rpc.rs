//! Commands to a product's objects (a product's home or one of its stock
//! shards), from the edge and from one object to another: by Durable
//! Object RPC, the object's `command` method, which answers as its `fetch`
//! answers a request. A watch alone stays a request, since a WebSocket
//! upgrade needs one.

use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::web_sys;
use worker::Env;

use crate::protocol::{self, Command};

/// Sends `cmd` to the product object named `name` and gives its response
/// as the runtime gave it.
pub(crate) async fn send(
    env: &Env,
    name: &str,
    cmd: &Command,
) -> worker::Result<web_sys::Response> {
    let watch = matches!(cmd, Command::Watch { .. });
    let text = if watch {
        cmd.to_header()
            .ok_or_else(|| worker::Error::RustError("a watch too long for its header".into()))?
    } else {
        serde_json::to_string(cmd)?
    };
    let promise =
        NAMES.with(|(binding, field)| send_command(env, binding, name, field, &text, watch))?;
    Ok(JsFuture::from(promise)
        .await?
        .dyn_into::<web_sys::Response>()?)
}

thread_local! {
    /// The binding's and the command field's names, made JS strings once:
    /// a string passed from wasm is decoded at each call.
    static NAMES: (JsValue, JsValue) = (
        JsValue::from_str("PRODUCT_GATE"),
        JsValue::from_str(protocol::COMMAND_HEADER),
    );
}

#[wasm_bindgen(inline_js = "
// Object ids by name: deriving one hashes the name, and an id (unlike a
// stub) is not tied to the request that made it. Bounded: cleared when full.
const ids = new Map();
const IDS_MAX = 10000;
export function send_command(env, binding, name, header, command, watch) {
  const key = binding + '/' + name;
  let id = ids.get(key);
  if (id === undefined) {
    if (ids.size >= IDS_MAX) ids.clear();
    id = env[binding].idFromName(name);
    ids.set(key, id);
  }
  const stub = env[binding].get(id);
  if (!watch) return stub.command(command);
  return stub.fetch('https://product-gate/command', {
    method: 'GET',
    headers: { [header]: command, upgrade: 'websocket' },
  });
}")]
extern "C" {
    /// Sends a command to the named object in one call across the
    /// boundary (the id, the stub and the call): by Durable Object RPC
    /// (the object's `command`, which answers as its `fetch` would), or,
    /// for a watch, as a WebSocket upgrade with the command in the
    /// `header` field. The constant names go as JS strings made once
    /// (`NAMES`) and the command as a borrowed string, which JS decodes
    /// without freeing it in wasm.
    ///
    /// RPC in place of a request per command: measured by
    /// `BENCH_PROFILE=0 node --experimental-websocket bench/profile.mjs
    /// objread 5`, three alternated pairs, workerd CPU per buyer's read of
    /// its hold: 274.8, 298.7 and 302.6 us by request; 255.3, 227.5 and
    /// 185.6 by RPC.
    #[wasm_bindgen(catch)]
    fn send_command(
        env: &Env,
        binding: &JsValue,
        name: &str,
        header: &JsValue,
        command: &str,
        watch: bool,
    ) -> Result<js_sys::Promise, JsValue>;
}
