//! The edge: what the Worker decides before (and instead of) a trip to a
//! product's object. A request's steps, in their order (`pipeline`): its
//! route and its validation into a `Command` (`routes`), who may do what
//! (`auth`), the rate limits' policies (`rate_limit`), which product ids
//! exist (`catalog`), the snapshots the edge answers from (`cache`), and
//! which of a product's stock shards a command goes to (`shards`). The
//! waiting room's answers (`room`): its tickets (`ticket`), the proof of
//! work at the join (`pow`) and the checkable record of the room
//! (`record`). The reads it serves beside its objects (`admin`), a
//! product's history merged from its objects' (`history`), the pages
//! it serves (`page`) and the files it serves as they are (`assets`).
//! Pure: `crate::wasm::edge` executes it. Never imports `crate::object`.

pub mod admin;
pub mod assets;
pub mod auth;
pub mod cache;
pub mod catalog;
pub mod history;
pub mod page;
pub mod pipeline;
pub mod pow;
pub mod rate_limit;
pub mod record;
pub mod room;
pub mod routes;
pub mod shards;
pub mod ticket;
