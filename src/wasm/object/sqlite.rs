//! `SqlDb` over the Durable Object's SQLite storage. Every call is
//! synchronous, so statements run in the turn that decided them.

use serde::de::DeserializeOwned;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsCast, JsValue};
use worker::{js_sys, State};

use crate::http::views;
use crate::limits::ROWS_PER_CALL_MAX;
use crate::object::product::StorageError;
use crate::object::sql::{SqlDb, SqlValue};

#[wasm_bindgen]
extern "C" {
    /// The part of `DurableObjectStorage` that workers-rs 0.8 does not bind.
    type SyncStorage;

    /// Runs the callback in a transaction: if it throws, every write it
    /// made is rolled back and the error is rethrown.
    #[wasm_bindgen(method, catch, js_name = transactionSync)]
    fn transaction_sync(
        this: &SyncStorage,
        body: &mut dyn FnMut() -> Result<(), JsValue>,
    ) -> Result<JsValue, JsValue>;
}

// The rows each statement read and wrote are summed here, in JavaScript,
// from its cursor's counts (for a query, once the cursor is spent), and
// taken into `views::count_rows` when a `DoSql` is dropped: once per batch,
// alarm or load, never a crossing per statement.
#[wasm_bindgen(inline_js = "
let read = 0, written = 0;
function count(cursor) {
  read += cursor.rowsRead;
  written += cursor.rowsWritten;
}
function run(sql, query, params) {
  return params.length === 0 ? sql.exec(query) : sql.exec(query, ...JSON.parse(params));
}
export function sql_exec(sql, query, params) {
  count(run(sql, query, params));
}
export function sql_open(sql, query, params) {
  return run(sql, query, params);
}
export function sql_rows(cursor, max) {
  const rows = [];
  for (let i = 0; i < max; i++) {
    const r = cursor.next();
    if (r.done) {
      count(cursor);
      break;
    }
    rows.push(r.value);
  }
  return JSON.stringify(rows);
}
export function sql_take_rows_read() {
  const n = read;
  read = 0;
  return n;
}
export function sql_take_rows_written() {
  const n = written;
  written = 0;
  return n;
}")]
extern "C" {
    /// Runs a statement: `params` is a JSON array of its bindings, or
    /// empty for none. One call across the boundary, where workers-rs'
    /// `exec` takes several for each binding (its conversion, a safe-integer
    /// check, the push).
    #[wasm_bindgen(catch)]
    fn sql_exec(sql: &JsValue, query: &str, params: &str) -> Result<(), JsValue>;

    /// `sql_exec`, keeping the cursor for its rows.
    #[wasm_bindgen(catch)]
    fn sql_open(sql: &JsValue, query: &str, params: &str) -> Result<JsValue, JsValue>;

    /// The cursor's next rows, at most `max`, as a JSON array of objects
    /// (column name to value): one call for many rows, where workers-rs
    /// converts each row field by field.
    #[wasm_bindgen(catch)]
    fn sql_rows(cursor: &JsValue, max: u32) -> Result<String, JsValue>;

    /// The rows read since the last take, and the same of rows written.
    fn sql_take_rows_read() -> f64;
    fn sql_take_rows_written() -> f64;
}

pub struct DoSql {
    sql: JsValue,
    storage: JsValue,
}

impl DoSql {
    pub fn new(state: &State) -> DoSql {
        // Should the runtime refuse the storage handle, `transactionSync`
        // on `null` throws, and every write fails as a storage error.
        let storage = state
            .as_raw()
            .storage()
            .map_or(JsValue::NULL, JsValue::from);
        let sql = state.storage().sql();
        DoSql {
            sql: AsRef::<JsValue>::as_ref(&sql).clone(),
            storage,
        }
    }

    fn open(&self, sql: &str, params: &[SqlValue]) -> Result<JsValue, StorageError> {
        sql_open(&self.sql, sql, &bindings(params)).map_err(thrown)
    }
}

impl Drop for DoSql {
    fn drop(&mut self) {
        views::count_rows(sql_take_rows_read() as u64, sql_take_rows_written() as u64);
    }
}

/// The bindings as a JSON array, or empty for none. Integers go as JSON
/// numbers, which JavaScript reads as doubles, as workers-rs converts them.
fn bindings(params: &[SqlValue]) -> String {
    if params.is_empty() {
        return String::new();
    }
    let mut out = String::from("[");
    for (i, v) in params.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match v {
            SqlValue::Int(n) => out.push_str(&n.to_string()),
            SqlValue::Text(t) => out.push_str(&serde_json::to_string(t).unwrap_or_default()),
            SqlValue::Null => out.push_str("null"),
        }
    }
    out.push(']');
    out
}

fn thrown(e: JsValue) -> StorageError {
    StorageError(
        e.dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .or_else(|| e.as_string())
            .unwrap_or_else(|| format!("{e:?}")),
    )
}

/// Every row of the cursor, a chunk at a time.
fn each_row<T: DeserializeOwned>(
    cursor: &JsValue,
    each: &mut dyn FnMut(T) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    loop {
        let text = sql_rows(cursor, ROWS_PER_CALL_MAX).map_err(thrown)?;
        let rows: Vec<T> =
            serde_json::from_str(&text).map_err(|e| StorageError(format!("a row: {e}")))?;
        let n = rows.len();
        for row in rows {
            each(row)?;
        }
        if n < ROWS_PER_CALL_MAX as usize {
            return Ok(());
        }
    }
}

impl SqlDb for DoSql {
    fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), StorageError> {
        sql_exec(&self.sql, sql, &bindings(params)).map_err(thrown)
    }

    fn query<T: DeserializeOwned>(&mut self, sql: &str) -> Result<Vec<T>, StorageError> {
        self.query_with(sql, &[])
    }

    fn query_with<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<T>, StorageError> {
        let cursor = self.open(sql, params)?;
        let mut rows = Vec::new();
        each_row(&cursor, &mut |row| {
            rows.push(row);
            Ok(())
        })?;
        Ok(rows)
    }

    fn query_each<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        each: &mut dyn FnMut(T) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let cursor = self.open(sql, &[])?;
        each_row(&cursor, each)
    }

    fn atomically<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let storage: SyncStorage = self.storage.clone().unchecked_into();
        let mut body = Some(body);
        let mut out = None;
        let ran = storage.transaction_sync(&mut || {
            let body = body.take().expect("a transaction runs its body once");
            let r = body(self);
            // Throwing is how the callback tells the runtime to roll back.
            let thrown = r.as_ref().err().map(|e| JsValue::from_str(&e.0));
            out = Some(r);
            thrown.map_or(Ok(()), Err)
        });
        match (ran, out) {
            (Ok(_), Some(r)) => r,
            (Err(_), Some(Err(e))) => Err(e),
            (Err(e), _) => Err(StorageError(format!(
                "transaction failed: {}",
                e.as_string().unwrap_or_else(|| format!("{e:?}"))
            ))),
            (Ok(_), None) => Err(StorageError("the transaction did not run".into())),
        }
    }
}
