//! The SafeAgent demo agent as an HTTP service: `cargo xtask serve`.
//!
//! Serves reins-server's API and approval inbox on 127.0.0.1 for the demo's agent
//! (`delete_file` and `send_email` wait for approval; `search_web` runs at once, and
//! "slow" searches can be stopped from the inbox). Sessions live in SQLite under the
//! data directory, or in PostgreSQL with `--database-url`. The model is the offline
//! one unless an API key is set, as in the terminal demo. A fresh token with every
//! role is printed at start (`token: ...`); more principals come from `--auth FILE`
//! (see `reins_server::auth`).
//!
//! ```text
//! cargo xtask serve                                  # http://127.0.0.1:8080
//! cargo xtask serve --port 9000
//! cargo xtask serve --database-url postgres://user@localhost/reins
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use reins::prelude::*;
use reins_server::{AccessRole, Auth, Principal, Server};

use crate::{AGENT, provider, sandbox, system_prompt};

const USAGE: &str = "usage: serve [--port N] [--database-url postgres://..] [--data-dir DIR] [--auth FILE]

  --port N            listen on 127.0.0.1:N (default 8080; 0 picks a free port)
  --database-url URL  keep sessions in PostgreSQL instead of SQLite
  --data-dir DIR      where the SQLite file and the tools' sandbox live (default .reins-demo)
  --auth FILE         more principals (JSON, see reins_server::auth); the dev token is always added";

struct Options {
    port: u16,
    database_url: Option<String>,
    data_dir: PathBuf,
    auth: Option<PathBuf>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        port: 8080,
        database_url: None,
        data_dir: PathBuf::from(".reins-demo"),
        auth: None,
    };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--port" => {
                let v = value("--port")?;
                o.port = v
                    .parse()
                    .map_err(|_| format!("--port: `{v}` is not a port number"))?;
            }
            "--database-url" => o.database_url = Some(value("--database-url")?),
            "--data-dir" => o.data_dir = PathBuf::from(value("--data-dir")?),
            "--auth" => o.auth = Some(PathBuf::from(value("--auth")?)),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some(o))
}

/// The service's entry point (the `serve` binary): parses the command line, then
/// serves until Ctrl-C; the exit code is 2 for bad usage, 1 when serving failed.
pub fn serve() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("serve: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,reins_server=info".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("serve: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(opts: Options) -> Result<(), String> {
    std::fs::create_dir_all(&opts.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            opts.data_dir.display()
        )
    })?;
    let (store, store_label): (Arc<dyn MemoryStore>, String) = match &opts.database_url {
        Some(url) => (
            Arc::new(
                PostgresStore::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?,
            ),
            "PostgreSQL".to_owned(),
        ),
        None => {
            let path = opts.data_dir.join("server.db");
            let store = SqliteStore::open(&path)
                .await
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            (Arc::new(store), format!("SQLite {}", path.display()))
        }
    };
    let sandbox = sandbox::Sandbox::open(opts.data_dir.join("sandboxes").join("server"))
        .map_err(|e| format!("cannot create the sandbox: {e}"))?;
    let choice = provider::choose(
        None,
        None,
        false,
        Duration::from_millis(300),
        Duration::from_millis(25),
    )?;
    let agent = Agent::builder()
        .name(AGENT)
        .system_prompt(system_prompt(&sandbox))
        .model_arc(choice.model)
        .toolkit(sandbox::toolkit(&sandbox).map_err(|e| e.to_string())?)
        .store_arc(store)
        .max_iters(6)
        .interrupt_grace(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;

    let token = reins_server::generate_token();
    let mut auth = match &opts.auth {
        Some(path) => Auth::from_file(path).map_err(|e| e.to_string())?,
        None => Auth::new(),
    };
    auth = auth.token(
        &token,
        Principal::new(
            "dev",
            [AccessRole::User, AccessRole::Approver, AccessRole::Admin],
        ),
    );
    let app = Server::new(agent).auth(auth).router();

    let addr = SocketAddr::from(([127, 0, 0, 1], opts.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    println!("reins-server: {} on http://{addr}", AGENT);
    println!("store:   {store_label}");
    println!("model:   {}", choice.label);
    println!("sandbox: {}", sandbox.root().display());
    println!("inbox:   http://{addr}/#token={token}");
    println!("token: {token}");
    println!(
        "try:     curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\\n           -d '{{\"message\":\"delete temp.txt\"}}' http://{addr}/v1/sessions/dev%2Fchat-1/runs"
    );
    println!("(Ctrl-C stops the server)");
    // reins-server's accept loop: a header read timeout against slow clients.
    reins_server::serve_with_shutdown(
        listener,
        app,
        reins_server::ServeOptions::default(),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    )
    .await
    .map_err(|e| format!("the server failed: {e}"))
}
