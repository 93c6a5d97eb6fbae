//! Reading typed values out of PostgreSQL rows, as `sqlite`'s column helpers do: ids, states
//! and JSON are stored as text, times as Unix seconds in BIGINT; a value that does not parse is
//! reported as corruption naming the column, never a panic.

use std::fmt::Display;
use std::str::FromStr;

use drover_proto::names::RolloutId;
use drover_proto::time::Time;
use serde_json::Value;
use uuid::Uuid;

use super::postgres::Row;
use super::postgres::types::FromSql;
use drover_store::StoreError;
pub(crate) use drover_store::rules::page;

/// A column that holds something other than what its name promises.
fn corrupt(idx: usize, e: impl Display) -> StoreError {
    StoreError::backend(format!("column {idx} does not hold what the schema says: {e}"))
}

fn get<'a, T: FromSql<'a>>(r: &'a Row, idx: usize) -> Result<T, StoreError> {
    r.try_get(idx).map_err(|e| corrupt(idx, e))
}

/// Plain values (text, BIGINT, optional ones).
pub(crate) fn col<'a, T: FromSql<'a>>(r: &'a Row, idx: usize) -> Result<T, StoreError> {
    get(r, idx)
}

pub(crate) fn uuid_col(r: &Row, idx: usize) -> Result<Uuid, StoreError> {
    let s: String = get(r, idx)?;
    Uuid::parse_str(&s).map_err(|e| corrupt(idx, e))
}

pub(crate) fn opt_uuid_col(r: &Row, idx: usize) -> Result<Option<Uuid>, StoreError> {
    let s: Option<String> = get(r, idx)?;
    s.map(|s| Uuid::parse_str(&s).map_err(|e| corrupt(idx, e))).transpose()
}

pub(crate) fn time_col(r: &Row, idx: usize) -> Result<Time, StoreError> {
    Time::from_unix(get(r, idx)?).map_err(|e| corrupt(idx, e))
}

pub(crate) fn opt_time_col(r: &Row, idx: usize) -> Result<Option<Time>, StoreError> {
    let s: Option<i64> = get(r, idx)?;
    s.map(|s| Time::from_unix(s).map_err(|e| corrupt(idx, e))).transpose()
}

pub(crate) fn parse_col<T: FromStr>(r: &Row, idx: usize) -> Result<T, StoreError>
where
    T::Err: Display,
{
    let s: String = get(r, idx)?;
    s.parse().map_err(|e| corrupt(idx, e))
}

pub(crate) fn json_col(r: &Row, idx: usize) -> Result<Value, StoreError> {
    let s: String = get(r, idx)?;
    serde_json::from_str(&s).map_err(|e| corrupt(idx, e))
}

pub(crate) fn rollout_col(r: &Row, idx: usize) -> Result<RolloutId, StoreError> {
    let s: String = get(r, idx)?;
    RolloutId::parse(&s).map_err(|e| corrupt(idx, e))
}

pub(crate) fn u64_col(r: &Row, idx: usize) -> Result<u64, StoreError> {
    let v: i64 = get(r, idx)?;
    u64::try_from(v).map_err(|e| corrupt(idx, e))
}
