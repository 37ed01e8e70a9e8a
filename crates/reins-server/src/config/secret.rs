//! Secrets in the configuration: read from an environment variable (`{ env = "VAR" }`),
//! a file (`{ file = "path" }`), or the key's own `REINS_...` variable; never written in
//! the file, never shown.

use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret's value and where it came from; its `Debug`, `Display` and serialized form
/// say where from, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    from: SecretSource,
}

/// Where a [`Secret`] was read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretSource {
    /// `{ env = "VAR" }`.
    Env(String),
    /// `{ file = "path" }` (relative paths are read from the configuration file's
    /// directory).
    File(PathBuf),
    /// The key's own override variable (`REINS_...`).
    Override(String),
    /// Given in code ([`Secret::new`]).
    Code,
}

impl Secret {
    /// A secret given in code.
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            from: SecretSource::Code,
        }
    }

    /// The value. Keep it out of logs and errors.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where it came from.
    pub fn source(&self) -> &SecretSource {
        &self.from
    }

    /// What `--check` prints in its place.
    pub fn redacted(&self) -> String {
        match &self.from {
            SecretSource::Env(v) => format!("<redacted: env {v}>"),
            SecretSource::File(p) => format!("<redacted: file {}>", p.display()),
            SecretSource::Override(v) => format!("<redacted: {v}>"),
            SecretSource::Code => "<redacted>".to_owned(),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

/// Reads an environment variable (the process's, or the variables a caller gave).
pub(crate) type Lookup = Box<dyn Fn(&str) -> Option<String>>;

/// What reading a configuration needs while serde runs: the environment, the
/// directory relative paths start from, and which spans are overrides.
pub(crate) struct Context {
    pub(crate) env: Lookup,
    pub(crate) base: PathBuf,
    /// Spans at or past this offset are values of override variables.
    pub(crate) text_len: usize,
    /// The override variables, by their span's offset from `text_len + 1`.
    pub(crate) overrides: Vec<String>,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Runs `f` with `context` set for the secrets it deserializes; returns the context.
pub(crate) fn with_context<T>(context: Context, f: impl FnOnce() -> T) -> (T, Context) {
    CONTEXT.with(|c| *c.borrow_mut() = Some(context));
    let out = f();
    let context = CONTEXT.with(|c| c.borrow_mut().take());
    // Always set above; the fallback keeps this total.
    let context = context.unwrap_or_else(|| Context {
        env: Box::new(|_| None),
        base: PathBuf::new(),
        text_len: 0,
        overrides: Vec::new(),
    });
    (out, context)
}

/// The override variable whose value sits at `offset`, if it is one.
pub(crate) fn override_at(text_len: usize, overrides: &[String], offset: usize) -> Option<&str> {
    offset
        .checked_sub(text_len + 1)
        .and_then(|i| overrides.get(i))
        .map(String::as_str)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reference {
    #[serde(default)]
    env: Option<String>,
    #[serde(default)]
    file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Plain(String),
    Number(i64),
    Reference(Reference),
}

fn read_file(base: &Path, path: &Path) -> Result<String, String> {
    let full = if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    };
    let text = std::fs::read_to_string(&full)
        .map_err(|e| format!("cannot read the secret file {}: {e}", full.display()))?;
    // A trailing newline is the editor's, not the secret's.
    let value = text.trim_end_matches(['\n', '\r']).to_owned();
    if value.is_empty() {
        return Err(format!("the secret file {} is empty", full.display()));
    }
    Ok(value)
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let written = toml::Spanned::<Written>::deserialize(d)?;
        let offset = written.span().start;
        CONTEXT.with(|c| {
            let c = c.borrow();
            let Some(c) = c.as_ref() else {
                return Err(D::Error::custom(
                    "a secret can only be read from a configuration file",
                ));
            };
            let variable = override_at(c.text_len, &c.overrides, offset);
            match (written.into_inner(), variable) {
                (Written::Plain(value), Some(var)) => Ok(Self {
                    value,
                    from: SecretSource::Override(var.to_owned()),
                }),
                (Written::Number(n), Some(var)) => Ok(Self {
                    value: n.to_string(),
                    from: SecretSource::Override(var.to_owned()),
                }),
                (Written::Plain(_) | Written::Number(_), None) => Err(D::Error::custom(
                    "a secret is not written in the file: use { env = \"VAR\" }, \
                     { file = \"path\" } or the key's REINS_... variable",
                )),
                (Written::Reference(r), _) => match (r.env, r.file) {
                    (Some(var), None) => match (c.env)(&var) {
                        Some(value) if !value.is_empty() => Ok(Self {
                            value,
                            from: SecretSource::Env(var),
                        }),
                        _ => Err(D::Error::custom(format!(
                            "the environment variable {var} is not set"
                        ))),
                    },
                    (None, Some(path)) => read_file(&c.base, &path)
                        .map(|value| Self {
                            value,
                            from: SecretSource::File(path),
                        })
                        .map_err(D::Error::custom),
                    _ => Err(D::Error::custom(
                        "a secret is { env = \"VAR\" } or { file = \"path\" }, one of them",
                    )),
                },
            }
        })
    }
}
