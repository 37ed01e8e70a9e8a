//! `live --help | head -1` once `head` has left: the help (or the scenario list) is
//! dropped and the runner exits 0, never with a panic. The pipe's reader is closed
//! before the child starts, so every write fails whatever the timing.
#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

use std::process::{Command, Stdio};

/// The write end of a pipe whose reader is already gone: the stdin of a child that
/// exited without reading it.
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("sh")
        .args(["-c", "exit 0"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let writer = reader.stdin.take().unwrap();
    assert!(reader.wait().unwrap().success());
    Stdio::from(writer)
}

#[test]
fn help_and_list_on_a_closed_stdout_end_quietly() {
    for flag in ["--help", "--list"] {
        let out = Command::new(env!("CARGO_BIN_EXE_live"))
            .arg(flag)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "live {flag} panicked on a closed stdout:\n{stderr}"
        );
        assert!(
            out.status.success(),
            "live {flag} ended with {}:\n{stderr}",
            out.status
        );
    }
}
