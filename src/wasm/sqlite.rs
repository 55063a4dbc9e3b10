//! `SqlDb` over the Durable Object's SQLite storage. Every call is
//! synchronous, so statements run in the turn that decided them.

use serde::de::DeserializeOwned;
use worker::{SqlStorage, SqlStorageValue};

use crate::object::StorageError;
use crate::sql::{SqlDb, SqlValue};

pub struct DoSql(pub SqlStorage);

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
        self.0.exec(sql, bindings).map(drop).map_err(failed)
    }

    fn query<T: DeserializeOwned>(&mut self, sql: &str) -> Result<Vec<T>, StorageError> {
        self.0
            .exec(sql, None)
            .and_then(|cursor| cursor.to_array())
            .map_err(failed)
    }
}
