//! Portable session snapshots: versioned JSON that carries a (paused) session from one
//! store or machine to another.

use chrono::{DateTime, Utc};
use reins_memory::Commit;
use reins_message::Msg;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::requirement::Requirement;
use crate::run::{Run, RunState};
use crate::session::Session;
use crate::view::DecisionRecord;

/// The snapshot format this version of reins writes. Version 2 added the audit trail
/// (`decisions`); version 1 snapshots are still read (their trail is empty).
pub const SNAPSHOT_SCHEMA_VERSION: u32 = 2;

/// The oldest snapshot format this version of reins reads.
const OLDEST_READABLE: u64 = 1;

/// A session exported with [`Session::snapshot`] and imported with
/// [`Agent::restore`](crate::Agent::restore). The JSON format is documented in
/// `docs/persistence.md`; `schema_version` tells readers what they hold, and a reader
/// refuses versions it does not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    /// The format's version ([`SNAPSHOT_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The session id.
    pub session_id: String,
    /// When it was exported.
    pub exported_at: DateTime<Utc>,
    /// The transcript.
    pub messages: Vec<Msg>,
    /// The run's state (pending tool uses, phase, iteration).
    pub run_state: RunState,
    /// What the session waits for (informational: derived from `run_state`).
    #[serde(default)]
    pub requirements: Vec<Requirement>,
    /// The session's audit trail, oldest first (version 2 on; empty when read from a
    /// version 1 snapshot).
    #[serde(default)]
    pub decisions: Vec<DecisionRecord>,
}

impl SessionSnapshot {
    pub(crate) fn of(session_id: &str, run: &Run, decisions: Vec<DecisionRecord>) -> Self {
        Self {
            schema_version: SNAPSHOT_SCHEMA_VERSION,
            session_id: session_id.to_owned(),
            exported_at: Utc::now(),
            messages: run.messages().to_vec(),
            run_state: run.state().clone(),
            requirements: if run.is_paused() {
                run.requirements()
            } else {
                Vec::new()
            },
            decisions,
        }
    }

    /// The snapshot as pretty JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| AgentError::Snapshot(e.to_string()))
    }

    /// Reads a snapshot. Checks `schema_version` first: a missing, unknown or newer
    /// version is refused with a message saying which versions this reins reads.
    pub fn from_json(json: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| AgentError::Snapshot(format!("not JSON: {e}")))?;
        Self::from_value(value)
    }

    /// [`SessionSnapshot::from_json`] from a parsed value.
    pub fn from_value(mut value: Value) -> Result<Self> {
        let version = value
            .get("schema_version")
            .ok_or_else(|| {
                AgentError::Snapshot(
                    "no `schema_version` field: this is not a reins session snapshot".to_owned(),
                )
            })?
            .as_u64()
            .ok_or_else(|| {
                AgentError::Snapshot("`schema_version` must be a whole number".to_owned())
            })?;
        if !(OLDEST_READABLE..=u64::from(SNAPSHOT_SCHEMA_VERSION)).contains(&version) {
            let newer = version > u64::from(SNAPSHOT_SCHEMA_VERSION);
            return Err(AgentError::Snapshot(format!(
                "schema_version {version} is {}; this reins reads versions {OLDEST_READABLE} to {SNAPSHOT_SCHEMA_VERSION}{}",
                if newer {
                    "newer than this reins supports"
                } else {
                    "not a known version"
                },
                if newer {
                    " (upgrade reins to read it)"
                } else {
                    ""
                },
            )));
        }
        if version == 1 {
            // Version 1 had no audit trail: migrate by starting an empty one.
            if let Some(obj) = value.as_object_mut() {
                obj.remove("decisions");
                obj.insert("schema_version".to_owned(), SNAPSHOT_SCHEMA_VERSION.into());
            }
        }
        reins_message::from_json_value(value).map_err(|e| AgentError::Snapshot(e.to_string()))
    }
}

async fn restore(agent: &Agent, snap: SessionSnapshot) -> Result<Session> {
    if snap.session_id.trim().is_empty() {
        return Err(AgentError::Snapshot(
            "the snapshot's session_id is empty".to_owned(),
        ));
    }
    // A transcript with a reused or empty tool use id cannot be made provider-valid
    // without guessing which result answers which call: refuse it.
    let mut ids = std::collections::HashSet::new();
    for m in &snap.messages {
        for u in m.tool_uses() {
            if u.id.is_empty() || !ids.insert(u.id.as_str()) {
                return Err(AgentError::Snapshot(format!(
                    "message `{}` has a tool use with {} id `{}`; every tool use needs its \
                     own non-empty id",
                    m.id,
                    if u.id.is_empty() {
                        "an empty"
                    } else {
                        "a reused"
                    },
                    u.id
                )));
            }
        }
    }
    let store = &agent.runtime.store;
    let existing = store.open_session(&snap.session_id).await?;
    // Taken: it has a transcript, or a run state (a session whose turn never stored a
    // message still has one). An empty session, just opened, may be filled.
    if !existing.messages.is_empty() || existing.run_state.is_some() {
        return Err(AgentError::SessionExists {
            session: snap.session_id,
        });
    }
    // Requirements are re-derived from the run state, not trusted from the file.
    let run = Run::restore(agent.config.run, snap.messages, Some(snap.run_state));
    let requirements = if run.is_paused() {
        run.requirements()
    } else {
        Vec::new()
    };
    let mut state = run.state().clone();
    state.stored_requirements = requirements.iter().map(|r| r.id.clone()).collect();
    let commit = Commit {
        expected_version: existing.version,
        append: run.messages().to_vec(),
        clear_requirements: true,
        add_requirements: requirements
            .iter()
            .map(crate::run::requirement_record)
            .collect(),
        run_state: Some(Some(reins_memory::RunStateData::typed(
            std::sync::Arc::new(state),
        ))),
        decisions: snap
            .decisions
            .iter()
            .map(DecisionRecord::to_entry)
            .collect(),
        ..Commit::default()
    };
    store.commit(&snap.session_id, commit).await?;
    let session = agent.session(&snap.session_id).await?;
    {
        // A handle opened before the import holds the old, empty state.
        let mut core = session.shared.core.lock().await;
        crate::state::reload_if_needed(
            &agent.runtime.store,
            agent.config.run,
            &snap.session_id,
            &mut core,
            true,
        )
        .await?;
    }
    Ok(session)
}

impl Agent {
    /// Imports a session snapshot (see [`Session::snapshot`]) into this agent's store
    /// and opens it. Refuses to overwrite a session that already has messages.
    pub async fn restore(&self, snapshot: SessionSnapshot) -> Result<Session> {
        restore(self, snapshot).await
    }
}

impl Session {
    /// Exports the session (transcript, run state, requirements, audit trail) as a
    /// versioned, portable snapshot. See `docs/persistence.md` for the format.
    pub async fn snapshot(&self) -> Result<SessionSnapshot> {
        let decisions = self.decisions().await?;
        self.read(|run| SessionSnapshot::of(self.id(), run, decisions))
            .await
    }
}
