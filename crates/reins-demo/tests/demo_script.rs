//! The demo's script mode, run as CI runs it: the built-in script with `--check`, and
//! scripts that must fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::{Command, Output};

fn demo(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        // No key may turn the offline script into a network call.
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the demo binary runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_builtin_script_passes_its_checks() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(dir.path(), &["--script", "builtin", "--check", "--fresh"]);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("offline"),
        "the banner names the offline model"
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    // The steps really happened in the sandbox.
    let sb = dir.path().join("sandboxes").join("script");
    assert!(!sb.join("temp.txt").exists(), "approved deletion ran");
    assert!(
        sb.join("notes.md").exists(),
        "rejected deletion did not run"
    );
    assert!(!sb.join("report.pdf").exists(), "the resumed deletion ran");
    assert_eq!(std::fs::read_dir(sb.join("outbox")).unwrap().count(), 1);
    assert!(dir.path().join("sessions.db").exists());
    assert!(stdout.contains("1 call stopped mid-run"), "{stdout}");

    // A second replay starts over (the built-in script always starts fresh).
    let again = demo(dir.path(), &["--script", "builtin", "--check"]);
    assert!(again.status.success(), "{}", text(&again).1);
}

#[test]
fn a_failing_check_exits_non_zero_and_says_what_differed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("wrong.txt");
    std::fs::write(
        &script,
        "user: delete temp.txt\n# wrong on purpose: the call waits for approval\nexpect: completed\n",
    )
    .unwrap();
    let out = demo(
        dir.path(),
        &["--script", script.to_str().unwrap(), "--check", "--fresh"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("expect: completed"), "{stderr}");
    assert!(stderr.contains("ended paused"), "{stderr}");
    // Without --check the difference is reported but not fatal.
    let out = demo(
        dir.path(),
        &["--script", script.to_str().unwrap(), "--fresh"],
    );
    assert!(out.status.success());
    assert!(text(&out).0.contains("differs"));
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.txt");
    let out = demo(dir.path(), &["--script", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("cannot read the script"),
        "{}",
        text(&out).1
    );

    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "user: hi\nedit: {oops}\n").unwrap();
    let out = demo(dir.path(), &["--script", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out).1;
    assert!(
        err.contains("line 2") && err.contains("not valid JSON"),
        "{err}"
    );

    let out = demo(dir.path(), &["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--frobnicate"));
}

#[test]
fn a_decision_with_nothing_pending_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.txt");
    std::fs::write(&script, "user: hello\nexpect: completed\napprove\n").unwrap();
    let out = demo(
        dir.path(),
        &["--script", script.to_str().unwrap(), "--check", "--fresh"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("nothing is pending"),
        "{}",
        text(&out).1
    );
}
