//! Shadow mode's record: where the shadow set would have answered differently.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::eval::{Answer, Question};

/// How many characters of a call's arguments a [`ShadowDifference`] keeps.
pub const ARGUMENTS_SUMMARY_CHARS: usize = 200;

/// `value` as compact JSON, cut at [`ARGUMENTS_SUMMARY_CHARS`] characters.
pub(crate) fn summary(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= ARGUMENTS_SUMMARY_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(ARGUMENTS_SUMMARY_CHARS).collect();
    cut.push('…');
    cut
}

/// One question the active and the shadow set answered differently. Only the active
/// answer was acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowDifference {
    /// When.
    pub at: DateTime<Utc>,
    /// Which question.
    pub question: Question,
    /// The session ("" for a grant not scoped to one).
    pub session: String,
    /// The tool.
    pub tool: String,
    /// The call (tool use / requirement id); "" for a grant.
    pub call: String,
    /// The call's arguments as compact JSON, cut at [`ARGUMENTS_SUMMARY_CHARS`]
    /// characters (with `…`); a grant's argument conditions. Empty in records written
    /// before it was kept.
    #[serde(default)]
    pub arguments: String,
    /// Who: the session's principal (`call`), the decider (`decide`), the grant's
    /// author (`grant`); "" when unnamed.
    pub principal: String,
    /// What the active set answered (and what happened).
    pub active: Answer,
    /// What the shadow set would have answered.
    pub shadow: Answer,
}

/// Where shadow differences are kept: the most recent ones in memory and, when the log
/// has a file, every one appended to it as a JSON line (read back by
/// [`ShadowLog::open`], so they survive a restart).
#[derive(Debug)]
pub struct ShadowLog {
    recent: Mutex<VecDeque<ShadowDifference>>,
    capacity: usize,
    file: Option<PathBuf>,
}

impl Default for ShadowLog {
    fn default() -> Self {
        Self::in_memory(1000)
    }
}

impl ShadowLog {
    /// A log that keeps the last `capacity` differences in memory only.
    pub fn in_memory(capacity: usize) -> Self {
        Self {
            recent: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            file: None,
        }
    }

    /// A log kept in the JSON-lines file at `path` (created when missing), with its last
    /// 1000 differences loaded. A line that does not parse is skipped (logged).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let mut log = Self::in_memory(1000);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut recent = VecDeque::new();
                for (n, line) in text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                {
                    match serde_json::from_str::<ShadowDifference>(line) {
                        Ok(d) => {
                            recent.push_back(d);
                            if recent.len() > log.capacity {
                                recent.pop_front();
                            }
                        }
                        Err(e) => {
                            tracing::warn!(file = %path.display(), line = n + 1, error = %e, "skipping an unreadable shadow difference")
                        }
                    }
                }
                log.recent = Mutex::new(recent);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::ShadowLog { path, source }),
        }
        log.file = Some(path);
        Ok(log)
    }

    /// Records a difference (a failed file write is logged; the memory keeps it).
    pub fn record(&self, d: ShadowDifference) {
        if let Some(path) = &self.file {
            if let Err(e) = append(path, &d) {
                tracing::warn!(file = %path.display(), error = %e, "could not store a shadow difference");
            }
        }
        tracing::info!(question = ?d.question, tool = %d.tool, session = %d.session, active = ?d.active.verdict, shadow = ?d.shadow.verdict, "shadow policies differ");
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.push_back(d);
        while recent.len() > self.capacity {
            recent.pop_front();
        }
    }

    /// The recorded differences, oldest first.
    pub fn differences(&self) -> Vec<ShadowDifference> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The file, when it has one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

fn append(path: &Path, d: &ShadowDifference) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(d).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_keeps_short_arguments_and_cuts_long_ones() {
        let short = serde_json::json!({"path": "/tmp/a"});
        assert_eq!(summary(&short), r#"{"path":"/tmp/a"}"#);
        let long = serde_json::json!({"text": "ü".repeat(500)});
        let cut = summary(&long);
        assert_eq!(cut.chars().count(), ARGUMENTS_SUMMARY_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
