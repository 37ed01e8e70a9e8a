//! # reins-restate
//!
//! reins agents that run on [Restate](https://restate.dev), a durable-execution
//! engine: a second driver of the same [`reins_agent::run::Run`] the local driver
//! drives, for teams that run Restate and want it — not reins's own locks and leases —
//! to own retries, recovery and placement.
//!
//! - A session is a Restate **virtual object** keyed by its session id
//!   ([`SessionObject`], service `ReinsSession`): its exclusive `turn` handler drives the
//!   run, so one turn per session runs at a time, on whichever service process Restate
//!   picks.
//! - Each step is **journaled**: the stored session is read once per turn; the model's
//!   final message is journaled (recovery never calls the model again for a finished
//!   call); each tool call runs behind a journaled started marker and through the
//!   reins tool-call ledger, so a crash mid-tool gives the honest `Unknown` outcome
//!   (a tool declared idempotent runs again), never a silent second run.
//! - A pause is a set of **awakeables**, one per requirement (and one for resume or a
//!   new message), kept in the object's state; inputs go to the shared `submit`
//!   handler, which validates them against the stored session exactly as the local
//!   driver does and resolves the awakeable. Reading a session (`view`) and
//!   interrupting it (`interrupt`) are shared handlers too.
//! - While a step runs, its **live events** (the model's text deltas, tool calls
//!   starting and finishing) go to the reins-servers fronting the deployment through a
//!   [`LiveRelay`] ([`SessionObject::live`]), so their listeners see the turn stream;
//!   best-effort, never the record (see [`live`]).
//! - The reins store stays the record of messages, requirements, decisions and the
//!   audit trail, so everything that reads the store (reins-server's inbox, the audit
//!   trail, snapshots) shows Restate-driven sessions as well.
//!
//! [`RestateClient`] talks to the objects through Restate's ingress; [`LocalRestate`]
//! runs a restate-server on loopback (tests, demos). docs/restate.md has the whole
//! picture: when to use it, the mapping, timeouts, the licence, upgrades.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::Agent;
//! use reins_message::Msg;
//! use reins_restate::{RestateClient, SessionObject, TurnRequest};
//!
//! // The service process: the agent as a Restate virtual object on an HTTP/2 endpoint.
//! # let model = reins_model::ScriptedModel::new([reins_model::ScriptedResponse::text("hi")]);
//! let agent = Agent::builder().name("SafeAgent").model(model).build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
//! tokio::spawn(reins_restate::serve(SessionObject::new(agent)?, listener));
//! // (register http://127.0.0.1:9080 with restate-server's admin API once)
//!
//! // Anywhere: talk to a session through the ingress.
//! let client = RestateClient::new("http://127.0.0.1:8080");
//! let sent = client
//!     .submit("user-7/chat-1", &TurnRequest::message(Msg::user("delete temp.txt")), Some("req-1"))
//!     .await?;
//! let view = client
//!     .wait_settled("user-7/chat-1", sent.version, std::time::Duration::from_secs(30))
//!     .await?;
//! if view.paused {
//!     let ids = view.requirements.iter().map(|r| reins_agent::Decision::approve(&r.id)).collect();
//!     client.decide("user-7/chat-1", ids, Some(view.token), Some("req-2")).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `sqlite`   | yes     | `reins_memory::SqliteStore` (forwarded to reins-agent) |
//! | `postgres` | no      | `reins_memory::PostgresStore` (forwarded to reins-agent) |

mod client;
mod error;
pub mod live;
pub mod local;
mod object;
mod turn;
mod wire;

pub use client::RestateClient;
pub use error::{Error, Result};
pub use live::LiveRelay;
pub use local::{LocalCluster, LocalRestate, RestatePorts};
pub use object::{SERVICE_NAME, SessionObject, Timeouts};
pub use wire::{Delivery, Interrupted, Refused, Submitted, TurnInput, TurnRequest};

/// Serves the session object on `listener` as a Restate endpoint (HTTP/2, as Restate
/// calls it) until the process ends.
pub async fn serve(object: SessionObject, listener: tokio::net::TcpListener) {
    let endpoint = restate_sdk::endpoint::Endpoint::builder()
        .bind(object.service())
        .build();
    restate_sdk::http_server::HttpServer::new(endpoint)
        .serve(listener)
        .await;
}
