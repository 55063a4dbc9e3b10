//! Reservation ids as buyers see them: opaque.
//!
//! Inside a product, reservation ids count up from 1, which is what keeps
//! the core's records dense. Shown as they are, a buyer's own id would tell
//! how many reservations came before it, and ids next to it would name
//! other buyers' reservations. So the API shows each id through a keyed
//! permutation of the 64-bit ids: a four-round Feistel network whose round
//! function is HMAC-SHA256 under a key derived from the gate's `ID_SECRET`
//! and the product id. It is a bijection, so it needs no storage and no
//! lookup table; without the secret, an id reveals nothing about the count,
//! and a guessed id names a real reservation with negligible probability.
//! Ids are written as 16 lowercase hex digits
//! (`flashgate_wire::bounds::valid_reservation_id`).
//!
//! The encoding is a contract, not a detail: buyers, the payment backend
//! and the admin hold ids already shown, and the origin names each order by
//! its id (`delivery::batch`), so a void sent after a change of encoding
//! would name no order the origin knows. A test pins the encoding. (A
//! SipHash round function was measured at about 3% of a buyer's read, with
//! `bench/profile.mjs`, and taken back for this reason; bench/RESULTS.md,
//! "The gate on bare workerd beside the JavaScript ceiling".)

use std::cell::RefCell;
use std::collections::HashMap;

use flashgate_wire::bounds::valid_reservation_id;
use flashgate_wire::mac::hmac_sha256;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::limits::EDGE_PRODUCTS_MAX;

const ROUNDS: u8 = 4;

/// Encodes and decodes the reservation ids of one product.
#[derive(Clone)]
pub struct IdCodec {
    /// HMAC-SHA256 keyed for this product, cloned per round.
    mac: Hmac<Sha256>,
    /// The stock shard whose ids this codec writes, of `shards`: shard i
    /// of K writes its local id n as `n × K + i`, so that the id itself
    /// names the shard that keeps it (`split`). For a product of one shard
    /// this is `n`, the encoding as it always was.
    shard: u16,
    shards: u16,
}

impl IdCodec {
    /// The codec of `product_id` under the gate's id secret.
    pub fn new(secret: &[u8], product_id: &str) -> IdCodec {
        let mut derive = hmac_sha256(secret);
        derive.update(b"flashgate reservation ids\n");
        derive.update(product_id.as_bytes());
        IdCodec {
            mac: hmac_sha256(&derive.finalize().into_bytes()),
            shard: 0,
            shards: 1,
        }
    }

    /// The codec of stock shard `shard` of `shards`.
    pub fn on_shard(self, shard: u16, shards: u16) -> IdCodec {
        assert!(shard < shards, "shard {shard} of {shards}");
        IdCodec {
            shard,
            shards,
            ..self
        }
    }

    fn round(&self, round: u8, half: u32) -> u32 {
        let mut mac = self.mac.clone();
        mac.update(&[round]);
        mac.update(&half.to_be_bytes());
        let out = mac.finalize().into_bytes();
        u32::from_be_bytes([out[0], out[1], out[2], out[3]])
    }

    fn permute(&self, id: u64) -> u64 {
        let (mut left, mut right) = ((id >> 32) as u32, id as u32);
        for r in 0..ROUNDS {
            let next = left ^ self.round(r, right);
            left = right;
            right = next;
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    fn unpermute(&self, id: u64) -> u64 {
        let (mut left, mut right) = ((id >> 32) as u32, id as u32);
        for r in (0..ROUNDS).rev() {
            let prev = right ^ self.round(r, left);
            right = left;
            left = prev;
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    /// The id a buyer sees.
    pub fn encode(&self, id: u64) -> String {
        let id = id * u64::from(self.shards) + u64::from(self.shard);
        format!("{:016x}", self.permute(id))
    }

    /// The internal id of an id a buyer sent, if it is 16 lowercase hex
    /// digits. Any such text decodes to some id; the product then finds no
    /// reservation for nearly all of them.
    pub fn decode(&self, text: &str) -> Option<u64> {
        if !valid_reservation_id(text) {
            return None;
        }
        u64::from_str_radix(text, 16)
            .ok()
            .map(|n| self.unpermute(n))
    }
}

/// The codecs of the products a gate has seen, each derived once from
/// `ID_SECRET` and the product id. Deriving one takes six SHA-256
/// compressions (the derivation's HMAC, then the codec's own keying),
/// against eight for the four rounds of a decode: the edge decodes the id
/// of every buyer's read of its hold, confirm and release. Bounded by
/// `EDGE_PRODUCTS_MAX`, cleared when full: product ids are the request's,
/// so a stranger cycling them costs the derivations it cost before, and no
/// memory. Interior mutability, because the codecs are a function of the
/// settings, which requests share (`crate::settings::Settings`).
///
/// Measured by `node --experimental-websocket bench/profile.mjs objread 5`
/// (a buyer's read of its hold), the build before and with the memo: the
/// hashing's self time per read went from 14.2 to 9.6 us.
pub struct IdCodecs {
    secret: Vec<u8>,
    known: RefCell<HashMap<String, IdCodec>>,
}

impl IdCodecs {
    pub fn new(id_secret: &[u8]) -> IdCodecs {
        IdCodecs {
            secret: id_secret.to_vec(),
            known: RefCell::new(HashMap::new()),
        }
    }

    /// The codec of `product_id`, as `IdCodec::new` derives it.
    pub fn of(&self, product_id: &str) -> IdCodec {
        if let Some(codec) = self.known.borrow().get(product_id) {
            return codec.clone();
        }
        let codec = IdCodec::new(&self.secret, product_id);
        let mut known = self.known.borrow_mut();
        if known.len() >= EDGE_PRODUCTS_MAX {
            known.clear();
        }
        known.insert(product_id.to_string(), codec.clone());
        codec
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.known.borrow().len()
    }
}

/// The stock shard of a product of `shards` that keeps the reservation of
/// internal id `id` (as `IdCodec::decode` gives it), and its id there.
pub fn split(id: u64, shards: u16) -> (u16, u64) {
    let k = u64::from(shards.max(1));
    ((id % k) as u16, id / k)
}

/// The key buyers' stock shards are drawn with (`crate::edge::shards`):
/// keyed, so that no buyer can choose its shard.
#[derive(Clone)]
pub struct ShardKey(hmac::Hmac<sha2::Sha256>);

impl ShardKey {
    pub fn new(id_secret: &[u8]) -> ShardKey {
        let mut derive = hmac_sha256(id_secret);
        derive.update(b"flashgate buyer shards\n");
        ShardKey(hmac_sha256(&derive.finalize().into_bytes()))
    }

    /// The shard of `buyer` for `product_id`, of `shards`.
    pub fn shard_of(&self, product_id: &str, buyer: &str, shards: u16) -> u16 {
        if shards <= 1 {
            return 0;
        }
        let mut mac = self.0.clone();
        mac.update(product_id.as_bytes());
        mac.update(b"\n");
        mac.update(buyer.as_bytes());
        let out = mac.finalize().into_bytes();
        let h = u64::from_be_bytes(out[..8].try_into().expect("8 bytes"));
        (h % u64::from(shards)) as u16
    }
}

/// The key of the buyer ids derived from an identity provider's subjects
/// that are not buyer ids (`flashgate_wire::token::buyer_id`: `auth0|…`,
/// a long uid), derived from `ID_SECRET`. It keys a name, not a secret
/// check: rotating `ID_SECRET` would make each such user a new buyer, as
/// it already renames reservation ids.
pub fn buyer_ids_key(id_secret: &[u8]) -> Hmac<Sha256> {
    let mut derive = hmac_sha256(id_secret);
    derive.update(b"flashgate buyer ids from a provider\n");
    hmac_sha256(&derive.finalize().into_bytes())
}

/// The key the waiting room's proof-of-work challenges are signed with
/// (`crate::edge::pow`), derived from `ID_SECRET`. ALTCHA's libraries key
/// their HMAC with a string: it is the hex of the derived key, so that a
/// test can check a challenge with theirs.
#[derive(Clone)]
pub struct PowKey(pub(crate) flashgate_wire::altcha::PowSecret);

impl PowKey {
    pub fn new(id_secret: &[u8]) -> PowKey {
        let mut derive = hmac_sha256(id_secret);
        derive.update(b"flashgate proof of work\n");
        PowKey(flashgate_wire::altcha::PowSecret::new(hex::encode(
            derive.finalize().into_bytes(),
        )))
    }
}

/// The key tickets are signed with.
#[derive(Clone)]
pub struct TicketKey {
    mac: Hmac<Sha256>,
    /// The infinite queue's tickets' key (`crate::edge::ticket`).
    infinite_queue: Hmac<Sha256>,
}

impl TicketKey {
    pub fn new(id_secret: &[u8]) -> TicketKey {
        let derive = |label: &[u8]| {
            let mut derive = hmac_sha256(id_secret);
            derive.update(label);
            hmac_sha256(&derive.finalize().into_bytes())
        };
        TicketKey {
            mac: derive(b"flashgate waiting-room tickets\n"),
            infinite_queue: derive(b"flashgate waiting-room tickets never admitted\n"),
        }
    }

    fn key(&self, infinite_queue: bool) -> &Hmac<Sha256> {
        if infinite_queue {
            &self.infinite_queue
        } else {
            &self.mac
        }
    }

    pub(crate) fn tag(&self, infinite_queue: bool, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.key(infinite_queue).clone();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether `given` is the tag of `parts`, compared in constant time.
    pub(crate) fn verify_tag(&self, infinite_queue: bool, parts: &[&[u8]], given: &[u8]) -> bool {
        let mut mac = self.key(infinite_queue).clone();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.verify_slice(given).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// A provider's subject that is not a buyer id becomes the same buyer
    /// at every token, under this gate's secret alone: another secret,
    /// another issuer or another subject is another buyer.
    #[test]
    fn a_providers_subject_maps_to_one_buyer_under_the_id_secret() {
        use flashgate_wire::bounds::valid_buyer_id;
        use flashgate_wire::token::buyer_id;
        let iss = "https://shop.eu.auth0.com/";
        let sub = "auth0|5f7c8ec7c33c6c004bbafe82";
        let key = buyer_ids_key(SECRET);
        let id = buyer_id(&key, iss, sub);
        assert!(valid_buyer_id(&id) && id.starts_with("h."), "{id}");
        assert_eq!(buyer_id(&buyer_ids_key(SECRET), iss, sub), id);
        let other_secret = buyer_ids_key(b"fedcba9876543210fedcba9876543210");
        for other in [
            buyer_id(&other_secret, iss, sub),
            buyer_id(&key, "https://other.eu.auth0.com/", sub),
            buyer_id(&key, iss, "auth0|5f7c8ec7c33c6c004bbafe83"),
        ] {
            assert_ne!(other, id);
        }
        // Pinned, from Python's hmac: the name is a contract, since a
        // change would make every such user a new buyer.
        assert_eq!(id, PINNED);
        // A subject that is a buyer id is kept, so the shop finds it.
        assert_eq!(buyer_id(&key, iss, "alice"), "alice");
    }

    const PINNED: &str = "h.tizd4dS-SRBnXLTuV2kk4WfXX0ULTeaM11vvTEH8R8g";

    #[test]
    fn a_shards_ids_name_their_shard_and_one_shard_changes_nothing() {
        let c = IdCodec::new(SECRET, "p1");
        for id in [1u64, 2, 77, 1 << 40] {
            assert_eq!(c.clone().on_shard(0, 1).encode(id), c.encode(id));
        }
        for k in [2u16, 8, 64] {
            let mut seen = std::collections::HashSet::new();
            for i in 0..k {
                let shard = c.clone().on_shard(i, k);
                for local in 1..50u64 {
                    let e = shard.encode(local);
                    assert!(seen.insert(e.clone()), "{e} twice (K={k})");
                    let internal = c.decode(&e).expect("valid");
                    assert_eq!(split(internal, k), (i, local), "K={k} i={i} n={local}");
                }
            }
        }
    }

    /// A remembered codec is the one derived anew, for every product and
    /// past the bound, and the memo never holds more than the bound.
    #[test]
    fn a_remembered_codec_is_the_derived_one_and_the_memo_is_bounded() {
        let codecs = IdCodecs::new(SECRET);
        for round in 0..2 {
            for n in 0..EDGE_PRODUCTS_MAX + 3 {
                let product = format!("p{}", n % (EDGE_PRODUCTS_MAX + 3));
                let id = (n as u64) * 7 + 1;
                let fresh = IdCodec::new(SECRET, &product).encode(id);
                assert_eq!(
                    codecs.of(&product).encode(id),
                    fresh,
                    "{product} round {round}"
                );
                assert_eq!(codecs.of(&product).decode(&fresh), Some(id), "{product}");
                assert!(codecs.held() <= EDGE_PRODUCTS_MAX, "{} held", codecs.held());
            }
        }
        let other = IdCodecs::new(b"fedcba9876543210fedcba9876543210");
        assert_ne!(other.of("p1").encode(1), codecs.of("p1").encode(1));
    }

    #[test]
    fn ids_round_trip_and_look_random() {
        let c = IdCodec::new(SECRET, "p1");
        let mut seen = std::collections::HashSet::new();
        for id in (1..2_000).chain([u64::MAX, 0, 1 << 40]) {
            let e = c.encode(id);
            assert!(valid_reservation_id(&e), "{e}");
            assert_eq!(c.decode(&e), Some(id));
            assert!(seen.insert(e));
        }
        // Neighbouring ids share no visible order.
        let (a, b) = (c.encode(1), c.encode(2));
        assert_ne!(a[..8], b[..8]);
        // Another product, or another secret, sees other ids.
        assert_ne!(IdCodec::new(SECRET, "p2").encode(1), a);
        assert_ne!(
            IdCodec::new(b"another-secret-of-thirty-two-byte", "p1").encode(1),
            a
        );
        for bad in [
            "",
            "1",
            "0000000000000001x",
            "000000000000000G",
            "00000000000000001",
        ] {
            assert_eq!(c.decode(bad), None, "{bad}");
        }
    }

    /// The encoding ids already shown were made with: see the module's
    /// comment. The values were computed apart from this code, by a Python
    /// model of the construction (its `hmac` and `hashlib`).
    #[test]
    fn the_encoding_is_pinned() {
        let c = IdCodec::new(SECRET, "p1");
        assert_eq!(c.encode(1), "d1203a682d58e845");
        assert_eq!(c.encode(u64::MAX), "6e3548112671bf17");
        assert_eq!(c.decode("d1203a682d58e845"), Some(1));
    }
}
