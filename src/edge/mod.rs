//! The edge: what the Worker decides before (and instead of) a trip to a
//! product's object. Routing and validation into a `Command` (`routes`),
//! who may do what (`auth`), the rate limits' policies (`rate_limit`),
//! waiting-room tickets (`ticket`) and the checkable record of the room
//! (`record`), the snapshots the edge answers from
//! (`cache`) and the pages it serves (`page`). Pure: `crate::wasm::edge`
//! executes it. Never imports `crate::object`.

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
