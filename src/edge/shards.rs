//! Which object a command goes to, for a product whose stock lives in K
//! stock shards (`flashgate_core::escrow`). Pure: given the command, K
//! (from the product's snapshot) and the key, it names the object and the
//! command to send it.
//!
//! - A reserve goes to shard `keyed_hash(product, buyer) mod K`, so all of
//!   a buyer's reservations live on one shard and the per-buyer limit stays
//!   local and atomic there. The hash is keyed (by a key derived from
//!   `ID_SECRET`), so that no buyer can choose a shard, say the one a
//!   script has seen refill.
//! - A read, confirm, cancel or void names a reservation whose id names its
//!   shard (`ids::split`).
//! - Shard 0 is the product's own object, which takes the command bare; a
//!   product of one shard is exactly that, with no extra hop and ids as
//!   they always were.

use crate::ids::{split, ShardKey};
use crate::protocol::{shard_object, Command, ShardAt, ShardOp};

/// Where a command goes: the object's name and what to send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub object: String,
    pub command: Command,
}

/// The stock shard `cmd` goes to, of a product of `shards`: a reserve's
/// buyer's, an id's own; 0 (home) for everything else.
pub fn shard_of(cmd: &Command, shards: u16, key: &ShardKey) -> u16 {
    if shards <= 1 {
        return 0;
    }
    match cmd {
        Command::Reserve {
            product_id, buyer, ..
        } => key.shard_of(product_id, buyer, shards),
        Command::GetReservation { reservation_id, .. }
        | Command::Confirm { reservation_id, .. }
        | Command::Cancel { reservation_id, .. }
        | Command::Void { reservation_id, .. } => split(*reservation_id, shards).0,
        _ => 0,
    }
}

/// Whether stock shard `index` exists, by the snapshot's bits
/// (`Snapshot::existing`): an id naming one that does not names nothing.
pub fn exists(existing: u64, index: u16) -> bool {
    index == 0 || (index < 64 && existing & (1 << index) != 0)
}

/// The object and command for `cmd` of a product of `shards` stock shards.
pub fn target(cmd: Command, shards: u16, key: &ShardKey) -> Target {
    let index = shard_of(&cmd, shards, key);
    target_at(cmd, shards, index)
}

/// `target`, for a command whose shard (`shard_of`) the caller knows.
pub fn target_at(cmd: Command, shards: u16, index: u16) -> Target {
    let product_id = cmd.product_id().to_string();
    // Ids carry their shard; the shard knows its own (`IdCodec::on_shard`).
    let local = |id: u64| split(id, shards).1;
    if let Some(at) = ShardAt::new(index, shards) {
        if let Some(operation) = ShardOp::of(cmd.clone(), local) {
            return Target {
                object: shard_object(&product_id, index),
                command: Command::Shard {
                    product_id,
                    at,
                    operation,
                },
            };
        }
    }
    // Home's own (shard 0), with its local id when the product is sharded.
    let command = match cmd {
        Command::GetReservation {
            product_id,
            buyer,
            reservation_id,
        } if shards > 1 => Command::GetReservation {
            product_id,
            buyer,
            reservation_id: local(reservation_id),
        },
        Command::Confirm {
            product_id,
            buyer,
            reservation_id,
            payment_ref,
        } if shards > 1 => Command::Confirm {
            product_id,
            buyer,
            reservation_id: local(reservation_id),
            payment_ref,
        },
        Command::Cancel {
            product_id,
            buyer,
            reservation_id,
        } if shards > 1 => Command::Cancel {
            product_id,
            buyer,
            reservation_id: local(reservation_id),
        },
        Command::Void {
            product_id,
            reservation_id,
        } if shards > 1 => Command::Void {
            product_id,
            reservation_id: local(reservation_id),
        },
        other => other,
    };
    Target {
        object: product_id,
        command,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{IdCodec, ShardKey};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn reserve(buyer: &str) -> Command {
        Command::Reserve {
            product_id: "p1".into(),
            buyer: buyer.into(),
            idem_key: "k".into(),
            quantity: 1,
            ticket: None,
        }
    }

    #[test]
    fn one_shard_sends_every_command_bare_to_the_product() {
        let key = ShardKey::new(SECRET);
        for cmd in [
            reserve("b1"),
            Command::Confirm {
                product_id: "p1".into(),
                buyer: "b1".into(),
                reservation_id: 77,
                payment_ref: "x".into(),
            },
        ] {
            let t = target(cmd.clone(), 1, &key);
            assert_eq!(
                t,
                Target {
                    object: "p1".into(),
                    command: cmd
                }
            );
        }
    }

    #[test]
    fn buyers_spread_over_the_shards_and_stay_on_theirs() {
        let key = ShardKey::new(SECRET);
        let mut counts = [0u32; 8];
        for b in 0..8_000 {
            let buyer = format!("buyer-{b}");
            let s = key.shard_of("p1", &buyer, 8);
            assert_eq!(s, key.shard_of("p1", &buyer, 8));
            counts[usize::from(s)] += 1;
        }
        // Each of 8 shards gets about 1,000 of 8,000 buyers.
        assert!(
            counts.iter().all(|&n| (800..1_200).contains(&n)),
            "{counts:?}"
        );
        // Another key draws other shards: a buyer cannot predict its own.
        let other = ShardKey::new(b"another-secret-of-thirty-two-byte");
        let moved = (0..1_000)
            .filter(|b| {
                let buyer = format!("buyer-{b}");
                key.shard_of("p1", &buyer, 8) != other.shard_of("p1", &buyer, 8)
            })
            .count();
        assert!(moved > 700, "{moved}");
    }

    #[test]
    fn an_id_goes_to_the_shard_that_wrote_it_with_its_local_id() {
        let key = ShardKey::new(SECRET);
        let codec = IdCodec::new(SECRET, "p1");
        for (index, local) in [(0u16, 5u64), (3, 9), (7, 1)] {
            let public = codec.clone().on_shard(index, 8).encode(local);
            let internal = codec.decode(&public).unwrap();
            let t = target(
                Command::Cancel {
                    product_id: "p1".into(),
                    buyer: "b".into(),
                    reservation_id: internal,
                },
                8,
                &key,
            );
            let bare = Command::Cancel {
                product_id: "p1".into(),
                buyer: "b".into(),
                reservation_id: local,
            };
            if index == 0 {
                assert_eq!(
                    t,
                    Target {
                        object: "p1".into(),
                        command: bare
                    }
                );
            } else {
                assert_eq!(t.object, format!("p1#{index}"));
                assert_eq!(
                    t.command,
                    Command::Shard {
                        product_id: "p1".into(),
                        at: ShardAt::new(index, 8).unwrap(),
                        operation: ShardOp::Cancel {
                            buyer: "b".into(),
                            reservation_id: local,
                        },
                    }
                );
                assert!(exists(1 | 1 << index, index) && !exists(1, index));
            }
        }
    }
}
