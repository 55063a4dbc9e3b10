//! `SqlDb` over the Durable Object's SQLite storage. Every call is
//! synchronous, so statements run in the turn that decided them.

use serde::de::DeserializeOwned;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsCast, JsValue};
use worker::{SqlStorage, SqlStorageValue, State};

use crate::object::StorageError;
use crate::sql::{SqlDb, SqlValue};

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

pub struct DoSql {
    sql: SqlStorage,
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
        DoSql {
            sql: state.storage().sql(),
            storage,
        }
    }
}

fn value(v: &SqlValue) -> SqlStorageValue {
    match v {
        SqlValue::Int(n) => SqlStorageValue::from(*n),
        SqlValue::Text(s) => SqlStorageValue::from(s.as_str()),
        SqlValue::Null => SqlStorageValue::Null,
    }
}

fn failed(e: worker::Error) -> StorageError {
    StorageError(e.to_string())
}

impl SqlDb for DoSql {
    fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), StorageError> {
        let bindings = (!params.is_empty()).then(|| params.iter().map(value).collect());
        self.sql.exec(sql, bindings).map(drop).map_err(failed)
    }

    fn query<T: DeserializeOwned>(&mut self, sql: &str) -> Result<Vec<T>, StorageError> {
        // Row by row through the cursor, so the rows are never all held
        // twice (as a JS array and as `T`s) at once.
        let cursor = self.sql.exec(sql, None).map_err(failed)?;
        cursor.next::<T>().map(|r| r.map_err(failed)).collect()
    }

    fn query_with<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<T>, StorageError> {
        let bindings = (!params.is_empty()).then(|| params.iter().map(value).collect());
        let cursor = self.sql.exec(sql, bindings).map_err(failed)?;
        cursor.next::<T>().map(|r| r.map_err(failed)).collect()
    }

    fn query_each<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        each: &mut dyn FnMut(T) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let cursor = self.sql.exec(sql, None).map_err(failed)?;
        for row in cursor.next::<T>() {
            each(row.map_err(failed)?)?;
        }
        Ok(())
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
