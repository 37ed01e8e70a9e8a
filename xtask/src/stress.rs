//! `cargo xtask ci --stress N`: the flake hunt. Runs the whole test suite (`cargo
//! xtask test --no-fail-fast`) `N` times in a row while two busy loops keep both
//! cores of a small machine loaded, keeps each run's output in
//! `target/stress/run-K.log`, and ends with a table of the tests that failed in any
//! run. A test that fails here once is a defect — in the product, or a test that waits
//! on time instead of on an event — never something to rerun until green.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Two threads that spin until dropped (the load of "two busy loops").
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..100_000 {
                            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005));
                        }
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs the suite `runs` times under load; fails when any run failed.
pub(crate) fn run(runs: usize, extra: &[String]) -> Result<(), String> {
    let dir = std::path::Path::new("target/stress");
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // Built once, without the load, so that every run measures the tests only.
    crate::run(crate::cargo().args(["test", "--workspace", "--all-features", "--no-run"]))?;
    let mut failures: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut failed_runs = 0;
    for k in 1..=runs {
        let log_path = dir.join(format!("run-{k}.log"));
        let started = std::time::Instant::now();
        let _load = Load::start(2);
        // Through cargo, not this program's path: a merge between runs may rebuild
        // (and replace) this very program.
        let mut child = crate::cargo()
            .args(["run", "--quiet", "--package", "xtask", "--", "test"])
            .arg("--no-fail-fast")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting run {k}: {e}"))?;
        let mut log = std::fs::File::create(&log_path)
            .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
        let mut failed_here = Vec::new();
        if let Some(out) = child.stdout.take() {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
                if let Some(name) = line
                    .strip_prefix("test ")
                    .and_then(|l| l.strip_suffix(" ... FAILED"))
                {
                    failed_here.push(name.to_owned());
                }
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("waiting for run {k}: {e}"))?;
        drop(_load);
        let secs = started.elapsed().as_secs_f64();
        if status.success() && failed_here.is_empty() {
            eprintln!("stress: run {k}/{runs} passed in {secs:.0} s");
        } else {
            failed_runs += 1;
            eprintln!(
                "stress: run {k}/{runs} FAILED in {secs:.0} s ({status}); failed tests: {} (log: {})",
                if failed_here.is_empty() {
                    "none named (a build or harness failure)".to_owned()
                } else {
                    failed_here.join(", ")
                },
                log_path.display()
            );
        }
        for name in failed_here {
            failures.entry(name).or_default().push(k);
        }
    }
    if failed_runs == 0 {
        eprintln!("stress: all {runs} runs passed under two busy loops");
        return Ok(());
    }
    eprintln!("stress: tests that failed (the runs they failed in):");
    for (name, ks) in &failures {
        eprintln!("  {name}: {ks:?}");
    }
    Err(format!("{failed_runs} of {runs} runs failed"))
}
