//! [`Exec`] through sqlx: the shared steps' statements bound, run and their rows
//! decoded on one PostgreSQL connection.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Column, Row as _, TypeInfo, ValueRef};

use super::super::flow::{Arg, Exec, Row, Val};
use super::super::is_unique_violation;
use crate::error::Result;
use crate::store::MAX_LEASE;

/// [`Exec`] through sqlx on one PostgreSQL connection.
pub(super) struct Pg<'c>(pub(super) &'c mut PgConnection);

fn bind<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    args: &[Arg<'q>],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for arg in args {
        q = match arg {
            Arg::Int(v) => q.bind(*v),
            Arg::Bool(b) => q.bind(*b),
            Arg::Text(s) => q.bind(*s),
            Arg::OptText(s) => q.bind(*s),
            Arg::Stamp(t) | Arg::Instant(t) => q.bind(*t),
            Arg::Lease(d) => q.bind(d.min(&MAX_LEASE).as_secs_f64()),
            Arg::Ints(v) => q.bind(*v),
            Arg::Texts(v) => q.bind(*v),
        };
    }
    q
}

fn decode_row(row: &PgRow) -> Result<Row> {
    let mut out = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        if row.try_get_raw(i)?.is_null() {
            out.push(Val::Null);
            continue;
        }
        out.push(match col.type_info().name() {
            "INT8" => Val::Int(row.try_get(i)?),
            "INT4" => Val::Int(i64::from(row.try_get::<i32, _>(i)?)),
            "INT2" => Val::Int(i64::from(row.try_get::<i16, _>(i)?)),
            "BOOL" => Val::Bool(row.try_get(i)?),
            "TIMESTAMPTZ" => Val::Time(row.try_get(i)?),
            "TEXT" | "VARCHAR" | "NAME" => Val::Text(row.try_get(i)?),
            _ => Val::Null,
        });
    }
    Ok(out)
}

impl Exec for Pg<'_> {
    async fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let done = bind(sqlx::query(sql), args).execute(&mut *self.0).await?;
        Ok(done.rows_affected())
    }

    async fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let rows = bind(sqlx::query(sql), args).fetch_all(&mut *self.0).await?;
        rows.iter().map(decode_row).collect()
    }

    async fn rows_or_duplicate(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Vec<Row>>> {
        match bind(sqlx::query(sql), args).fetch_all(&mut *self.0).await {
            Ok(rows) => rows.iter().map(decode_row).collect::<Result<_>>().map(Some),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn script(&mut self, sql: &str) -> Result<()> {
        sqlx::Executor::execute(&mut *self.0, sqlx::raw_sql(sql)).await?;
        Ok(())
    }
}
