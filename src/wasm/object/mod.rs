//! The Durable Objects' shells: a product's (`product`), the catalog's
//! (`catalog`), and the SQL storage they write through (`sqlite`).

pub mod catalog;
pub mod product;
pub mod sqlite;
