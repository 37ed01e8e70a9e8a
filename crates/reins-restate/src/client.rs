//! [`RestateClient`]: a session's inputs and reads through Restate's ingress.

use std::time::{Duration, Instant};

use reins_agent::run::Phase;
use reins_agent::{
    AgentError, Decision, ReplayReport, ReplayTurn, Requirement, RunOutput, SessionBackend,
    SessionView, Submission,
};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::object::SERVICE_NAME;
use crate::wire::{Interrupted, Refused, Submitted, TurnInput, TurnRequest};

/// Talks to the session objects of a Restate deployment through its ingress.
///
/// Inputs go to the shared `submit` handler: it validates them against the stored
/// session (a refused input comes back as [`Error::Refused`] with the local driver's
/// error), then wakes the paused turn or starts one. Pass an idempotency key to make a
/// retried request harmless: Restate answers a repeated key with the first answer.
#[derive(Debug, Clone)]
pub struct RestateClient {
    http: reqwest::Client,
    ingress: String,
}

impl RestateClient {
    /// A client of the ingress at `ingress` (e.g. `http://127.0.0.1:8080`).
    pub fn new(ingress: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::new(),
            ingress: ingress.into().trim_end_matches('/').to_owned(),
        }
    }

    fn url(&self, session: &str, handler: &str) -> String {
        format!(
            "{}/{SERVICE_NAME}/{}/{handler}",
            self.ingress,
            encode(session)
        )
    }

    async fn post<T: DeserializeOwned>(
        &self,
        session: &str,
        handler: &str,
        body: Option<&TurnRequest>,
        idempotency_key: Option<&str>,
    ) -> Result<T> {
        let mut req = self.http.post(self.url(session, handler));
        if let Some(key) = idempotency_key {
            req = req.header("idempotency-key", key);
        }
        req = match body {
            Some(b) => req.json(b),
            None => req,
        };
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|e| Error::Decode(format!("{e}: {text}")));
        }
        Err(refusal_of(status, &text))
    }

    /// Hands the session an input (a message, decisions, resume). With an
    /// idempotency key, a repeated request gets the first answer and does nothing
    /// more.
    ///
    /// # Errors
    /// [`Error::Refused`] with the local driver's error when the session refuses it.
    pub async fn submit(
        &self,
        session: &str,
        request: &TurnRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Submitted> {
        self.post(session, "submit", Some(request), idempotency_key)
            .await
    }

    /// Runs a turn and waits for its end, through any pause (the `turn` handler called
    /// through the ingress; it answers when the run completes, is cancelled or stops
    /// at the iteration limit). Inputs are not validated first: a refused one fails
    /// the turn with its refusal. For interactive use prefer [`RestateClient::submit`],
    /// which answers at once; this suits runs that do not pause (and benchmarks).
    ///
    /// # Errors
    /// [`Error::Refused`] for a refused input; [`Error::Http`] when the answer does not
    /// arrive.
    pub async fn run(
        &self,
        session: &str,
        request: &TurnRequest,
        idempotency_key: Option<&str>,
    ) -> Result<RunOutput> {
        self.post(session, "turn", Some(request), idempotency_key)
            .await
    }

    /// Decisions about pending requirements, made on `view` when given.
    ///
    /// # Errors
    /// As [`RestateClient::submit`].
    pub async fn decide(
        &self,
        session: &str,
        decisions: Vec<Decision>,
        view: Option<reins_agent::ViewToken>,
        idempotency_key: Option<&str>,
    ) -> Result<Submitted> {
        let mut req = TurnRequest::decisions(decisions);
        req.view = view;
        self.submit(session, &req, idempotency_key).await
    }

    /// The session as stored: phase, pending requirements, the view token.
    ///
    /// # Errors
    /// [`Error::Refused`] (`not_found`) for a session that does not exist.
    pub async fn view(&self, session: &str) -> Result<SessionView> {
        self.post(session, "view", None, None).await
    }

    /// The requirements the session waits for (empty unless paused).
    ///
    /// # Errors
    /// As [`RestateClient::view`].
    pub async fn pending(&self, session: &str) -> Result<Vec<Requirement>> {
        Ok(self.view(session).await?.requirements)
    }

    /// Replays the recorded session with the service's agent on a scratch store (the
    /// object's `replay` handler): where the agent, as it is deployed now, diverges
    /// from the recording. No tool runs and nothing is stored.
    ///
    /// # Errors
    /// [`Error::Refused`] (`not_found`) for a session that does not exist.
    pub async fn replay(&self, session: &str) -> Result<ReplayReport> {
        self.post(session, "replay", None, None).await
    }

    /// Interrupts the session's turn in progress (a paused session stays paused).
    ///
    /// # Errors
    /// When Restate cannot be reached.
    pub async fn interrupt(&self, session: &str) -> Result<Interrupted> {
        self.post(session, "interrupt", None, None).await
    }

    /// Reads the session until it is past stored version `after` (the
    /// [`Submitted::version`] of an input) and its run is no longer in progress
    /// (paused, finished or idle), at most for `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when it is still running then.
    pub async fn wait_settled(
        &self,
        session: &str,
        after: u64,
        timeout: Duration,
    ) -> Result<SessionView> {
        let start = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let view = match self.view(session).await {
                Ok(v) => Some(v),
                Err(Error::Refused(r)) if r.code == "not_found" => None,
                Err(e) => return Err(e),
            };
            if let Some(v) = &view
                && v.version > after
                && !matches!(
                    v.phase,
                    Phase::Reasoning | Phase::Acting | Phase::Summarizing
                )
            {
                return Ok(v.clone());
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout {
                    session: session.to_owned(),
                    waited_ms: start.elapsed().as_millis(),
                    phase: view.map_or("none".to_owned(), |v| format!("{:?}", v.phase)),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }
}

/// A Restate deployment as a [`SessionBackend`]: what a front end (reins-server, a
/// protocol adapter) written against the trait uses to front sessions that run on
/// Restate. Refusals come back as the local driver's errors
/// ([`Refused::to_agent_error`]); a wrong or expired decision as
/// [`AgentError::InvalidInput`]; anything else (Restate unreachable, an unexpected
/// answer) as [`AgentError::Backend`].
#[async_trait::async_trait]
impl SessionBackend for RestateClient {
    async fn view(&self, session: &str) -> reins_agent::Result<SessionView> {
        RestateClient::view(self, session)
            .await
            .map_err(to_agent_error)
    }

    async fn submit(&self, session: &str, s: Submission) -> reins_agent::Result<()> {
        self.submit_validated(session, s).await.map(|_| ())
    }

    /// [`Submitted::version`]: a retried key is answered with the first submission's.
    async fn submit_validated(
        &self,
        session: &str,
        s: Submission,
    ) -> reins_agent::Result<Option<u64>> {
        let input = match s.input {
            reins_agent::RunInput::Message(message) => TurnInput::Message { message },
            reins_agent::RunInput::Resume => TurnInput::Resume,
            reins_agent::RunInput::Decisions(decisions) => TurnInput::Decisions { decisions },
        };
        let req = TurnRequest {
            input,
            actor: s.actor,
            view: s.view,
            client_tools: s.client_tools,
            output: s.output,
            budget: s.budget,
            trace_parent: s.trace_parent,
        };
        RestateClient::submit(self, session, &req, s.idempotency_key.as_deref())
            .await
            .map(|sent| Some(sent.version))
            .map_err(to_agent_error)
    }

    async fn interrupt(&self, session: &str) -> reins_agent::Result<bool> {
        RestateClient::interrupt(self, session)
            .await
            .map(|i| i.requested)
            .map_err(to_agent_error)
    }

    /// The service replays the whole session before it answers: the turns go to
    /// `turns` all at once, with the report.
    async fn replay(
        &self,
        session: &str,
        turns: Option<tokio::sync::mpsc::UnboundedSender<ReplayTurn>>,
    ) -> reins_agent::Result<ReplayReport> {
        let report = RestateClient::replay(self, session)
            .await
            .map_err(to_agent_error)?;
        if let Some(tx) = turns {
            for t in &report.turns {
                let _ = tx.send(t.clone());
            }
        }
        Ok(report)
    }
}

/// The local driver's error for a client error.
fn to_agent_error(e: Error) -> AgentError {
    match e {
        Error::Refused(r) => r.to_agent_error().unwrap_or_else(|| match r.code.as_str() {
            "invalid_decision" | "expired" => AgentError::InvalidInput(r.message),
            _ => AgentError::Backend(format!("{}: {}", r.code, r.message)),
        }),
        other => AgentError::Backend(other.to_string()),
    }
}

/// The error an ingress answer stands for: a refusal when its message is one.
fn refusal_of(status: StatusCode, text: &str) -> Error {
    let message = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned));
    if let Some(m) = message
        && let Ok(r) = serde_json::from_str::<Refused>(&m)
    {
        return Error::Refused(Box::new(r));
    }
    Error::Status {
        status: status.as_u16(),
        body: text.to_owned(),
    }
}

/// Percent-encodes a session id for one path segment.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_one_path_segment() {
        assert_eq!(encode("user-7/chat 1"), "user-7%2Fchat%201");
    }

    #[test]
    fn a_refusal_in_an_ingress_error_is_read_back() {
        let r = Refused::of(
            "s",
            &reins_agent::AgentError::NothingToResume {
                session: "s".into(),
            },
        );
        let body = serde_json::json!({"message": serde_json::to_string(&r).unwrap()}).to_string();
        let e = refusal_of(StatusCode::CONFLICT, &body);
        assert_eq!(e.refused().unwrap().code, "not_paused");
        assert!(matches!(
            refusal_of(StatusCode::BAD_GATEWAY, "oops"),
            Error::Status { status: 502, .. }
        ));
    }
}
