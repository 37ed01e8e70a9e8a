//! The SafeAgent demo agent as an HTTP service: `cargo xtask serve`.
//!
//! Serves reins-server's API and approval inbox on 127.0.0.1 for the demo's agent
//! (`delete_file` and `send_email` wait for approval; `search_web` runs at once, and
//! "slow" searches can be stopped from the inbox). Sessions live in SQLite under the
//! data directory, or in PostgreSQL with `--database-url`. The model is the offline
//! one unless an API key is set, as in the terminal demo. A fresh token with every
//! role is printed at start (`token: ...`); more principals come from `--auth FILE`
//! (see `reins_server::auth`). `--mcp stdio|http` also serves the agent over MCP
//! (see [`crate::mcp`]); `--acp` serves it to an editor over the Agent Client Protocol
//! on stdin/stdout (reins-acp), the inbox beside it.
//!
//! With `--restate` the same agent runs on Restate ([`restate`](self::restate)):
//! the same API, inbox and AG-UI, with reins-server fronting a local restate-server;
//! `--mcp` and `--acp` combine with it (the MCP and ACP doors hold the session port,
//! `Relayed` over the deployment, as reins-server fronts it).
//!
//! ```text
//! cargo xtask serve                                  # http://127.0.0.1:8080
//! cargo xtask serve --port 9000
//! cargo xtask serve --database-url postgres://user@localhost/reins
//! cargo xtask serve --mcp http                       # + MCP at http://127.0.0.1:8080/mcp
//! cargo xtask serve --mcp stdio                      # MCP on stdin/stdout, inbox on a free port
//! cargo xtask serve --acp                            # ACP (editors) on stdin/stdout, inbox on a free port
//! cargo xtask serve --restate                        # the same, on Restate
//! cargo xtask serve --restate --acp                  # ACP on stdin/stdout, the sessions on Restate
//! cargo xtask serve --otlp http://127.0.0.1:4318     # + spans over OTLP (docs/observability.md)
//! cargo xtask serve --config examples/reins.toml     # everything an operator sets, from one file
//! cargo xtask serve --config examples/reins.toml --check   # validate, print it (secrets redacted), exit
//! ```
//!
//! `--config FILE` reads `reins.toml` (reins-server's `config`, docs/configuration.md):
//! the store, the driver, the listen address, tokens and OpenID Connect, Cedar
//! policies, budgets, notifications and telemetry. A flag given on the command line
//! wins over the file; without a file everything is as described above.

mod restate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use reins::agent::port::Sessions;
use reins::prelude::*;
use reins_server::config::{Config, DriverKind, OtlpTransport};
use reins_server::otel::{Otlp, OtlpProtocol};
use reins_server::{AccessRole, Auth, Principal, Server};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::mcp::McpMode;
use crate::out::say;
use crate::{AGENT, provider, sandbox, system_prompt};

const USAGE: &str =
    "usage: serve [--config FILE [--check]] [--port N] [--host ADDR] [--database-url postgres://..]
             [--data-dir DIR] [--auth FILE] [--mcp stdio|http] [--acp] [--inbox-url URL] [--restate [--restate-ports N]]

  --config FILE       read reins.toml (docs/configuration.md): store, driver, listen address,
                      tokens and OIDC, Cedar policies, budgets, notifications, telemetry;
                      REINS_<SECTION>__<KEY> variables override it; flags win over both
  --check             with --config: check the file, print the effective configuration
                      (secrets redacted) and exit: 0 when it is good, 2 with the key and
                      line of what is wrong

  --port N            listen on 127.0.0.1:N (default 8080; 0 picks a free port;
                      with --mcp stdio or --acp the default is a free port)
  --host ADDR         listen on ADDR instead of 127.0.0.1 (0.0.0.0 in a container; see
                      docs/deploying.md)
  --database-url URL  keep sessions in PostgreSQL instead of SQLite
  --data-dir DIR      where the SQLite file and the tools' sandbox live (default .reins-demo;
                      created when missing)
  --auth FILE         more principals (JSON, see reins_server::auth); the dev token is always added
  --mcp http          also serve the agent as an MCP server (streamable HTTP) at /mcp,
                      beside the API and the inbox
  --mcp stdio         serve the agent as an MCP server on stdin/stdout (for a host that
                      starts this program); the API and the inbox run on --port, and
                      everything this program prints goes to stderr
  --acp               serve the agent to an editor over the Agent Client Protocol on
                      stdin/stdout (for Zed and other ACP clients that start this program);
                      approvals are the editor's permission requests, the API and the inbox
                      run on --port, and everything this program prints goes to stderr
  --inbox-url URL     where a paused MCP call tells the client to decide (default: this
                      server's own inbox)
  --restate           run the sessions on Restate: the same agent, API, inbox, AG-UI, MCP and
                      ACP, with reins-server fronting a local restate-server that this command starts
                      (installed by `npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate`;
                      its data in DIR/restate, the sessions in DIR/restate.db); after a crash or
                      kill -9 of any of its processes, run the same command again
  --otlp URL          send reins's spans (invoke_agent, chat, execute_tool and the reins.*
                      events; see docs/observability.md) over OTLP to URL, e.g.
                      http://127.0.0.1:4318 (OTLP/HTTP; /v1/traces is added) or, with
                      --otlp-protocol grpc, http://127.0.0.1:4317
  --otlp-protocol P   `http` (default) or `grpc`
  --restate-ports N   with --restate: restate-server's ingress on 127.0.0.1:N, its admin API on
                      N+1, its node on N+2, the agent's Restate endpoint on N+3 (default 9080)";

/// The command line of `serve`.
struct Options {
    /// `--config FILE`.
    config: Option<PathBuf>,
    /// `--check`.
    check: bool,
    port: Option<u16>,
    /// `--host`: the address to listen on (default 127.0.0.1, or the file's).
    host: Option<std::net::IpAddr>,
    database_url: Option<String>,
    data_dir: PathBuf,
    auth: Option<PathBuf>,
    mcp: Option<McpMode>,
    /// `--acp`: ACP on stdin/stdout.
    acp: bool,
    inbox_url: Option<String>,
    /// `--restate`: the sessions run on Restate.
    restate: bool,
    /// `--restate-ports`: the first of the four ports `--restate` uses.
    restate_ports: Option<u16>,
    /// `--otlp URL` (and `--otlp-protocol`): where reins's spans go.
    otlp: Option<(String, OtlpProtocol)>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        config: None,
        check: false,
        port: None,
        host: None,
        database_url: None,
        data_dir: PathBuf::from(".reins-demo"),
        auth: None,
        mcp: None,
        acp: false,
        inbox_url: None,
        restate: false,
        restate_ports: None,
        otlp: None,
    };
    let mut protocol = None;
    let args: Vec<String> = args.collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(None);
    }
    let mut args = args.into_iter().peekable();
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let port = |name: &str, v: String| {
            v.parse::<u16>()
                .map_err(|_| format!("{name}: `{v}` is not a port number"))
        };
        match a.as_str() {
            "--config" => o.config = Some(PathBuf::from(value("--config")?)),
            "--check" => o.check = true,
            "--port" => o.port = Some(port("--port", value("--port")?)?),
            "--host" => {
                let v = value("--host")?;
                o.host = Some(
                    v.parse()
                        .map_err(|_| format!("--host: `{v}` is not an IP address"))?,
                );
            }
            "--restate" => o.restate = true,
            "--restate-ports" => {
                o.restate_ports = Some(port("--restate-ports", value("--restate-ports")?)?);
            }
            "--database-url" => o.database_url = Some(value("--database-url")?),
            "--data-dir" => o.data_dir = PathBuf::from(value("--data-dir")?),
            "--auth" => o.auth = Some(PathBuf::from(value("--auth")?)),
            "--mcp" => {
                let v = args
                    .next_if(|v| !v.starts_with('-'))
                    .ok_or("--mcp needs `stdio` (MCP on stdin/stdout) or `http` (MCP at /mcp)")?;
                o.mcp = Some(McpMode::parse(&v)?);
            }
            "--acp" => o.acp = true,
            "--inbox-url" => o.inbox_url = Some(value("--inbox-url")?),
            "--otlp" => o.otlp = Some((value("--otlp")?, OtlpProtocol::Http)),
            "--otlp-protocol" => {
                protocol = Some(match value("--otlp-protocol")?.as_str() {
                    "http" | "http/protobuf" => OtlpProtocol::Http,
                    "grpc" => OtlpProtocol::Grpc,
                    other => {
                        return Err(format!(
                            "--otlp-protocol: `{other}` is not `http` or `grpc`"
                        ));
                    }
                });
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    match (&mut o.otlp, protocol) {
        (Some((_, p)), Some(chosen)) => *p = chosen,
        (None, Some(_)) => return Err("--otlp-protocol needs --otlp".to_owned()),
        _ => {}
    }
    if o.check && o.config.is_none() {
        return Err("--check needs --config FILE".to_owned());
    }
    if o.acp && o.mcp == Some(McpMode::Stdio) {
        return Err("--acp and --mcp stdio both need stdin/stdout; pick one".to_owned());
    }
    Ok(Some(o))
}

/// The service's entry point (the `serve` binary): parses the command line, then
/// serves until Ctrl-C; the exit code is 2 for bad usage, 1 when serving failed.
pub fn serve() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            say!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("serve: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let config = match &opts.config {
        Some(path) => match Config::from_path(path).and_then(|c| c.check().map(|()| c)) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("serve: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    if let Err(e) = check_flags(&opts, config.as_ref()) {
        eprintln!("serve: {e}\n\n{USAGE}");
        return ExitCode::from(2);
    }
    if opts.check {
        if let (Some(c), Some(path)) = (&config, &opts.config) {
            say!("# {}: good\n{}", path.display(), c.redacted());
        }
        return ExitCode::SUCCESS;
    }
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
    // `--otlp`: reins's spans go to the collector (the exporter runs on the runtime).
    let otlp_from_file = config.as_ref().and_then(|c| {
        let t = &c.telemetry;
        let protocol = match t.otlp_protocol {
            OtlpTransport::Http => OtlpProtocol::Http,
            OtlpTransport::Grpc => OtlpProtocol::Grpc,
        };
        t.otlp_endpoint.clone().map(|url| (url, protocol))
    });
    let service = config
        .as_ref()
        .and_then(|c| c.telemetry.service_name.clone())
        .unwrap_or_else(|| "reins-demo".to_owned());
    let otlp = match opts.otlp.as_ref().or(otlp_from_file.as_ref()) {
        Some((url, protocol)) => {
            let _in_runtime = runtime.enter();
            match Otlp::new(url, *protocol, &service) {
                Ok(o) => Some(o),
                Err(e) => {
                    eprintln!("serve: --otlp: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => None,
    };
    // Logs go to stderr: with `--mcp stdio`, stdout carries the MCP messages.
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,reins_server=info".into()),
        );
    tracing_subscriber::registry()
        .with(logs)
        .with(otlp.as_ref().map(Otlp::layer))
        .init();
    let served = runtime.block_on(run(opts, config));
    if let Some(o) = &otlp {
        // Flushes the spans still buffered.
        let _in_runtime = runtime.enter();
        o.shutdown();
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What [`run`] prints at start: on stdout, or on stderr when stdout carries MCP.
struct Banner {
    to_stderr: bool,
}

impl Banner {
    fn line(&self, text: impl std::fmt::Display) {
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            say!("{text}");
        }
    }
}

/// Checks the flags against the file: `--restate-ports` needs the Restate driver.
fn check_flags(opts: &Options, config: Option<&Config>) -> Result<(), String> {
    if opts.restate_ports.is_some() && !on_restate(opts, config) {
        return Err("--restate-ports needs --restate".to_owned());
    }
    if let Some(c) = config {
        if opts.auth.is_some() && (!c.auth.tokens.is_empty() || c.auth.oidc.is_some()) {
            return Err(
                "give the principals with --auth or in the file's [auth], not both".to_owned(),
            );
        }
        if c.driver.ingress.is_some() {
            return Err(
                "driver.ingress: serve starts its own restate-server (driver.restate_ports); \
                 a deployment elsewhere is for programs built on reins-server"
                    .to_owned(),
            );
        }
    }
    Ok(())
}

/// Whether the sessions run on Restate: `--restate`, or the file's driver.
fn on_restate(opts: &Options, config: Option<&Config>) -> bool {
    opts.restate || config.is_some_and(|c| c.driver.kind == DriverKind::Restate)
}

async fn run(mut opts: Options, config: Option<Config>) -> Result<(), String> {
    if let Some(c) = &config {
        opts.restate = on_restate(&opts, Some(c));
        opts.restate_ports = opts.restate_ports.or(c.driver.restate_ports);
    }
    // The file's store, policies and channels, checked and opened (nothing served yet).
    let setup = match &config {
        Some(c) => Some(c.setup().await.map_err(|e| e.to_string())?),
        None => None,
    };
    std::fs::create_dir_all(&opts.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            opts.data_dir.display()
        )
    })?;
    // Sessions run on Restate are kept apart from the local driver's: a session is
    // driven by one of them.
    let (db_file, sandbox_name) = if opts.restate {
        ("restate.db", "restate")
    } else {
        ("server.db", "server")
    };
    let from_file = setup.as_ref().and_then(|s| s.store().cloned());
    let (store, store_label): (Arc<dyn MemoryStore>, String) = match &opts.database_url {
        None if from_file.is_some() => {
            let label = config
                .as_ref()
                .and_then(|c| c.store.sqlite.as_ref())
                .map_or("PostgreSQL (from the configuration)".to_owned(), |p| {
                    format!("SQLite {} (from the configuration)", p.display())
                });
            (from_file.clone().ok_or("no store")?, label)
        }
        Some(url) => (
            Arc::new(
                PostgresStore::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?,
            ),
            "PostgreSQL".to_owned(),
        ),
        None => {
            let path = opts.data_dir.join(db_file);
            let store = SqliteStore::open(&path)
                .await
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            (Arc::new(store), format!("SQLite {}", path.display()))
        }
    };
    let sandbox = sandbox::Sandbox::open(opts.data_dir.join("sandboxes").join(sandbox_name))
        .map_err(|e| format!("cannot create the sandbox: {e}"))?;
    let choice = provider::choose(
        None,
        None,
        false,
        Duration::from_millis(300),
        Duration::from_millis(25),
    )?;
    let mut builder = Agent::builder();
    if let Some(s) = &setup {
        builder = s.agent(builder);
    }
    let agent = builder
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
    let mut auth = match (&opts.auth, &setup) {
        (Some(path), _) => Auth::from_file(path).map_err(|e| e.to_string())?,
        (None, Some(s)) => s.auth().clone(),
        (None, None) => Auth::new(),
    };
    auth = auth.token(
        &token,
        Principal::new(
            "dev",
            [AccessRole::User, AccessRole::Approver, AccessRole::Admin],
        ),
    );
    let on_stdio = opts.acp || matches!(opts.mcp, Some(McpMode::Stdio));
    let listen = config.as_ref().and_then(|c| c.server.listen);
    // Flags win over the file; the file over the defaults.
    let addr = match (opts.port, opts.host, listen) {
        (None, None, Some(addr)) => addr,
        (port, host, _) => SocketAddr::from((
            host.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])),
            port.unwrap_or(if on_stdio { 0 } else { 8080 }),
        )),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    let out = Banner {
        to_stderr: on_stdio,
    };
    // The session port reins-server and the MCP and ACP doors hold: the agent itself
    // (the local driver), or `Relayed` over the Restate deployment.
    let (sessions, auth, deployment): (Arc<dyn Sessions>, _, _) = if opts.restate {
        let d = restate::start(restate::Setup {
            agent,
            auth,
            server_addr: addr,
            data_dir: opts.data_dir.clone(),
            first_port: opts.restate_ports.unwrap_or(restate::DEFAULT_PORTS),
        })
        .await?;
        (d.sessions.clone(), d.auth.clone(), Some(d))
    } else {
        (Arc::new(agent), auth, None)
    };
    let mut server = match &setup {
        Some(s) => Server::from_config(Arc::clone(&sessions), s)
            .await
            .map_err(|e| e.to_string())?,
        None => Server::with_sessions(Arc::clone(&sessions)),
    }
    .auth(auth);
    if deployment.is_none() {
        // Notices (a call waiting, decided, a run completed) print on stderr, so the
        // flow shows without Slack or SMTP.
        server = server.channel(reins_server::notify::TerminalChannel::new());
    }
    let mut app = server.router();
    let inbox = opts
        .inbox_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}/"));
    let acp = opts.acp.then(|| {
        reins::acp::AcpAgent::builder(sessions.clone())
            .principal("local")
            .build()
    });
    let mcp = match opts.mcp {
        Some(mode) => Some((mode, crate::mcp::server(sessions, &inbox)?)),
        None => None,
    };
    if let Some((McpMode::Http, server)) = &mcp {
        app = app.route_service("/mcp", crate::mcp::http_service(server));
    }
    let on_restate = if opts.restate { ", on Restate" } else { "" };
    out.line(format_args!(
        "reins-server: {AGENT} on http://{addr}{on_restate}"
    ));
    if let Some(path) = &opts.config {
        out.line(format_args!("config:  {}", path.display()));
    }
    out.line(format_args!("store:   {store_label}"));
    out.line(format_args!("model:   {}", choice.label));
    out.line(format_args!("sandbox: {}", sandbox.root().display()));
    out.line(format_args!("inbox:   http://{addr}/#token={token}"));
    out.line(format_args!("token: {token}"));
    match &mcp {
        Some((McpMode::Http, _)) => {
            out.line(format_args!("mcp:     http://{addr}/mcp (streamable HTTP)"));
        }
        Some((McpMode::Stdio, _)) => out.line("mcp:     on stdin/stdout"),
        None => {}
    }
    if acp.is_some() {
        out.line(format_args!(
            "acp:     on stdin/stdout (protocol version {}); approvals are the editor's permission requests, or the inbox's",
            reins::acp::PROTOCOL_VERSION
        ));
    }
    if mcp.is_some() {
        out.line(format_args!(
            "paused MCP calls are decided at {inbox} (clients without elicitation are told so)"
        ));
    }
    if let Some(d) = &deployment {
        out.line(d.describe());
    }
    if !on_stdio {
        out.line(format_args!(
            "try:     curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\\n           -d '{{\"message\":\"delete temp.txt\"}}' http://{addr}/v1/sessions/dev%2Fchat-1/runs"
        ));
        out.line(if deployment.is_some() {
            "(Ctrl-C stops both; after a crash or kill -9, run the same command again)"
        } else {
            "(Ctrl-C stops the server)"
        });
    }
    let http = reins_server::serve_with_shutdown(
        listener,
        app,
        reins_server::ServeOptions::default(),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    );
    let served = async move {
        if let Some(acp) = acp {
            // The editor ends the conversation by closing stdin; the inbox stops with it.
            let inbox = tokio::spawn(http);
            let served = acp.serve_stdio().await;
            inbox.abort();
            return served.map_err(|e| format!("ACP over stdio failed: {e}"));
        }
        match mcp {
            // The host ends the conversation by closing stdin; the inbox stops with it.
            Some((McpMode::Stdio, server)) => {
                let inbox = tokio::spawn(http);
                let served = server.serve_stdio().await;
                inbox.abort();
                served.map_err(|e| format!("MCP over stdio failed: {e}"))
            }
            // reins-server's accept loop: a header read timeout against slow clients.
            _ => http.await.map_err(|e| format!("the server failed: {e}")),
        }
    };
    match deployment {
        Some(d) => d.serve_until(served).await,
        None => served.await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Option<Options>, String> {
        parse(a.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn help_is_a_flag_anywhere_and_names_restate() {
        assert!(matches!(args(&["--help"]), Ok(None)));
        assert!(matches!(args(&["--restate", "--help"]), Ok(None)));
        assert!(USAGE.contains("--restate"));
    }

    #[test]
    fn restate_ports_need_restate() {
        let o = args(&["--restate", "--restate-ports", "9100"])
            .unwrap()
            .unwrap();
        assert!(o.restate);
        assert_eq!(o.restate_ports, Some(9100));
        let plain = args(&["--restate-ports", "9100"]).unwrap().unwrap();
        assert!(check_flags(&plain, None).is_err());
        assert!(args(&["--check"]).is_err());
        assert!(
            args(&["--config", "x.toml", "--check"])
                .unwrap()
                .unwrap()
                .check
        );
        assert!(args(&["--restate", "--restate-ports", "x"]).is_err());
        assert!(
            args(&["--restate", "--mcp", "http"])
                .unwrap()
                .unwrap()
                .restate
        );
        assert!(args(&["--restate", "--acp"]).unwrap().unwrap().acp);
        assert!(args(&["--acp", "--mcp", "stdio"]).is_err());
        assert!(args(&["--acp", "--mcp", "http"]).unwrap().unwrap().acp);
    }

    #[test]
    fn host_is_loopback_unless_given() {
        let o = args(&[]).unwrap().unwrap();
        assert_eq!(o.host, None);
        let o = args(&["--host", "0.0.0.0"]).unwrap().unwrap();
        assert_eq!(o.host, Some(std::net::IpAddr::from([0, 0, 0, 0])));
        assert!(args(&["--host", "::"]).unwrap().is_some());
        assert!(args(&["--host", "localhost"]).is_err());
        assert!(args(&["--host"]).is_err());
    }
}
