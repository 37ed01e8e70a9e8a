//! The export bundle: JSON lines — a header, the keys, the chain's entries.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chain::ChainEntry;
use crate::error::{Error, Result};
use crate::receipt::Keyring;

/// The `format` a bundle's header names.
pub const FORMAT: &str = "reins-evidence/1";

/// One line of a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Line {
    /// The first line.
    Header { format: String, session: String },
    /// A verifying key, as a JWKS member.
    Key { jwk: Value },
    /// A chain entry.
    Entry { entry: Value },
}

/// A session's evidence, self-contained: its chain (receipts included, as entries of
/// kind `receipt`) and the public keys that signed the receipts.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The session.
    pub session: String,
    /// Its chain, oldest first.
    pub entries: Vec<ChainEntry>,
    /// The verifying keys (revoked ones marked).
    pub keys: Keyring,
}

impl Bundle {
    /// A bundle of `session`'s chain and keys.
    pub fn new(session: impl Into<String>, entries: Vec<ChainEntry>, keys: Keyring) -> Self {
        Self {
            session: session.into(),
            entries,
            keys,
        }
    }

    /// The bundle as JSON lines (each ending in `\n`): the header, one `key` line per
    /// key, one `entry` line per entry in chain order.
    pub fn to_jsonl(&self) -> Result<String> {
        let mut out = String::new();
        let mut push = |line: &Line| -> Result<()> {
            let text = serde_json::to_string(line).map_err(|source| Error::Encode {
                what: "a bundle line",
                source,
            })?;
            out.push_str(&text);
            out.push('\n');
            Ok(())
        };
        push(&Line::Header {
            format: FORMAT.to_owned(),
            session: self.session.clone(),
        })?;
        if let Some(keys) = self.keys.jwks()["keys"].as_array() {
            for jwk in keys {
                push(&Line::Key { jwk: jwk.clone() })?;
            }
        }
        for e in &self.entries {
            let entry = serde_json::to_value(e).map_err(|source| Error::Encode {
                what: "a chain entry",
                source,
            })?;
            push(&Line::Entry { entry })?;
        }
        Ok(out)
    }
}
