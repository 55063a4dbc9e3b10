//! The contract between the edge and the product object: the `Command`
//! the edge sends (validated, its actor proven), how it travels (a header
//! when it fits), the `Snapshot` the object publishes back, and the
//! `BuyerFilter` inside it. The edge (`crate::edge`) and the object
//! (`crate::object::product`) never import each other; both import this.

pub mod buyer_filter;
pub mod snapshot;

use crate::limits::COMMAND_HEADER_BYTES_MAX;
use flashgate_core::escrow::ShardReport;
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
    /// A buyer's command (or an admin's void) for stock shard `index` of
    /// `count` (≥ 1; shard 0 is the product's own object, which takes the
    /// command bare), sent to the shard's object (`shard_object`). A shard
    /// that does not exist yet is created by its first reserve.
    OnShard {
        index: u16,
        count: u16,
        command: Box<Command>,
    },
    /// A stock shard's report to its product's home object, which answers
    /// with a `flashgate_core::escrow::ShardReply`. Only an object sends it.
    ShardReport {
        product_id: String,
        report: ShardReport,
    },
}

/// The name of the object of stock shard `index` (≥ 1) of `product_id`. A
/// product id never holds `#`, so no product's own object has this name.
pub fn shard_object(product_id: &str, index: u16) -> String {
    debug_assert!(index >= 1);
    format!("{product_id}#{index}")
}

/// The request header that carries a command from the Worker to its
/// object, when it fits: a header is read synchronously, where a body is a
/// stream read through a promise.
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
        match self {
            Command::OnShard { command, .. } => command.is_read(),
            _ => matches!(
                self,
                Command::GetProduct { .. } | Command::GetReservation { .. } | Command::Stats { .. }
            ),
        }
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
            | Command::Void { product_id, .. }
            | Command::Sync { product_id, .. }
            | Command::Watch { product_id, .. }
            | Command::ShardReport { product_id, .. } => product_id,
            Command::OnShard { command, .. } => command.product_id(),
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
    fn a_command_too_long_for_a_header_goes_as_the_body() {
        let mut arrivals = flashgate_core::Arrivals::default();
        for s in 0..2_000u64 {
            let t = flashgate_core::Ticket {
                arrived_ms: s * 1000,
                tiebreak: 1,
                shadow: false,
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
