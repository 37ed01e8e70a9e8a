//! SQLite's connection threads: each owns its connections and runs whole store
//! operations (every statement of a commit, say) for async callers, with cached
//! prepared statements.
//!
//! Why hand-written rather than sqlx: sqlx runs each SQLite *statement* on a worker
//! thread and wakes the caller for its answer, so a commit of ~5 statements paid ~5
//! thread round trips (≈ 50 µs each on the benchmark machine), more than SQLite's own
//! work. Here a caller hands a thread one closure per store operation and waits once.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::types::ValueRef;
use rusqlite::{CachedStatement, Connection, OpenFlags};

use super::super::encode_time;
use super::super::flow::{Arg, Exec, Row, Val};
use crate::error::{Error, Result};

/// The connections one thread owns: `main` at the configured durability, and `locks`
/// (`synchronous = OFF`) for the session run locks, or `None` when they share `main`
/// (an in-memory database).
pub(crate) struct Conns {
    pub(crate) main: Connection,
    pub(crate) locks: Option<Connection>,
}

impl Conns {
    /// The run locks' connection.
    pub(crate) fn locks(&self) -> &Connection {
        self.locks.as_ref().unwrap_or(&self.main)
    }
}

/// A job; false when the thread should end after it.
type Job = Box<dyn FnOnce(&mut Conns) -> bool + Send>;

/// A handle to the connection threads: jobs go to whichever thread is free. The
/// threads end (closing their connections) when every handle is gone or on
/// [`Threads::close`].
#[derive(Debug)]
pub(crate) struct Threads {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    count: usize,
}

impl Threads {
    /// Starts `count` threads, each opening its connections with `open`; fails with
    /// the first thread's error when a connection cannot be opened.
    pub(crate) fn start<F>(count: usize, open: F) -> Result<Arc<Self>>
    where
        F: Fn() -> Result<Conns> + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let open = Arc::new(open);
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        for i in 0..count.max(1) {
            let (rx, open, ready) = (rx.clone(), open.clone(), ready_tx.clone());
            std::thread::Builder::new()
                .name(format!("reins-sqlite-{i}"))
                .spawn(move || {
                    let mut conns = match open() {
                        Ok(c) => {
                            let _ = ready.send(Ok(()));
                            c
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    drop(ready);
                    loop {
                        // The lock is held only while waiting for the next job.
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => break,
                        };
                        let keep_going = match job {
                            Ok(job) => job(&mut conns),
                            Err(_) => false,
                        };
                        if !keep_going {
                            break;
                        }
                    }
                })
                .map_err(|e| Error::Database(format!("cannot start a SQLite thread: {e}")))?;
        }
        drop(ready_tx);
        let threads = Arc::new(Self {
            jobs: Mutex::new(Some(tx)),
            count: count.max(1),
        });
        for _ in 0..threads.count {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    threads.stop();
                    return Err(e);
                }
                Err(_) => {
                    threads.stop();
                    return Err(Error::Database("a SQLite thread ended at start".to_owned()));
                }
            }
        }
        Ok(threads)
    }

    /// Runs `f` on a connection thread and waits for its answer.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Conns) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conns| {
            let _ = tx.send(f(conns));
            true
        });
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs.as_ref().is_some_and(|j| j.send(job).is_ok()),
            Err(_) => false,
        };
        if !sent {
            return Err(Error::Database("the SQLite store is closed".to_owned()));
        }
        rx.await
            .map_err(|_| Error::Database("a SQLite connection thread ended".to_owned()))?
    }

    /// Ends the threads once the queued jobs ran, closing their connections, and
    /// waits for them to close.
    pub(crate) async fn close(&self) {
        let mut done = Vec::with_capacity(self.count);
        if let Ok(jobs) = self.jobs.lock() {
            if let Some(jobs) = jobs.as_ref() {
                for _ in 0..self.count {
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    // Each thread takes one stop job, closes its connections and
                    // ends.
                    let job: Job = Box::new(move |conns| {
                        drop(conns.locks.take());
                        if let Ok(mem) = Connection::open_in_memory() {
                            drop(std::mem::replace(&mut conns.main, mem));
                        }
                        let _ = tx.send(());
                        false
                    });
                    if jobs.send(job).is_ok() {
                        done.push(rx);
                    }
                }
            }
        }
        self.stop();
        for rx in done {
            let _ = rx.await;
        }
    }

    fn stop(&self) {
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
    }
}

/// Opens a connection with the store's settings.
pub(crate) fn open(
    path: &std::path::Path,
    create: bool,
    synchronous: &str,
    busy_timeout: std::time::Duration,
) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Runs a write transaction (`BEGIN IMMEDIATE`: takes the database's write lock first,
/// so writers from several processes serialize instead of failing) around `f`;
/// commits when it succeeds, rolls back otherwise.
pub(crate) fn write<T>(conn: &Connection, f: impl FnOnce(&mut On<'_>) -> Result<T>) -> Result<T> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let out = f(&mut On(conn));
    match out {
        Ok(v) => match conn.execute_batch("COMMIT") {
            Ok(()) => Ok(v),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e.into())
            }
        },
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Runs `f` in a read transaction (one consistent snapshot).
pub(crate) fn read<T>(conn: &Connection, f: impl FnOnce(&mut On<'_>) -> Result<T>) -> Result<T> {
    conn.execute_batch("BEGIN")?;
    let out = f(&mut On(conn));
    let _ = conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
    out
}

/// [`Exec`] on a rusqlite connection: every statement completes before its future is
/// first polled.
pub(crate) struct On<'c>(pub(crate) &'c Connection);

fn bind(st: &mut CachedStatement<'_>, args: &[Arg<'_>]) -> Result<()> {
    let wanted = st.parameter_count();
    if args.len() < wanted {
        return Err(Error::Database(format!(
            "internal: a statement takes {wanted} parameters, got {}",
            args.len()
        )));
    }
    for (i, arg) in args.iter().take(wanted).enumerate() {
        let at = i + 1;
        match arg {
            Arg::Int(v) => st.raw_bind_parameter(at, v)?,
            Arg::Bool(b) => st.raw_bind_parameter(at, i64::from(*b))?,
            Arg::Text(s) => st.raw_bind_parameter(at, s)?,
            Arg::OptText(s) => st.raw_bind_parameter(at, s)?,
            Arg::Stamp(t) => st.raw_bind_parameter(at, encode_time(*t))?,
            Arg::Instant(t) => st.raw_bind_parameter(at, t.timestamp_micros())?,
            Arg::Lease(d) => st.raw_bind_parameter(at, Arg::lease_micros(*d))?,
            Arg::Ints(_) | Arg::Texts(_) => {
                return Err(Error::Database(
                    "internal: SQLite statements take no arrays".to_owned(),
                ));
            }
        }
    }
    Ok(())
}

impl Exec for On<'_> {
    async fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let mut st = self.0.prepare_cached(sql)?;
        bind(&mut st, args)?;
        Ok(st.raw_execute()? as u64)
    }

    async fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let mut st = self.0.prepare_cached(sql)?;
        bind(&mut st, args)?;
        let n = st.column_count();
        let mut rows = st.raw_query();
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(match r.get_ref(i)? {
                    ValueRef::Null => Val::Null,
                    ValueRef::Integer(v) => Val::Int(v),
                    #[allow(clippy::cast_possible_truncation)]
                    ValueRef::Real(v) => Val::Int(v as i64),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        Val::Text(String::from_utf8_lossy(t).into_owned())
                    }
                });
            }
            out.push(row);
        }
        Ok(out)
    }

    async fn rows_or_duplicate(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Vec<Row>>> {
        match self.rows(sql, args).await {
            Ok(rows) => Ok(Some(rows)),
            Err(Error::Database(detail)) if detail.starts_with("UNIQUE constraint failed") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn script(&mut self, sql: &str) -> Result<()> {
        self.0.execute_batch(sql)?;
        Ok(())
    }
}
