//! What answers look like, on both sides of the contract: problem codes
//! (`codes`), problem documents (`problem`), replies (`reply`), the JSON
//! views of products and reservations (`views`) and timestamps (`time`).

pub mod codes;
pub mod problem;
pub mod reply;
pub mod time;
pub mod views;
