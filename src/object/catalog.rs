//! The catalog: which products exist, so that `GET /` can list them.
//!
//! One `Catalog` Durable Object holds the list, over the same `SqlDb` as
//! the products' objects, so this module runs on real SQLite natively. The
//! edge registers a product before it forwards the admin's update that may
//! create it; registering is idempotent. An id whose update then failed
//! lists nothing: the listing reads each product through the edge cache,
//! which knows it as unknown. Each product's own object stays the only
//! source of its state; the catalog holds ids and nothing else.

use flashgate_wire::bounds;
use serde::Deserialize;

use crate::limits::{CATALOG_PAGE_MAX, LISTED_MAX, PRODUCTS_MAX};
use crate::object::product::StorageError;
use crate::object::sql::{SqlDb, SqlValue};
use crate::protocol::CatalogPage;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS catalog (
    product_id TEXT PRIMARY KEY,
    registered_at_ms INTEGER NOT NULL)";

/// What registering a product did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    New,
    Known,
    Full,
}

#[derive(Deserialize)]
struct Count {
    n: i64,
}

#[derive(Deserialize)]
struct Id {
    product_id: String,
}

fn count(db: &mut impl SqlDb, filter: &str) -> Result<i64, StorageError> {
    let rows: Vec<Count> = db.query(&format!("SELECT COUNT(*) AS n FROM catalog{filter}"))?;
    Ok(rows.first().map_or(0, |c| c.n))
}

/// Registers `product_id` (a valid id: the edge routed it), unless the
/// catalog is full.
pub fn register(
    db: &mut impl SqlDb,
    product_id: &str,
    now_ms: u64,
) -> Result<Registered, StorageError> {
    // The id is matched by its grammar (letters, digits, `_`, `-`), so it
    // is safe inside quotes; `query` takes no parameters.
    if !bounds::valid_product_id(product_id) {
        return Err(StorageError(format!("not a product id: {product_id:?}")));
    }
    db.atomically(|db| {
        db.exec(SCHEMA, &[])?;
        if count(db, &format!(" WHERE product_id = '{product_id}'"))? > 0 {
            return Ok(Registered::Known);
        }
        if count(db, "")? >= PRODUCTS_MAX as i64 {
            return Ok(Registered::Full);
        }
        db.exec(
            "INSERT INTO catalog (product_id, registered_at_ms) VALUES (?, ?)",
            &[
                SqlValue::Text(product_id.to_string()),
                SqlValue::Int(now_ms as i64),
            ],
        )?;
        Ok(Registered::New)
    })
}

/// The newest `LISTED_MAX` registered products, newest first.
pub fn newest(db: &mut impl SqlDb) -> Result<Vec<String>, StorageError> {
    db.exec(SCHEMA, &[])?;
    let rows: Vec<Id> = db.query(&format!(
        "SELECT product_id FROM catalog ORDER BY registered_at_ms DESC, product_id LIMIT {LISTED_MAX}"
    ))?;
    Ok(rows.into_iter().map(|r| r.product_id).collect())
}

#[derive(Deserialize)]
struct Row {
    n: i64,
    product_id: String,
}

/// The registered ids after cursor `after`, oldest first, at most
/// `CATALOG_PAGE_MAX` of them: the edge's view reads on from where it
/// stopped (`edge::catalog`). The cursor is the row's rowid, which only
/// grows: rows are never deleted.
pub fn ids_after(db: &mut impl SqlDb, after: u64) -> Result<CatalogPage, StorageError> {
    db.exec(SCHEMA, &[])?;
    let after = after.min(i64::MAX as u64);
    let rows: Vec<Row> = db.query(&format!(
        "SELECT rowid AS n, product_id FROM catalog WHERE rowid > {after} ORDER BY rowid LIMIT {}",
        CATALOG_PAGE_MAX + 1
    ))?;
    let more = rows.len() > CATALOG_PAGE_MAX;
    let rows = &rows[..rows.len().min(CATALOG_PAGE_MAX)];
    Ok(CatalogPage {
        next: rows.last().map_or(after, |r| r.n.max(0) as u64),
        ids: rows.iter().map(|r| r.product_id.clone()).collect(),
        more,
    })
}
