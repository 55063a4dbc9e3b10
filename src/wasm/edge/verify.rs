//! The one check the edge leaves to the runtime: an identity provider's
//! RS256 or ES256 signature, verified by WebCrypto at the runtime's native
//! speed, with no RSA or elliptic-curve code in the wasm. Everything else
//! about the token (its form, its key, the key's pinned algorithm, its
//! claims) was decided before this, in `flashgate_wire::token`.

use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen};
use worker::wasm_bindgen_futures::JsFuture;

use crate::edge::pipeline::Verify;

/// Whether `v.signature` is `v.key`'s over `v.signing_input`. A key that
/// does not import (an EC point off the curve, which only WebCrypto
/// checks) verifies nothing, and is logged once per isolate.
pub async fn verify(v: &Verify<'_>) -> bool {
    let promise = verify_signature(
        &v.key.kid,
        &v.key.import_json(),
        v.key.alg.name(),
        v.signing_input.as_bytes(),
        &v.signature,
    );
    JsFuture::from(promise)
        .await
        .is_ok_and(|verified| verified.is_truthy())
}

#[wasm_bindgen(inline_js = "
// Each key is imported once per isolate, and its CryptoKey (the promise of
// it) kept, by kid and key material: an import costs about as much as the
// verify for ES256 and two fifths of it for RS256 (in Node's WebCrypto on
// the 2-core VM, 108 against 103 to 165 us, and 21 against 50 to 98 us:
// node bench/tokens.mjs). It holds at most one entry per key of
// BUYER_TOKEN_JWKS (16 at most), since an isolate's settings never change.
const keys = new Map();
const RSA = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' };
const EC_KEY = { name: 'ECDSA', namedCurve: 'P-256' };
const EC = { name: 'ECDSA', hash: 'SHA-256' };
export function verify_signature(kid, jwk, alg, input, signature) {
  // The byte arguments are views of the wasm's memory: copied now, before
  // anything awaits and the memory may change.
  const data = input.slice();
  const sig = signature.slice();
  const id = kid + ' ' + jwk;
  let key = keys.get(id);
  if (key === undefined) {
    key = crypto.subtle.importKey('jwk', JSON.parse(jwk), alg === 'ES256' ? EC_KEY : RSA, false, ['verify']);
    key.catch((e) => console.error(`flashgate edge: key ${kid} of BUYER_TOKEN_JWKS does not import, so no token it signs verifies: ${e}`));
    keys.set(id, key);
  }
  return key
    .then((k) => crypto.subtle.verify(alg === 'ES256' ? EC : RSA, k, sig, data))
    .then((ok) => ok === true, () => false);
}")]
extern "C" {
    /// Verifies `signature` over `input` with the public JWK `jwk` (`kid`'s,
    /// pinned to `alg`, RS256 or ES256 with its raw r‖s), in one call
    /// across the boundary; the promise resolves to whether it holds, and
    /// never rejects.
    fn verify_signature(
        kid: &str,
        jwk: &str,
        alg: &str,
        input: &[u8],
        signature: &[u8],
    ) -> js_sys::Promise;
}
