//! `cargo xtask --help | head -1` once `head` has left: the help is dropped and xtask
//! exits 0, never with a panic. The pipe's reader has exited before the child starts,
//! so every write fails whatever the timing.
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
fn help_on_a_closed_stdout_ends_quietly() {
    for args in [
        &["--help"][..],
        &["help"],
        &["bench", "--help"],
        &["conformance", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "xtask {args:?} panicked on a closed stdout:\n{stderr}"
        );
        assert!(
            out.status.success(),
            "xtask {args:?} ended with {}:\n{stderr}",
            out.status
        );
    }
}
