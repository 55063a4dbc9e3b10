//! The edge: what the Worker decides before (and instead of) a trip to a
//! product's object. Routing and validation into a `Command` (`routes`),
//! who may do what (`auth`), which product ids exist (`catalog`), the rate
//! limits' policies (`rate_limit`), waiting-room tickets (`ticket`), the
//! proof of work at the join (`pow`) and the checkable record of the room
//! (`record`), which of a product's stock shards a command goes to
//! (`shards`), the snapshots the edge answers from (`cache`), the pages it
//! serves (`page`) and the files it serves as they are (`assets`). Pure:
//! `crate::wasm::edge` executes it. Never imports `crate::object`.

pub mod assets;
pub mod auth;
pub mod cache;
pub mod catalog;
pub mod page;
pub mod pow;
pub mod rate_limit;
pub mod record;
pub mod routes;
pub mod shards;
pub mod ticket;
