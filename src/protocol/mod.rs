//! The contract between the edge and the product object: the `Command`
//! the edge sends (validated, its actor proven), how it travels (a header
//! when it fits), the `Snapshot` the object publishes back, and the
//! `BuyerFilter` inside it. The edge (`crate::edge`) and the object
//! (`crate::object::product`) never import each other; both import this.

pub mod buyer_filter;
pub mod snapshot;

use crate::limits::COMMAND_HEADER_BYTES_MAX;
use flashgate_core::escrow::{limits::SHARDS_MAX, HomePush, ShardReport};
use flashgate_core::{Arrivals, ConfigPatch, Ticket};
use flashgate_wire::SaleState;
use serde::{Deserialize, Serialize};

/// A validated request for a product's Durable Object. The buyer or admin
/// identity has been checked by the edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    GetProduct {
        product_id: String,
    },
    Reserve {
        product_id: String,
        buyer: String,
        idem_key: String,
        quantity: u32,
        /// The waiting-room ticket the edge verified, if one was sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<Ticket>,
    },
    GetReservation {
        product_id: String,
        buyer: String,
        reservation_id: u64,
    },
    Confirm {
        product_id: String,
        buyer: String,
        reservation_id: u64,
        payment_ref: String,
    },
    Cancel {
        product_id: String,
        buyer: String,
        reservation_id: u64,
    },
    Configure {
        product_id: String,
        patch: ConfigPatch,
    },
    Restock {
        product_id: String,
        units: u64,
    },
    Stats {
        product_id: String,
    },
    /// The object's history (`flashgate_core::history`), answered with a
    /// `HistoryAnswer`; the edge merges home's with its shards'.
    History {
        product_id: String,
    },
    Void {
        product_id: String,
        reservation_id: u64,
    },
    /// The edge's refresh of its snapshot, with the tickets it issued since
    /// the last one.
    Sync {
        product_id: String,
        #[serde(default)]
        arrivals: Arrivals,
    },
    /// A viewer's live-update socket: the object accepts it (the request
    /// carries the WebSocket upgrade) or refuses it past its cap. The buyer
    /// is the viewer's, when its page had a session.
    Watch {
        product_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        buyer: Option<String>,
        /// The viewer's client (`live::client_tag`), whose sockets the
        /// object counts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
    },
    /// A buyer's command (or an admin's void) for stock shard `at`, sent
    /// to the shard's object (`shard_object`). Only what a shard does can
    /// be said here; the product's own object (shard 0) takes the bare
    /// command. A shard that does not exist yet is created by its first
    /// reserve.
    Shard {
        product_id: String,
        at: ShardAt,
        operation: ShardOp,
    },
    /// A stock shard's report to its product's home object, which answers
    /// with a `flashgate_core::escrow::ShardReply`. Only an object sends it.
    #[serde(alias = "shard_report")]
    Report {
        product_id: String,
        report: ShardReport,
    },
    /// Home's push to its stock shard `at` (rules, a drain), which answers
    /// with a `ShardAnswer`. Only an object sends it.
    Push {
        product_id: String,
        at: ShardAt,
        push: HomePush,
    },
}

/// Stock shard `index` of `count`: 1 ≤ index < count ≤ `SHARDS_MAX`,
/// checked here and nowhere else (shard 0 is the product's own object).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ShardAt {
    index: u16,
    count: u16,
}

impl ShardAt {
    pub fn new(index: u16, count: u16) -> Option<ShardAt> {
        (index >= 1 && index < count && count <= SHARDS_MAX).then_some(ShardAt { index, count })
    }

    pub fn index(self) -> u16 {
        self.index
    }

    pub fn count(self) -> u16 {
        self.count
    }
}

impl<'de> Deserialize<'de> for ShardAt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShardAt, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            index: u16,
            count: u16,
        }
        let raw = Raw::deserialize(d)?;
        ShardAt::new(raw.index, raw.count)
            .ok_or_else(|| serde::de::Error::custom("not a stock shard of the product"))
    }
}

/// What a stock shard does: a buyer's reserve, read, confirm and cancel,
/// and the admin's void of an order it sold. Nothing else reaches a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShardOp {
    Reserve {
        buyer: String,
        idem_key: String,
        quantity: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<Ticket>,
    },
    Read {
        buyer: String,
        reservation_id: u64,
    },
    Confirm {
        buyer: String,
        reservation_id: u64,
        payment_ref: String,
    },
    Cancel {
        buyer: String,
        reservation_id: u64,
    },
    Void {
        reservation_id: u64,
    },
    /// The shard's history, for the admin's read of the product's.
    History,
}

impl ShardOp {
    /// The shard's op for a command the edge built, with the shard's own
    /// reservation id; `None` for a command no shard takes.
    pub fn of(cmd: Command, local_id: impl Fn(u64) -> u64) -> Option<ShardOp> {
        Some(match cmd {
            Command::Reserve {
                buyer,
                idem_key,
                quantity,
                ticket,
                ..
            } => ShardOp::Reserve {
                buyer,
                idem_key,
                quantity,
                ticket,
            },
            Command::GetReservation {
                buyer,
                reservation_id,
                ..
            } => ShardOp::Read {
                buyer,
                reservation_id: local_id(reservation_id),
            },
            Command::Confirm {
                buyer,
                reservation_id,
                payment_ref,
                ..
            } => ShardOp::Confirm {
                buyer,
                reservation_id: local_id(reservation_id),
                payment_ref,
            },
            Command::Cancel {
                buyer,
                reservation_id,
                ..
            } => ShardOp::Cancel {
                buyer,
                reservation_id: local_id(reservation_id),
            },
            Command::Void { reservation_id, .. } => ShardOp::Void {
                reservation_id: local_id(reservation_id),
            },
            Command::History { .. } => ShardOp::History,
            _ => return None,
        })
    }

    /// The command this op is, for the shard's own gate to run.
    pub fn command(&self, product_id: &str) -> Command {
        let product_id = product_id.to_string();
        match self.clone() {
            ShardOp::Reserve {
                buyer,
                idem_key,
                quantity,
                ticket,
            } => Command::Reserve {
                product_id,
                buyer,
                idem_key,
                quantity,
                ticket,
            },
            ShardOp::Read {
                buyer,
                reservation_id,
            } => Command::GetReservation {
                product_id,
                buyer,
                reservation_id,
            },
            ShardOp::Confirm {
                buyer,
                reservation_id,
                payment_ref,
            } => Command::Confirm {
                product_id,
                buyer,
                reservation_id,
                payment_ref,
            },
            ShardOp::Cancel {
                buyer,
                reservation_id,
            } => Command::Cancel {
                product_id,
                buyer,
                reservation_id,
            },
            ShardOp::Void { reservation_id } => Command::Void {
                product_id,
                reservation_id,
            },
            ShardOp::History => Command::History { product_id },
        }
    }

    /// The units a reserve asks for; 0 for anything else.
    pub fn units(&self) -> u64 {
        match self {
            ShardOp::Reserve { quantity, .. } => u64::from(*quantity),
            _ => 0,
        }
    }
}

/// A stock shard's answer to home's push: its report, and when it has no
/// unit available, the buyers whose replays must reach it (for the edge's
/// `sold_out`, `snapshot::SoldOut`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShardAnswer {
    pub report: ShardReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buyers: Option<buyer_filter::BuyerFilter>,
}

/// An object's answer to `Command::History`: its own history, and the
/// product's stock shards (home's count; 1 from a shard), whose histories
/// the edge reads next.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistoryAnswer {
    pub shards: u16,
    pub history: flashgate_core::Served,
}

/// The name of the object of stock shard `index` (≥ 1) of `product_id`. A
/// product id never holds `#`, so no product's own object has this name.
pub fn shard_object(product_id: &str, index: u16) -> String {
    debug_assert!(index >= 1);
    format!("{product_id}#{index}")
}

/// The request header that carries a watch to an object: a WebSocket
/// upgrade must be a request, and a header is read synchronously, where a
/// body is a stream read through a promise. Every other command, the
/// Worker's and one object's to another, goes by RPC, as its JSON (the
/// object's `command`).
pub const COMMAND_HEADER: &str = "flashgate-command";

impl Command {
    /// The command as JSON with every non-ASCII character escaped
    /// (`\uXXXX`), so that it is a valid header value; `None` if it is
    /// longer than `COMMAND_HEADER_BYTES_MAX`.
    pub fn to_header(&self) -> Option<String> {
        let json = serde_json::to_string(self).ok()?;
        let mut out = String::with_capacity(json.len());
        for c in json.chars() {
            if c.is_ascii() && !c.is_ascii_control() {
                out.push(c);
            } else {
                // Inside JSON, non-ASCII only occurs in strings, where an
                // escape means the same; controls are escaped already.
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
        (out.len() <= COMMAND_HEADER_BYTES_MAX).then_some(out)
    }

    /// A read, buyer's or admin's: it asks for no change (the gate's read
    /// methods take it shared), so a batch of nothing else writes nothing
    /// and needs no transaction (`ProductObject::commands`).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Command::GetProduct { .. }
                | Command::GetReservation { .. }
                | Command::Stats { .. }
                | Command::History { .. }
                | Command::Shard {
                    operation: ShardOp::Read { .. } | ShardOp::History,
                    ..
                }
        )
    }

    /// The product the command is for.
    pub fn product_id(&self) -> &str {
        match self {
            Command::GetProduct { product_id }
            | Command::Reserve { product_id, .. }
            | Command::GetReservation { product_id, .. }
            | Command::Confirm { product_id, .. }
            | Command::Cancel { product_id, .. }
            | Command::Configure { product_id, .. }
            | Command::Restock { product_id, .. }
            | Command::Stats { product_id }
            | Command::History { product_id }
            | Command::Void { product_id, .. }
            | Command::Sync { product_id, .. }
            | Command::Watch { product_id, .. }
            | Command::Shard { product_id, .. }
            | Command::Report { product_id, .. }
            | Command::Push { product_id, .. } => product_id,
        }
    }
}

/// A page of the catalog's registered ids, in the order they were
/// registered: the ids after the cursor the edge sent, the cursor after
/// them, and whether more follow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogPage {
    pub ids: Vec<String>,
    pub next: u64,
    pub more: bool,
}

/// Whether a product, as the edge reads it, belongs in the listing: open
/// or scheduled (a buyer can act on it now or soon).
pub fn listed(state: SaleState) -> bool {
    matches!(state, SaleState::Open | SaleState::Scheduled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_goes_as_an_ascii_header_and_comes_back_equal() {
        let cmd = Command::Reserve {
            product_id: "p1".into(),
            buyer: "买家-ü-😀".into(),
            idem_key: "k\"1".into(),
            quantity: 2,
            ticket: None,
        };
        let header = cmd.to_header().expect("fits");
        assert!(
            header.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{header}"
        );
        assert_eq!(serde_json::from_str::<Command>(&header).unwrap(), cmd);
    }

    #[test]
    fn a_shard_is_named_only_within_its_bounds() {
        assert!(ShardAt::new(1, 2).is_some());
        assert!(ShardAt::new(63, SHARDS_MAX).is_some());
        for (index, count) in [(0, 8), (8, 8), (9, 8), (1, SHARDS_MAX + 1), (1, 1)] {
            assert!(ShardAt::new(index, count).is_none(), "{index} of {count}");
            let json = format!(
                r#"{{"op":"shard","product_id":"p","at":{{"index":{index},"count":{count}}},"operation":{{"kind":"void","reservation_id":1}}}}"#
            );
            assert!(serde_json::from_str::<Command>(&json).is_err(), "{json}");
        }
        // What a shard does goes there; nothing else can be said.
        let cmd = Command::Shard {
            product_id: "p".into(),
            at: ShardAt::new(3, 8).unwrap(),
            operation: ShardOp::Cancel {
                buyer: "b".into(),
                reservation_id: 4,
            },
        };
        let back: Command = serde_json::from_str(&cmd.to_header().unwrap()).unwrap();
        assert_eq!(back, cmd);
        let restock = Command::Restock {
            product_id: "p".into(),
            units: 1,
        };
        assert_eq!(ShardOp::of(restock, |id| id), None);
    }

    /// Home's push carries its waiting room, whose tickets not yet admitted
    /// are counted per arrival second (a map keyed by the second). A
    /// shard must read it back: a push it cannot read is a drain that
    /// fails, and home then never proves the product sold out.
    #[test]
    fn a_push_with_a_waiting_room_that_has_tickets_comes_back_equal() {
        let patch = ConfigPatch {
            stock_total: Some(10),
            shards: Some(2),
            admit_per_s: Some(1),
            ..ConfigPatch::default()
        };
        let mut home = flashgate_core::Gate::create(1_000, &patch).expect("a product");
        let mut arrivals = Arrivals::default();
        for (i, arrived_ms) in [1_000, 1_500, 5_000].into_iter().enumerate() {
            let t = Ticket {
                arrived_ms,
                tiebreak: i as u32,
                infinite_queue: false,
            };
            arrivals.add(&t, None);
        }
        home.handle_arrivals(5_000, &arrivals);
        assert!(
            !home.admission().buckets.is_empty(),
            "tickets wait in the room"
        );
        let push = home.push_for(1, true).expect("a shard");
        let cmd = Command::Push {
            product_id: "p1".into(),
            at: ShardAt::new(1, 2).unwrap(),
            push,
        };
        let body = serde_json::to_string(&cmd).unwrap();
        let back: Command = serde_json::from_str(&body).expect("the shard reads the push");
        assert_eq!(back, cmd);
        if let Some(header) = cmd.to_header() {
            assert_eq!(serde_json::from_str::<Command>(&header).unwrap(), cmd);
        }
    }

    #[test]
    fn a_command_too_long_for_a_header_has_none() {
        let mut arrivals = flashgate_core::Arrivals::default();
        for s in 0..2_000u64 {
            let t = flashgate_core::Ticket {
                arrived_ms: s * 1000,
                tiebreak: 1,
                infinite_queue: false,
            };
            arrivals.add(&t, None);
        }
        let cmd = Command::Sync {
            product_id: "p1".into(),
            arrivals,
        };
        assert!(serde_json::to_string(&cmd).unwrap().len() > COMMAND_HEADER_BYTES_MAX);
        assert_eq!(cmd.to_header(), None);
    }
}
