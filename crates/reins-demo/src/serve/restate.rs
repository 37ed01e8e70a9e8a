//! `serve --restate`: the demo agent's sessions run on Restate, behind the same
//! reins-server API, inbox and AG-UI as `serve`, and the same MCP and ACP doors
//! (`--mcp`, `--acp`): all of them hold one `Relayed` over the deployment.
//!
//! One process (this one) holds both sides of the agent — reins-server fronting the
//! deployment (over `Relayed` with a `RestateClient`) and the agent's Restate
//! endpoint (`SessionObject`, its live events relayed to this reins-server) — and it
//! starts a restate-server from the npm package as its child, on fixed ports, with its
//! data under the data directory. Every process can be killed with `kill -9` and the
//! same command run again: the ports are the same, a restate-server the killed run
//! left behind is stopped first (`LocalRestate`), the deployment is registered again
//! at the same address, and paused turns wait where they were. When restate-server
//! dies on its own, this process stops too, so that the same command can start both
//! again.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use reins::agent::port::{Relayed, Sessions};
use reins::prelude::Agent;
use reins_restate::{LiveRelay, LocalRestate, RestateClient, RestatePorts, SessionObject};
use reins_server::{AccessRole, Auth, Principal};

/// The default first port: restate-server's ingress on 9080, admin on 9081, node on
/// 9082, the agent's Restate endpoint on 9083.
pub(super) const DEFAULT_PORTS: u16 = 9080;

/// What `serve` prepared: the agent, the tokens, where reins-server listens.
pub(super) struct Setup {
    pub(super) agent: Agent,
    pub(super) auth: Auth,
    /// reins-server's address (the endpoint relays its live events there).
    pub(super) server_addr: SocketAddr,
    pub(super) data_dir: PathBuf,
    /// `--restate-ports`.
    pub(super) first_port: u16,
}

/// restate-server and the agent's Restate endpoint, running, with the port that
/// fronts them.
pub(super) struct Deployment {
    /// The session port reins-server and the MCP and ACP doors hold: `Relayed` over
    /// the deployment's client, on the store the endpoint commits to.
    pub(super) sessions: Arc<dyn Sessions>,
    /// The tokens of `Setup`, and the endpoint's, which relays its live events to
    /// reins-server.
    pub(super) auth: Auth,
    restate: LocalRestate,
    restate_dir: PathBuf,
    endpoint_url: String,
    endpoint_task: tokio::task::JoinHandle<()>,
}

/// Starts restate-server and the agent's Restate endpoint, registers the endpoint, and
/// makes the session port in front of them.
pub(super) async fn start(setup: Setup) -> Result<Deployment, String> {
    let Setup {
        agent,
        auth,
        server_addr,
        data_dir,
        first_port,
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
    let restate = LocalRestate::start_on(binary, &restate_dir, ports, "")
        .await
        .map_err(|e| format!("cannot start restate-server: {e}"))?;

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
    let endpoint_task = tokio::spawn(reins_restate::serve(object, endpoint));
    let endpoint_url = format!("http://{endpoint_addr}");
    restate
        .register(&endpoint_url)
        .await
        .map_err(|e| format!("restate-server refused the deployment {endpoint_url}: {e}"))?;

    let client = Arc::new(RestateClient::new(restate.ingress_url()));
    // One port for every door: the live events the endpoint relays to reins-server
    // reach the MCP and ACP doors' runs too.
    let sessions: Arc<dyn Sessions> = Arc::new(Relayed::new(agent, client));
    Ok(Deployment {
        sessions,
        auth,
        restate,
        restate_dir,
        endpoint_url,
        endpoint_task,
    })
}

impl Deployment {
    /// The banner's line about the deployment.
    pub(super) fn describe(&self) -> String {
        format!(
            "restate: restate-server {} (ingress {}, admin {}, data and log in {}); the agent's endpoint {}",
            self.restate
                .pid()
                .map_or_else(String::new, |p| format!("pid {p}")),
            self.restate.ingress_url(),
            self.restate.admin_url(),
            self.restate_dir.display(),
            self.endpoint_url,
        )
    }

    /// Serves with `served` (reins-server, or a door on stdio beside it) until it
    /// ends, or until restate-server or the endpoint stops; then stops restate-server.
    pub(super) async fn serve_until(
        mut self,
        served: impl Future<Output = Result<(), String>>,
    ) -> Result<(), String> {
        let log = self.restate.log_path();
        let result = tokio::select! {
            r = served => r,
            exit = self.restate.wait() => Err(format!(
                "restate-server stopped ({}); see {}. Run the same command again to start it",
                exit.map_or_else(|e| e.to_string(), |s| s.to_string()),
                log.display()
            )),
            _ = &mut self.endpoint_task => Err("the agent's Restate endpoint stopped".to_owned()),
        };
        self.endpoint_task.abort();
        self.restate
            .kill()
            .await
            .map_err(|e| format!("cannot stop restate-server: {e}"))?;
        result
    }
}
