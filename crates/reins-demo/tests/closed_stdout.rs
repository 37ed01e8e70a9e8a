//! The binaries with a closed stdout (`serve --help | head -1` once `head` has left):
//! what they print is dropped and they end as they would have, never with a panic.
//! The pipe's reader has exited before the child starts, so every write fails: no
//! timing decides whether the child met the closed pipe.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::{Command, Output, Stdio};

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

/// Runs `bin` with `args`, its stdout a pipe nobody reads, its stdin empty.
fn with_closed_stdout(bin: &str, args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        // The offline model, whatever keys this shell has.
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Exit 0, or the end by SIGPIPE a Unix tool may have: never a panic.
fn ended_quietly(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "{what} panicked on a closed stdout:\n{stderr}"
    );
    #[cfg(unix)]
    let by_sigpipe = {
        use std::os::unix::process::ExitStatusExt;
        out.status.signal() == Some(13)
    };
    #[cfg(not(unix))]
    let by_sigpipe = false;
    assert!(
        out.status.success() || by_sigpipe,
        "{what} ended with {} on a closed stdout:\n{stderr}",
        out.status
    );
}

#[test]
fn help_on_a_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bin) in [
        ("serve", env!("CARGO_BIN_EXE_serve")),
        ("demo", env!("CARGO_BIN_EXE_demo")),
    ] {
        for flag in ["--help", "-h"] {
            let out = with_closed_stdout(bin, &[flag], dir.path());
            ended_quietly(&format!("{name} {flag}"), &out);
        }
    }
}

#[test]
fn the_scripted_demo_on_a_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = with_closed_stdout(
        env!("CARGO_BIN_EXE_demo"),
        &[
            "--script",
            "builtin",
            "--fresh",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        dir.path(),
    );
    ended_quietly("demo --script builtin", &out);
}
