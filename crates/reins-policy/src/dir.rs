//! Policies kept in directories: the active set (and a shadow set) read from every
//! `*.cedar` file of a directory, reloaded on demand, with the status a person checks.
//!
//! [`PolicyDir::reload`] reads the directories again — a file added since is read, a
//! file removed is gone — and swaps the new sets in atomically; a set with any problem
//! is refused as a whole, the sets in use stay, and the refusal is kept in the
//! [`ReloadStatus`] (with its time) until a later reload succeeds.
//! [`PolicyDir::reload_if_changed`] reloads only when the directories' contents
//! changed since the last attempt (what a file watcher calls); a program wires either
//! to its triggers (a signal, a timer, an endpoint: reins-server does all three).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::live::CedarPolicy;
use crate::load::PolicySet;
use crate::shadow::ShadowLog;

/// A refused reload: when, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadError {
    /// When the reload was tried.
    pub at: DateTime<Utc>,
    /// What triggered it (`signal`, `file change`, `endpoint`, ...).
    pub trigger: String,
    /// Why it was refused (each problem with its file, line and reason).
    pub message: String,
}

/// One set as loaded: where from, its digest and its policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedSet {
    /// The directory.
    pub directory: PathBuf,
    /// SHA-256 (hex) over the names and contents of its `*.cedar` files, in name order:
    /// what the file watcher compares (a renamed file is a change).
    pub sha256: String,
    /// The set's hash as the audit trail and the evidence receipts carry it
    /// (`policy_hash`, [`PolicySet::hash`]): over what the policies say, not where
    /// their files lie, so an operator can tell which loaded set decided a call.
    pub hash: String,
    /// The ids of its policies.
    pub policies: Vec<String>,
    /// Its files.
    pub files: Vec<PathBuf>,
}

/// The state of a [`PolicyDir`]: the sets in use, when they were loaded, and the last
/// refused reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadStatus {
    /// The active set.
    pub active: LoadedSet,
    /// The shadow set, when one is configured.
    pub shadow: Option<LoadedSet>,
    /// When the sets in use were loaded.
    pub loaded_at: DateTime<Utc>,
    /// How many reloads succeeded since the first load.
    pub reloads: u64,
    /// The last refused reload, when it came after the last successful load (`None`
    /// once a later reload succeeds).
    pub last_error: Option<ReloadError>,
}

impl ReloadStatus {
    /// `ok`, or `error` when the last reload was refused (the older sets still answer).
    pub fn state(&self) -> &'static str {
        if self.last_error.is_some() {
            "error"
        } else {
            "ok"
        }
    }
}

struct Inner {
    status: ReloadStatus,
    /// The digests of the last attempt (successful or not), so that a watcher does not
    /// retry a refused content over and over.
    attempted: (String, Option<String>),
}

/// Cedar policies read from a directory, with an optional shadow directory:
/// [`reload`](PolicyDir::reload) reads both again (a file added since is read, a file
/// removed is gone) and swaps the new sets in atomically; a set with any problem is
/// refused whole, the sets in use stay, and the refusal is kept in the
/// [`ReloadStatus`] until a later reload succeeds.
/// [`reload_if_changed`](PolicyDir::reload_if_changed) reloads only when the
/// directories' contents changed since the last attempt (what a file watcher calls).
pub struct PolicyDir {
    policy: CedarPolicy,
    active: PathBuf,
    shadow: Option<PathBuf>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PolicyDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyDir")
            .field("active", &self.active)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

/// The `*.cedar` files of `dir` (not its subdirectories), in name order.
fn cedar_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |source| Error::Io {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "cedar") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The digest of a directory's policy files: names and contents, in name order.
fn digest(dir: &Path) -> Result<String> {
    let mut hash = Sha256::new();
    for path in cedar_files(dir)? {
        let text = std::fs::read(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        hash.update(name.unwrap_or_default().as_bytes());
        hash.update([0]);
        hash.update((text.len() as u64).to_be_bytes());
        hash.update(&text);
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn read(dir: &Path) -> Result<(PolicySet, LoadedSet)> {
    let sha256 = digest(dir)?;
    let set = PolicySet::from_files(cedar_files(dir)?)?;
    let loaded = LoadedSet {
        directory: dir.to_owned(),
        sha256,
        hash: set.hash().to_owned(),
        policies: set.ids().map(str::to_owned).collect(),
        files: set.files().to_vec(),
    };
    Ok((set, loaded))
}

impl PolicyDir {
    /// Reads `active` (and `shadow`) and builds the policy, recording shadow
    /// differences in `log`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when a directory or file cannot be read, [`Error::Invalid`] when a
    /// policy does not parse or validate.
    pub fn open(
        active: impl Into<PathBuf>,
        shadow: Option<PathBuf>,
        log: ShadowLog,
    ) -> Result<Self> {
        let active = active.into();
        let (set, active_loaded) = read(&active)?;
        let shadow_read = shadow.as_deref().map(read).transpose()?;
        let policy = CedarPolicy::with_log(set, log);
        let (shadow_set, shadow_loaded) = match shadow_read {
            Some((s, l)) => (Some(s), Some(l)),
            None => (None, None),
        };
        policy.set_shadow(shadow_set);
        let attempted = (
            active_loaded.sha256.clone(),
            shadow_loaded.as_ref().map(|l| l.sha256.clone()),
        );
        Ok(Self {
            policy,
            active,
            shadow,
            inner: Mutex::new(Inner {
                status: ReloadStatus {
                    active: active_loaded,
                    shadow: shadow_loaded,
                    loaded_at: Utc::now(),
                    reloads: 0,
                    last_error: None,
                },
                attempted,
            }),
        })
    }

    /// The policy (clones share its sets: give one to the agent's builder).
    pub fn policy(&self) -> &CedarPolicy {
        &self.policy
    }

    /// The status: the sets in use, when loaded, the last refused reload.
    pub fn status(&self) -> ReloadStatus {
        self.lock().status.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn digests(&self) -> Result<(String, Option<String>)> {
        Ok((
            digest(&self.active)?,
            self.shadow.as_deref().map(digest).transpose()?,
        ))
    }

    /// Reads both directories again and swaps the sets in. `trigger` says what asked
    /// (kept with a refusal). On any problem the sets in use stay and the refusal is
    /// recorded in the [status](PolicyDir::status).
    ///
    /// # Errors
    ///
    /// As [`PolicyDir::open`].
    pub fn reload(&self, trigger: &str) -> Result<ReloadStatus> {
        let attempted = self.digests().unwrap_or_default();
        self.apply(trigger, attempted)
    }

    /// Reloads when the directories' contents differ from the last attempt's;
    /// `Ok(None)` when nothing changed.
    ///
    /// # Errors
    ///
    /// As [`PolicyDir::reload`] (a refused content is reported once, not on every call).
    pub fn reload_if_changed(&self, trigger: &str) -> Result<Option<ReloadStatus>> {
        let now = match self.digests() {
            Ok(d) => d,
            // An unreadable directory is a refusal too (reported once per change of
            // state, as for contents).
            Err(e) => {
                let mut inner = self.lock();
                if inner.attempted.0.is_empty() {
                    return Ok(None);
                }
                inner.attempted = Default::default();
                drop(inner);
                return Err(self.refuse(trigger, e));
            }
        };
        if self.lock().attempted == now {
            return Ok(None);
        }
        self.apply(trigger, now).map(Some)
    }

    fn refuse(&self, trigger: &str, e: Error) -> Error {
        tracing::warn!(error = %e, trigger, "policy reload refused; the sets in use stay");
        self.lock().status.last_error = Some(ReloadError {
            at: Utc::now(),
            trigger: trigger.to_owned(),
            message: e.to_string(),
        });
        e
    }

    fn apply(&self, trigger: &str, attempted: (String, Option<String>)) -> Result<ReloadStatus> {
        self.lock().attempted = attempted;
        let read_all = || -> Result<_> {
            let active = read(&self.active)?;
            let shadow = self.shadow.as_deref().map(read).transpose()?;
            Ok((active, shadow))
        };
        let ((set, active), shadow) = match read_all() {
            Ok(r) => r,
            Err(e) => return Err(self.refuse(trigger, e)),
        };
        let (shadow_set, shadow_loaded) = match shadow {
            Some((s, l)) => (Some(s), Some(l)),
            None => (None, None),
        };
        // The active set first, then the shadow: a decision in between compares the
        // new active set with the old shadow, which is a pair that was in use.
        self.policy.replace(set);
        self.policy.set_shadow(shadow_set);
        let mut inner = self.lock();
        inner.status.active = active;
        inner.status.shadow = shadow_loaded;
        inner.status.loaded_at = Utc::now();
        inner.status.reloads += 1;
        inner.status.last_error = None;
        tracing::info!(
            trigger,
            policies = inner.status.active.policies.len(),
            "policies reloaded"
        );
        Ok(inner.status.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ALLOW: &str = r#"@id("tmp")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file");"#;

    #[test]
    fn a_new_file_is_read_and_a_bad_one_keeps_the_old_sets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.cedar"), ALLOW).unwrap();
        let p = PolicyDir::open(dir.path(), None, ShadowLog::default()).unwrap();
        assert_eq!(p.status().active.policies, ["tmp"]);
        assert!(p.reload_if_changed("test").unwrap().is_none());
        std::fs::write(
            dir.path().join("b.cedar"),
            ALLOW.replace("\"tmp\"", "\"tmp2\""),
        )
        .unwrap();
        let s = p.reload_if_changed("test").unwrap().unwrap();
        assert_eq!(s.active.policies, ["tmp", "tmp2"]);
        std::fs::write(dir.path().join("c.cedar"), "permit (").unwrap();
        assert!(p.reload_if_changed("test").is_err());
        let s = p.status();
        assert_eq!(s.state(), "error");
        assert!(s.last_error.unwrap().message.contains("c.cedar"));
        assert_eq!(p.policy().active().len(), 2);
        // The same refused content is not tried again.
        assert!(p.reload_if_changed("test").unwrap().is_none());
        std::fs::remove_file(dir.path().join("c.cedar")).unwrap();
        let s = p.reload_if_changed("test").unwrap().unwrap();
        assert_eq!((s.state(), s.reloads), ("ok", 2));
    }
}
