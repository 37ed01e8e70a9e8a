//! The `requestState` of a paused call (MRTR, revision 2026-07-28).
//!
//! The state names the reins session, the exact requirements the client was shown
//! (a [`ViewToken`]) and what each asked for (its kind: how its answer reads). It is
//! sealed with HMAC-SHA256 (rmcp's `RequestStateCodec`) and carries an expiry; the
//! principal, the tool and a digest of the call's arguments are mixed into the tag as
//! associated data, so the state opens only for the same caller retrying the same
//! request before it lapses. Single use is enforced by the run, the one decision path:
//! once the requirements are decided the session no longer waits on that view, and a
//! replay is refused (`already_decided`, audited) before anything runs.

use std::time::Duration;

use reins_agent::{Requirement, RequirementKind, ViewToken};
use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// What a sealed state says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Paused {
    /// The reins session the call runs in.
    pub(crate) session: String,
    /// The requirements shown (paused + ids).
    pub(crate) view: ViewToken,
    /// What each requirement shown asked for: the answers are read by these, even
    /// when the session has moved on since (the run then refuses them, saying why).
    #[serde(default)]
    pub(crate) asked: Vec<Asked>,
}

/// One requirement as the client was asked about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Asked {
    /// The requirement id (the key of its `inputRequests` entry).
    pub(crate) id: String,
    /// Its kind: what the answer's form was.
    pub(crate) kind: RequirementKind,
}

impl Paused {
    /// The state of a call paused on `requirements` of `session`.
    pub(crate) fn new(session: &str, requirements: &[Requirement]) -> Self {
        Self {
            session: session.to_owned(),
            view: ViewToken::of(true, requirements),
            asked: requirements
                .iter()
                .map(|r| Asked {
                    id: r.id.clone(),
                    kind: r.kind.clone(),
                })
                .collect(),
        }
    }
}

/// Seals and opens [`Paused`] states.
pub(crate) struct Sealer {
    codec: RequestStateCodec,
    ttl: Duration,
}

/// Why a state was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    Expired,
    Invalid(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Expired => f.write_str(
                "requestState has expired; call the tool again without it to see what is pending now",
            ),
            Self::Invalid(why) => write!(
                f,
                "requestState was refused ({why}); it must be echoed unchanged by the caller it was issued to, on the same tool call"
            ),
        }
    }
}

impl Sealer {
    pub(crate) fn new(key: Vec<u8>, ttl: Duration) -> Result<Self, RequestStateError> {
        Ok(Self {
            codec: RequestStateCodec::try_new(key)?,
            ttl,
        })
    }

    /// The state for `paused`, bound to this principal, tool and arguments.
    pub(crate) fn seal(
        &self,
        paused: &Paused,
        principal: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<String, RequestStateError> {
        let bound = binding(principal, tool, args);
        self.codec.seal_json_with(
            paused,
            &SealOptions::new().associated_data(&bound).ttl(self.ttl),
        )
    }

    /// Opens a state the client echoed, or says why it is refused.
    pub(crate) fn open(
        &self,
        sealed: &str,
        principal: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<Paused, Refused> {
        let bound = binding(principal, tool, args);
        self.codec
            .open_json_with(sealed, &bound)
            .map_err(|e| match e {
                RequestStateError::Expired => Refused::Expired,
                other => Refused::Invalid(other.to_string()),
            })
    }
}

/// The associated data: principal, tool and a digest of the arguments (the spec's
/// "identifier for the originating request").
fn binding(principal: &str, tool: &str, args: &Map<String, Value>) -> Vec<u8> {
    let args = serde_json::to_vec(args).unwrap_or_default();
    let digest = Sha256::digest(&args);
    let mut out = Vec::with_capacity(64 + principal.len() + tool.len());
    out.extend_from_slice(b"reins-mcp-server/v1\n");
    out.extend_from_slice(principal.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(b"tools/call:");
    out.extend_from_slice(tool.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&digest);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_state_opens_only_for_its_principal_tool_and_arguments() {
        let s = Sealer::new(vec![7; 32], Duration::from_secs(60)).unwrap();
        let p = Paused {
            session: "mcp/alice/1".into(),
            view: ViewToken::new(true, ["call_1"]),
            asked: vec![Asked {
                id: "call_1".into(),
                kind: RequirementKind::Confirmation,
            }],
        };
        let a = args(json!({ "message": "delete temp.txt" }));
        let sealed = s.seal(&p, "alice", "agent", &a).unwrap();
        assert_eq!(s.open(&sealed, "alice", "agent", &a).unwrap(), p);
        assert!(matches!(
            s.open(&sealed, "bob", "agent", &a),
            Err(Refused::Invalid(_))
        ));
        assert!(s.open(&sealed, "alice", "other", &a).is_err());
        let b = args(json!({ "message": "delete everything" }));
        assert!(s.open(&sealed, "alice", "agent", &b).is_err());
        // One flipped character anywhere is refused.
        let mut bytes = sealed.clone().into_bytes();
        let i = bytes.len() - 3;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(s.open(&tampered, "alice", "agent", &a).is_err());
        // Another key does not open it.
        let other = Sealer::new(vec![8; 32], Duration::from_secs(60)).unwrap();
        assert!(other.open(&sealed, "alice", "agent", &a).is_err());
    }

    #[test]
    fn an_expired_state_is_refused_as_expired() {
        let s = Sealer::new(vec![7; 32], Duration::from_millis(1)).unwrap();
        let p = Paused {
            session: "s".into(),
            view: ViewToken::new(true, ["c"]),
            asked: Vec::new(),
        };
        let a = Map::new();
        let sealed = s.seal(&p, "alice", "agent", &a).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            s.open(&sealed, "alice", "agent", &a),
            Err(Refused::Expired)
        ));
    }

    #[test]
    fn a_short_key_is_refused() {
        assert!(Sealer::new(vec![1; 8], Duration::from_secs(1)).is_err());
    }
}
