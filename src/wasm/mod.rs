//! The shell: everything that touches the Workers runtime. It moves bytes,
//! time, SQL and fetches in and out of the pure modules, and decides
//! nothing itself.

mod config;
mod edge;
mod http;
mod object;
mod rpc;

use worker::js_sys;
use worker::wasm_bindgen::{JsCast, JsValue};

/// The runtime's clock, in ms since the epoch: `Date.now()`, one call
/// across the boundary. `worker::Date::now()` builds a JavaScript `Date`
/// and then asks it the time: two calls and an object, on every pipeline
/// step and every batch. (`node --experimental-websocket bench/profile.mjs
/// reserve 5` gave `new Date` alone 10.5 µs of a reserve's 552 µs of isolate
/// time.)
pub(crate) fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// 32 bytes from the runtime's CSPRNG (`crypto.getRandomValues`), which
/// seed the object's lottery keys and the edge's proof-of-work challenges.
/// The runtime always has it; were the call to fail, they would still be
/// drawn, from a weaker seed, and the log says so.
pub(crate) fn random_bytes() -> [u8; 32] {
    let out = js_sys::Uint8Array::new_with_length(32);
    let filled =
        js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("crypto")).and_then(|crypto| {
            let f = js_sys::Reflect::get(&crypto, &JsValue::from_str("getRandomValues"))?;
            f.dyn_into::<js_sys::Function>()?.call1(&crypto, &out)
        });
    let mut bytes = [0u8; 32];
    match filled {
        Ok(_) => out.copy_to(&mut bytes),
        Err(e) => {
            worker::console_error!("flashgate: crypto.getRandomValues failed: {e:?}");
            for b in &mut bytes {
                *b = (js_sys::Math::random() * 256.0) as u8;
            }
        }
    }
    bytes
}
