//! The demo's interactive mode, driven the way a person would: in a terminal (tmux),
//! typing, pressing keys and reading the screen.
//!
//! Skipped loudly where tmux is missing; required under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A private tmux server; killed when dropped, also when the test fails.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Self {
        Self {
            socket: format!("reins-test-{}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "demo"];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "send-keys failed: {out:?}");
    }

    /// Types a line and presses Enter.
    fn type_line(&self, text: &str) {
        self.send(&["-l", text]);
        self.send(&["Enter"]);
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "demo"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the screen until it shows `needle` (counted from `after` occurrences of
    /// it already seen), or fails with what the screen shows.
    fn wait_for(&self, needle: &str, after: usize) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.matches(needle).count() > after {
                return s;
            }
            if start.elapsed() > DEADLINE {
                panic!("the screen never showed {needle:?} within {DEADLINE:?}; it shows:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn a_person_approves_a_call_interrupts_a_search_and_quits() {
    if !tmux_available() {
        if in_ci() {
            panic!("tmux is not installed, and CI=true requires this test: install tmux");
        }
        eprintln!(
            "\n*** SKIPPED: tmux not installed — the interactive demo test did not run ***\n"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_demo");
    let cmd = format!(
        "{} --offline --fresh --data-dir {}; echo DEMO-EXITED $?; sleep 30",
        quote(bin),
        quote(&dir.path().display().to_string())
    );
    let tmux = Tmux::new();
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "40",
        "-s",
        "demo",
        &cmd,
    ]);
    assert!(out.status.success(), "tmux new-session failed: {out:?}");

    let s = tmux.wait_for("you>", 0);
    assert!(
        s.contains("offline"),
        "the banner says the model is offline:\n{s}"
    );

    // A risky call waits for approval, showing its arguments.
    tmux.type_line("delete temp.txt");
    let s = tmux.wait_for("[a]pprove", 0);
    assert!(s.contains("\"path\": \"temp.txt\""), "{s}");
    let sandbox = dir.path().join("sandboxes").join("demo");
    assert!(
        sandbox.join("temp.txt").exists(),
        "nothing ran before approval"
    );

    // Bad JSON while editing is refused, and the question is asked again.
    tmux.type_line("e");
    tmux.wait_for("new arguments>", 0);
    tmux.type_line("{not json");
    tmux.wait_for("not valid JSON", 0);
    tmux.type_line("");
    tmux.wait_for("[a]pprove", 1);

    tmux.type_line("a");
    tmux.wait_for("Done: deleted `temp.txt`", 0);
    tmux.wait_for("you>", 1); // the prompt is back
    assert!(!sandbox.join("temp.txt").exists(), "the approved call ran");

    // ESC during a slow search interrupts it and returns to the prompt.
    tmux.type_line("do a slow search for tea");
    tmux.wait_for("searching \"tea\"", 0);
    tmux.send(&["Escape"]);
    let s = tmux.wait_for("interrupted: kept", 0);
    assert!(s.contains("1 call stopped mid-run"), "{s}");
    tmux.wait_for("you>", 2);

    // The next message works.
    tmux.type_line("/sandbox");
    let s = tmux.wait_for("report.pdf", 0);
    assert!(s.contains("notes.md"), "{s}");

    tmux.type_line("/quit");
    let s = tmux.wait_for("DEMO-EXITED", 0);
    assert!(s.contains("DEMO-EXITED 0"), "the demo exits cleanly:\n{s}");
    assert!(s.contains("Bye."), "{s}");
}
