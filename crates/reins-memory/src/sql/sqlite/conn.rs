//! SQLite's connection threads: each owns its connections and runs whole store
//! operations (every statement of a commit, say) for async callers, with cached
//! prepared statements.
//!
//! Operations that cannot wait also run inline, on the caller's thread (see
//! [`Threads`]).
//!
//! Why hand-written rather than sqlx: sqlx runs each SQLite *statement* on a worker
//! thread and wakes the caller for its answer, so a commit of ~5 statements paid ~5
//! thread round trips (≈ 50 µs each on the benchmark machine), more than SQLite's own
//! work. Here a caller hands a thread one closure per store operation and waits once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{CachedStatement, Connection, OpenFlags};

use super::super::encode_time;
use super::super::flow::{Arg, Exec, Row, Val};
use crate::error::{Error, Result};

/// The connections one thread owns: `main` at the configured durability, and `locks`
/// (`synchronous = OFF`) for the session run locks, or `None` when they share `main`
/// (at `Durability::Normal`, where no commit fsyncs, and in memory).
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

/// Which of a slot's connections a statement runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The connection at the configured durability.
    Main,
    /// The run locks' connection (`synchronous = OFF`).
    Locks,
}

impl Conns {
    fn pick(&self, target: Target) -> &Connection {
        match target {
            Target::Main => &self.main,
            Target::Locks => self.locks(),
        }
    }
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns").finish_non_exhaustive()
    }
}

/// The store's connections and the threads that serve them.
///
/// Each connection slot belongs to one thread, which locks it while it runs a job.
/// A caller may also run an operation *inline*, on its own thread, on a slot that is
/// free at that moment ([`Threads::read`], [`Threads::write`]): no hop to a thread and
/// no wake-up of the caller, which on a virtual machine cost 100-200 µs per operation,
/// far more than SQLite's own work. Inline runs are limited to work that does not wait
/// for others: reads (WAL readers never wait for writers) and writes whose
/// `BEGIN IMMEDIATE` takes the write lock at once. A write that would wait for another
/// writer goes to a thread. A write that will fsync (`Durability::Full` on the main
/// connection) runs inline only on tokio's multi-thread runtime, inside
/// `block_in_place` (the worker's other tasks move to another worker during the
/// fsync); on a current-thread runtime it goes to a thread, so the runtime's one
/// thread keeps serving other tasks.
#[derive(Debug)]
pub(crate) struct Threads {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    slots: Arc<[Mutex<Conns>]>,
    closed: AtomicBool,
    /// The configured busy timeout, restored after an inline `BEGIN IMMEDIATE`.
    busy_timeout: Duration,
    /// Whether writes on the main connection may run inline (no fsync on commit).
    inline_main_writes: bool,
}

impl Threads {
    /// Opens `count` slots with `open` (failing with the first error) and starts a
    /// thread for each. `busy_timeout` is what `open` configured;
    /// `inline_main_writes` is false when a commit on the main connection fsyncs.
    pub(crate) fn start<F>(
        count: usize,
        busy_timeout: Duration,
        inline_main_writes: bool,
        open: F,
    ) -> Result<Arc<Self>>
    where
        F: Fn() -> Result<Conns>,
    {
        let count = count.max(1);
        let slots = (0..count)
            .map(|_| open().map(Mutex::new))
            .collect::<Result<Vec<_>>>()?;
        let slots: Arc<[Mutex<Conns>]> = slots.into();
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..count {
            let (rx, slots) = (rx.clone(), slots.clone());
            std::thread::Builder::new()
                .name(format!("reins-sqlite-{i}"))
                .spawn(move || {
                    loop {
                        // The queue's lock is held only while waiting for the next job.
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => break,
                        };
                        let Ok(job) = job else { break };
                        let keep_going = match slots[i].lock() {
                            Ok(mut conns) => job(&mut conns),
                            Err(p) => job(&mut p.into_inner()),
                        };
                        if !keep_going {
                            break;
                        }
                    }
                })
                .map_err(|e| Error::Database(format!("cannot start a SQLite thread: {e}")))?;
        }
        Ok(Arc::new(Self {
            jobs: Mutex::new(Some(tx)),
            slots,
            closed: AtomicBool::new(false),
            busy_timeout,
            inline_main_writes,
        }))
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

    /// A slot no thread or caller is using right now.
    fn free_slot(&self) -> Option<MutexGuard<'_, Conns>> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        self.slots.iter().find_map(|s| s.try_lock().ok())
    }

    /// Runs `f` in a read transaction on `target`: inline on a free slot, else on a
    /// thread.
    pub(crate) async fn read<T, F>(&self, target: Target, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut On<'_>) -> Result<T> + Send + 'static,
    {
        let f = match self.try_read_inline(target, f) {
            Ok(done) => return done,
            Err(f) => f,
        };
        self.call(move |c| read(c.pick(target), f)).await
    }

    /// The inline half of [`Threads::read`]: `Err(f)` when no slot is free.
    fn try_read_inline<T, F>(&self, target: Target, f: F) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&mut On<'_>) -> Result<T>,
    {
        match self.free_slot() {
            Some(conns) => Ok(read(conns.pick(target), f)),
            None => Err(f),
        }
    }

    /// Runs `f` in a write transaction on `target` (see [`write`]): inline when a slot
    /// is free, the write lock is free at once and the commit needs no fsync; else on
    /// a thread.
    pub(crate) async fn write<T, F>(&self, target: Target, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut On<'_>) -> Result<T> + Send + 'static,
    {
        let f = match self.try_write_inline(target, f) {
            Ok(done) => return done,
            Err(f) => f,
        };
        self.call(move |c| write(c.pick(target), f)).await
    }

    /// The inline half of [`Threads::write`]: `Err(f)` when it must go to a thread.
    fn try_write_inline<T, F>(&self, target: Target, f: F) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&mut On<'_>) -> Result<T>,
    {
        if target == Target::Main && !self.inline_main_writes {
            // The commit will fsync. On the multi-thread runtime the caller's worker
            // hands its other tasks to another worker while it waits (tokio's
            // `block_in_place`); elsewhere the write goes to a connection thread.
            let multi_thread = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            if !multi_thread {
                return Err(f);
            }
            return tokio::task::block_in_place(|| self.try_write_now(target, f));
        }
        self.try_write_now(target, f)
    }

    /// Begins the write on a free slot without waiting for the lock, and runs `f`;
    /// `Err(f)` when no slot is free or the lock is held.
    fn try_write_now<T, F>(&self, target: Target, f: F) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&mut On<'_>) -> Result<T>,
    {
        let Some(conns) = self.free_slot() else {
            return Err(f);
        };
        let conn = conns.pick(target);
        // Without waiting: if another connection (of this process or another) holds
        // the write lock, a thread waits for it instead.
        if conn.busy_timeout(Duration::ZERO).is_err() {
            return Err(f);
        }
        let began = conn.execute_batch("BEGIN IMMEDIATE");
        if let Err(e) = conn.busy_timeout(self.busy_timeout) {
            if began.is_ok() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            return Ok(Err(e.into()));
        }
        match began {
            Ok(()) => Ok(in_transaction(conn, f)),
            Err(e) if is_busy(&e) => Err(f),
            Err(e) => Ok(Err(e.into())),
        }
    }

    /// Ends the threads once the queued jobs ran, closing their connections, and
    /// waits for them to close. Later operations fail.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut done = Vec::with_capacity(self.slots.len());
        if let Ok(jobs) = self.jobs.lock() {
            if let Some(jobs) = jobs.as_ref() {
                for _ in 0..self.slots.len() {
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
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        for rx in done {
            let _ = rx.await;
        }
    }
}

/// Whether SQLite answered "busy": another connection holds the write lock.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy
    )
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
    in_transaction(conn, f)
}

/// Runs `f` in the transaction `conn` has begun; commits when it succeeds, rolls back
/// otherwise.
fn in_transaction<T>(conn: &Connection, f: impl FnOnce(&mut On<'_>) -> Result<T>) -> Result<T> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::sql::flow::{Arg, Exec, run_ready};

    fn open_file(path: &std::path::Path) -> Connection {
        open(path, true, "NORMAL", Duration::from_secs(5)).unwrap()
    }

    fn threads(path: &std::path::Path) -> Arc<Threads> {
        threads_with(path, true)
    }

    fn threads_with(path: &std::path::Path, inline_main_writes: bool) -> Arc<Threads> {
        let at = path.to_owned();
        let c = open_file(path);
        c.execute_batch("CREATE TABLE IF NOT EXISTS t (v INTEGER NOT NULL)")
            .unwrap();
        Threads::start(2, Duration::from_secs(5), inline_main_writes, move || {
            Ok(Conns {
                main: open(&at, false, "NORMAL", Duration::from_secs(5))?,
                locks: None,
            })
        })
        .unwrap()
    }

    fn insert(on: &mut On<'_>, v: i64) -> Result<u64> {
        run_ready(on.run("INSERT INTO t (v) VALUES (?1)", &[Arg::Int(v)]))
    }

    #[test]
    fn a_held_write_lock_reads_as_busy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let (a, b) = (open_file(&path), open_file(&path));
        a.execute_batch("BEGIN IMMEDIATE").unwrap();
        b.busy_timeout(Duration::ZERO).unwrap();
        let err = b.execute_batch("BEGIN IMMEDIATE").unwrap_err();
        assert!(is_busy(&err), "{err}");
        a.execute_batch("ROLLBACK").unwrap();
    }

    /// A write whose lock another connection holds is not run inline (it would block
    /// the caller's thread): it goes to a connection thread, which waits for the lock
    /// and then commits.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_that_must_wait_goes_to_a_thread_and_lands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wait.db");
        let threads = threads(&path);
        let other = open_file(&path);
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let caller = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let seen = ran_on.clone();
        let write = threads.write(Target::Main, move |on| {
            *seen.lock().unwrap() = Some(std::thread::current().id());
            insert(on, 7)
        });
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            other.execute_batch("COMMIT").unwrap();
        };
        let (written, ()) = tokio::join!(write, release);
        assert_eq!(written.unwrap(), 1);
        let thread = ran_on.lock().unwrap().unwrap();
        assert_ne!(
            thread, caller,
            "the waiting write ran on a connection thread"
        );
        let count: i64 = other
            .query_row("SELECT COUNT(*) FROM t WHERE v = 7", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 1);
    }

    /// With the write lock free, a write runs on the caller's thread, and a failing
    /// one leaves nothing behind.
    #[tokio::test(flavor = "current_thread")]
    async fn a_free_write_runs_inline_and_rolls_back_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inline.db");
        let threads = threads(&path);
        let caller = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let seen = ran_on.clone();
        threads
            .write(Target::Main, move |on| {
                *seen.lock().unwrap() = Some(std::thread::current().id());
                insert(on, 1)
            })
            .await
            .unwrap();
        assert_eq!(ran_on.lock().unwrap().unwrap(), caller);
        let failed = threads
            .write(Target::Main, |on| {
                insert(on, 2)?;
                Err::<(), _>(Error::Database("refused".to_owned()))
            })
            .await;
        assert!(failed.is_err());
        let values = threads
            .read(Target::Main, |on| {
                run_ready(on.rows("SELECT v FROM t ORDER BY v", &[]))
            })
            .await
            .unwrap();
        assert_eq!(values.len(), 1, "the failed write was rolled back");
        threads.close().await;
        let closed = threads.read(Target::Main, |_| Ok(())).await;
        assert!(closed.is_err(), "a closed store refuses work");
    }

    /// Where a write that fsyncs runs: the caller's thread under tokio's multi-thread
    /// runtime (in `block_in_place`), a connection thread under a current-thread one.
    fn fsyncing_write_ran_on_caller(rt: &tokio::runtime::Runtime) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let threads = threads_with(&dir.path().join("full.db"), false);
        rt.block_on(async {
            tokio::spawn(async move {
                let caller = std::thread::current().id();
                let ran_on = threads
                    .write(Target::Main, |on| {
                        insert(on, 3)?;
                        Ok(std::thread::current().id())
                    })
                    .await
                    .unwrap();
                ran_on == caller
            })
            .await
            .unwrap()
        })
    }

    #[test]
    fn an_fsyncing_write_blocks_only_a_multi_thread_worker() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        assert!(fsyncing_write_ran_on_caller(&multi));
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(!fsyncing_write_ran_on_caller(&single));
    }
}
