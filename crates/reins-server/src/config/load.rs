//! Reading `reins.toml`: the TOML with its spans, the `REINS_...` overrides put in, the
//! typed configuration out, and every error placed at its key and line.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::Config;
use super::secret::{Context, Lookup, override_at, with_context};

/// The prefix of override variables.
pub const ENV_PREFIX: &str = "REINS_";
/// What separates the keys of an override variable's name.
pub const ENV_SEPARATOR: &str = "__";

/// Why a configuration was refused. Every refusal of a value names its key (dotted:
/// `notifications.email.smtp.port`) and where it was written: the file's line and
/// column, or the override variable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value is missing, unknown, of the wrong type, or not usable.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Box<Place>,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The key the error is about (`""` for the whole file).
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { at, .. } => Some(&at.key),
            Self::Io { .. } => None,
        }
    }

    /// The line (1-based) in the file, when the key was written in it.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Invalid { at, .. } => at.line,
            Self::Io { .. } => None,
        }
    }
}

/// Where a key was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The file (`reins.toml` when read from a string).
    pub file: String,
    /// The dotted key (`""`: the whole file).
    pub key: String,
    /// Line and column (1-based), when written in the file.
    pub line: Option<usize>,
    /// The column (1-based).
    pub column: Option<usize>,
    /// The override variable, when the value came from one.
    pub variable: Option<String>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() {
            "(top level)"
        } else {
            &self.key
        };
        match (&self.variable, self.line) {
            (Some(var), _) => write!(f, "{var} (key `{key}`)"),
            (None, Some(line)) => write!(
                f,
                "{}:{line}:{}: key `{key}`",
                self.file,
                self.column.unwrap_or(1)
            ),
            (None, None) => write!(f, "{}: key `{key}`", self.file),
        }
    }
}

/// Where every key of a read configuration was written, for errors found after
/// reading (a policy directory that does not load, a URL that does not parse).
#[derive(Debug, Clone, Default)]
pub(crate) struct Places {
    file: String,
    by_key: BTreeMap<String, Place>,
}

impl Places {
    /// Where `key` was written; its closest parent's place when it was not.
    pub(crate) fn of(&self, key: &str) -> Place {
        let mut k = key;
        loop {
            if let Some(p) = self.by_key.get(k) {
                return Place {
                    key: key.to_owned(),
                    ..p.clone()
                };
            }
            match k.rsplit_once('.') {
                Some((parent, _)) => k = parent,
                None => {
                    return Place {
                        file: self.file.clone(),
                        key: key.to_owned(),
                        ..Place::default()
                    };
                }
            }
        }
    }

    /// An error about `key`.
    pub(crate) fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            at: Box::new(self.of(key)),
            message: message.into(),
        }
    }
}

/// (line, column), both 1-based, of `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.chars().rev().take_while(|c| *c != '\n').count() + 1;
    (line, column)
}

struct Source<'a> {
    file: &'a str,
    text: &'a str,
    overrides: &'a [String],
}

impl Source<'_> {
    fn place(&self, key: String, offset: usize) -> Place {
        if let Some(var) = override_at(self.text.len(), self.overrides, offset) {
            return Place {
                file: self.file.to_owned(),
                key,
                variable: Some(var.to_owned()),
                ..Place::default()
            };
        }
        let (line, column) = line_column(self.text, offset);
        Place {
            file: self.file.to_owned(),
            key,
            line: Some(line),
            column: Some(column),
            variable: None,
        }
    }
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// The dotted key whose key or value span holds `span`, deepest first (a table's
/// span is its header only, so every table is searched); the span found.
fn locate(
    table: &DeTable<'_>,
    span: &Range<usize>,
    path: &mut Vec<String>,
) -> Option<Range<usize>> {
    for (k, v) in table {
        path.push(k.get_ref().to_string());
        if let Some(found) = locate_value(v, span, path) {
            return Some(found);
        }
        let (ks, vs) = (k.span(), v.span());
        if ks == *span || contains(&ks, span) {
            return Some(ks);
        }
        if vs == *span || contains(&vs, span) {
            return Some(vs);
        }
        path.pop();
    }
    None
}

/// The same inside a value: its table's keys, its array's items.
fn locate_value(
    v: &Spanned<DeValue<'_>>,
    span: &Range<usize>,
    path: &mut Vec<String>,
) -> Option<Range<usize>> {
    match v.get_ref() {
        DeValue::Table(t) => locate(t, span, path),
        DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            path.push(format!("[{i}]"));
            let found = locate_value(item, span, path).or_else(|| {
                let s = item.span();
                (s == *span || contains(&s, span)).then_some(s)
            });
            if found.is_none() {
                path.pop();
            }
            found
        }),
        _ => None,
    }
}

/// `a.b[0].c` from its parts.
fn dotted(path: &[String]) -> String {
    path.iter().fold(String::new(), |mut out, p| {
        if !(out.is_empty() || p.starts_with('[')) {
            out.push('.');
        }
        out.push_str(p);
        out
    })
}

/// Every key's place.
fn index(table: &DeTable<'_>, prefix: &str, source: &Source<'_>, out: &mut Places) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.by_key
            .insert(key.clone(), source.place(key.clone(), k.span().start));
        if let DeValue::Table(t) = v.get_ref() {
            index(t, &key, source, out);
        }
    }
}

/// The sections an override variable may name (a `REINS_` variable whose first key
/// is none of these is someone else's and is ignored).
const SECTIONS: [&str; 8] = [
    "server",
    "store",
    "driver",
    "auth",
    "policies",
    "budgets",
    "notifications",
    "telemetry",
];

/// The override variables among `vars`, sorted, with their keys.
fn overrides(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, Vec<String>, String)> {
    let mut out: Vec<_> = vars
        .into_iter()
        .filter_map(|(name, value)| {
            let rest = name.strip_prefix(ENV_PREFIX)?;
            let keys: Vec<String> = rest.split(ENV_SEPARATOR).map(str::to_lowercase).collect();
            (keys.len() >= 2 && SECTIONS.contains(&keys[0].as_str())).then_some((name, keys, value))
        })
        .collect();
    out.sort();
    out
}

/// Reads a configuration: `text` (named `file` in errors; relative paths start at
/// `base`), the overrides among `vars`, and `env` for `{ env = "VAR" }` secrets.
pub(crate) fn read(
    text: &str,
    file: &str,
    base: &Path,
    vars: Vec<(String, String)>,
    env: Lookup,
) -> Result<Config, ConfigError> {
    let overrides = overrides(vars);
    let names: Vec<String> = overrides.iter().map(|(n, _, _)| n.clone()).collect();
    let source = Source {
        file,
        text,
        overrides: &names,
    };
    let invalid = |at: Place, message: String| ConfigError::Invalid {
        at: Box::new(at),
        message,
    };
    let mut doc = DeTable::parse(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        invalid(source.place(String::new(), offset), e.message().to_owned())
    })?;
    // Each override's key and value get a span past the end of the text: its index.
    for (i, (name, keys, value)) in overrides.iter().enumerate() {
        let at = text.len() + 1 + i;
        let span = at..at + 1;
        let mut parsed = match DeValue::parse(value) {
            Ok(v) => Spanned::new(span.clone(), v.into_inner()),
            Err(_) => Spanned::new(span.clone(), DeValue::String(Cow::Borrowed(value.as_str()))),
        };
        parsed.get_mut().make_owned();
        let Some((last, parents)) = keys.split_last() else {
            continue;
        };
        let mut table = doc.get_mut();
        for (depth, k) in parents.iter().enumerate() {
            let entry = table
                .entry(Spanned::new(span.clone(), Cow::Owned(k.clone())))
                .or_insert_with(|| Spanned::new(span.clone(), DeValue::Table(DeTable::new())));
            match entry.get_mut() {
                DeValue::Table(t) => table = t,
                _ => {
                    return Err(invalid(
                        Place {
                            file: file.to_owned(),
                            key: keys[..=depth].join("."),
                            variable: Some(name.clone()),
                            ..Place::default()
                        },
                        "is not a table: this variable cannot set a key inside it".to_owned(),
                    ));
                }
            }
        }
        table.insert(Spanned::new(span, Cow::Owned(last.clone())), parsed);
    }
    let mut places = Places {
        file: file.to_owned(),
        ..Places::default()
    };
    index(doc.get_ref(), "", &source, &mut places);
    let context = Context {
        env,
        base: base.to_owned(),
        text_len: text.len(),
        overrides: names.clone(),
    };
    let table_for_errors = doc.clone();
    let (parsed, _) = with_context(context, || {
        Config::deserialize(toml::de::Deserializer::from(doc))
    });
    let mut config = parsed.map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let mut path = Vec::new();
        let found = locate(table_for_errors.get_ref(), &span, &mut path);
        let offset = found.map_or(span.start, |f| f.start.max(span.start));
        invalid(source.place(dotted(&path), offset), e.message().to_owned())
    })?;
    config.places = places;
    config.base = base.to_owned();
    Ok(config)
}
