//! The product's Durable Object as a state machine over its storage
//! (`product`): one command applied to the core and its reply (`service`),
//! commands batched into one synchronous turn (`group_commit`), its SQLite
//! rows (`sql`), outbox batches to the origin (`delivery`), the live
//! updates it pushes (`live`), how long a stock shard waits for its home
//! (`home_call`), and the catalog object that lists products (`catalog`).
//! Pure: `crate::wasm::object` executes it. Never imports
//! `crate::edge`.

pub mod catalog;
pub mod delivery;
pub mod group_commit;
pub mod home_call;
pub mod live;
pub mod product;
pub mod service;
pub mod sql;
