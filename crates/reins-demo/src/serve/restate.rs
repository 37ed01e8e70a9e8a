//! `serve --restate`: the demo agent's sessions run on Restate, behind the same
//! reins-server API, inbox and AG-UI as `serve`.
//!
//! One process (this one) holds both sides of the agent — reins-server fronting the
//! deployment (`Server::backend` with a `RestateClient`) and the agent's Restate
//! endpoint (`SessionObject`, its live events relayed to this reins-server) — and it
//! starts a restate-server from the npm package as its child, on fixed ports, with its
//! data under the data directory. Every process can be killed with `kill -9` and the
//! same command run again: the ports are the same, a restate-server the killed run
//! left behind is stopped first (`LocalRestate`), the deployment is registered again
//! at the same address, and paused turns wait where they were. When restate-server
//! dies on its own, this process stops too, so that the same command can start both
//! again.

use std::path::PathBuf;
use std::sync::Arc;

use crate::out::say;
use reins::prelude::Agent;
use reins_restate::{LiveRelay, LocalRestate, RestateClient, RestatePorts, SessionObject};
use reins_server::{AccessRole, Auth, Principal, Server};

/// The default first port: restate-server's ingress on 9080, admin on 9081, node on
/// 9082, the agent's Restate endpoint on 9083.
pub(super) const DEFAULT_PORTS: u16 = 9080;

/// What `serve` prepared: the agent, the tokens, reins-server's listener.
pub(super) struct Setup<'a> {
    pub(super) agent: Agent,
    pub(super) auth: Auth,
    pub(super) listener: tokio::net::TcpListener,
    pub(super) data_dir: PathBuf,
    /// `--restate-ports`.
    pub(super) first_port: u16,
    /// Prints `serve`'s banner, with the words that say how it runs.
    pub(super) banner: &'a dyn Fn(&str),
}

/// Starts restate-server, the agent's Restate endpoint and reins-server in front of
/// them; serves until Ctrl-C, or until restate-server or the endpoint stops.
pub(super) async fn serve(setup: Setup<'_>) -> Result<(), String> {
    let Setup {
        agent,
        auth,
        listener,
        data_dir,
        first_port,
        banner,
    } = setup;
    let port = |n: u16| {
        first_port.checked_add(n).ok_or_else(|| {
            format!("--restate-ports {first_port}: four ports from it do not fit below 65536")
        })
    };
    let ports = RestatePorts {
        ingress: port(0)?,
        admin: port(1)?,
        node: port(2)?,
    };
    let endpoint_addr = format!("127.0.0.1:{}", port(3)?);
    // Bound first: a port taken (another `serve --restate`?) fails before anything
    // is started or stopped.
    let endpoint = tokio::net::TcpListener::bind(&endpoint_addr)
        .await
        .map_err(|e| {
            format!("cannot listen on {endpoint_addr} (the agent's Restate endpoint): {e}")
        })?;
    let binary = LocalRestate::find_binary().ok_or(
        "restate-server is not installed: run `npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate` \
         (or set REINS_RESTATE_SERVER to its path)",
    )?;
    let restate_dir = data_dir.join("restate");
    let mut restate = LocalRestate::start_on(binary, &restate_dir, ports, "")
        .await
        .map_err(|e| format!("cannot start restate-server: {e}"))?;

    let server_addr = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    // The endpoint relays its live run events (text deltas, tool progress) to this
    // reins-server, as a principal of its own with the admin role.
    let relay_token = reins_server::generate_token();
    let auth = auth.token(
        &relay_token,
        Principal::new("restate-relay", [AccessRole::Admin]),
    );
    let relay = LiveRelay::new()
        .to(format!("http://{server_addr}"))
        .token(relay_token);
    let object = SessionObject::new(agent.clone())
        .map_err(|e| e.to_string())?
        .live(relay);
    let mut endpoint_task = tokio::spawn(reins_restate::serve(object, endpoint));
    let endpoint_url = format!("http://{endpoint_addr}");
    restate
        .register(&endpoint_url)
        .await
        .map_err(|e| format!("restate-server refused the deployment {endpoint_url}: {e}"))?;

    let app = Server::new(agent)
        .auth(auth)
        .backend(Arc::new(RestateClient::new(restate.ingress_url())))
        .router();
    banner(", on Restate");
    say!(
        "restate: restate-server {} (ingress {}, admin {}, data and log in {}); the agent's endpoint {endpoint_url}",
        restate
            .pid()
            .map_or_else(String::new, |p| format!("pid {p}")),
        restate.ingress_url(),
        restate.admin_url(),
        restate_dir.display(),
    );
    say!("(Ctrl-C stops both; after a crash or kill -9, run the same command again)");
    let log = restate.log_path();
    let served = reins_server::serve_with_shutdown(
        listener,
        app,
        reins_server::ServeOptions::default(),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    );
    let result = tokio::select! {
        r = served => r.map_err(|e| format!("the server failed: {e}")),
        exit = restate.wait() => Err(format!(
            "restate-server stopped ({}); see {}. Run the same command again to start it",
            exit.map_or_else(|e| e.to_string(), |s| s.to_string()),
            log.display()
        )),
        _ = &mut endpoint_task => Err("the agent's Restate endpoint stopped".to_owned()),
    };
    endpoint_task.abort();
    restate
        .kill()
        .await
        .map_err(|e| format!("cannot stop restate-server: {e}"))?;
    result
}
