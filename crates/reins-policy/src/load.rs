//! Loading a policy set from files: parse, name (`@id`), validate against the schema.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use cedar_policy::{PolicyId, Schema, ValidationMode, Validator};
use miette::Diagnostic;

use crate::error::{Error, Problem, Result};

/// What the annotations of one policy say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    /// `@ask`: a `forbid` that asks a person instead of rejecting.
    pub(crate) ask: bool,
    /// `@reason("...")`: the note the model reads when the policy rejects a call.
    pub(crate) reason: Option<String>,
}

/// A validated set of Cedar policies, read from files (see the [crate docs](crate)).
/// Cheap to share: [`CedarPolicy`](crate::CedarPolicy) holds it in an `Arc`.
#[derive(Debug, Clone)]
pub struct PolicySet {
    pub(crate) set: cedar_policy::PolicySet,
    pub(crate) meta: HashMap<PolicyId, Meta>,
    ids: Vec<String>,
    files: Vec<PathBuf>,
    hash: String,
}

/// [`PolicySet::hash`] of a set with no source: `H([])`.
const EMPTY_HASH: &str = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945";

/// The schema, parsed once.
pub(crate) fn schema() -> Result<&'static Schema> {
    static SCHEMA: OnceLock<std::result::Result<Schema, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Schema::from_cedarschema_str(crate::SCHEMA)
                .map(|(s, _)| s)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Invalid {
            problems: vec![Problem {
                file: "reins.cedarschema".to_owned(),
                line: 0,
                column: 0,
                policy: None,
                reason: e.clone(),
            }],
        })
}

/// Where `offset` is in `text`: (line, column), both 1-based.
fn place(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// A problem from a Cedar diagnostic: its first label places it in `text`.
fn problem(file: &str, text: &str, policy: Option<String>, d: &dyn Diagnostic) -> Problem {
    let (line, column) = d
        .labels()
        .and_then(|mut l| l.next())
        .map_or((0, 0), |l| place(text, l.offset()));
    let mut reason = d.to_string();
    if let Some(help) = d.help() {
        reason = format!("{reason} ({help})");
    }
    Problem {
        file: file.to_owned(),
        line,
        column,
        policy,
        reason,
    }
}

impl PolicySet {
    /// An empty set: every call is asked, nobody is eligible to decide.
    pub fn empty() -> Self {
        Self {
            set: cedar_policy::PolicySet::new(),
            meta: HashMap::new(),
            ids: Vec::new(),
            files: Vec::new(),
            hash: EMPTY_HASH.to_owned(),
        }
    }

    /// The policies in one text, named `name` in problems and default ids.
    pub fn from_source(name: &str, text: &str) -> Result<Self> {
        Self::from_sources([(name.to_owned(), text.to_owned())])
    }

    /// Every `*.cedar` file in `dir` (not its subdirectories), in name order.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
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
        Self::from_files(files)
    }

    /// These files, in this order.
    pub fn from_files<P: AsRef<Path>>(files: impl IntoIterator<Item = P>) -> Result<Self> {
        let mut sources = Vec::new();
        let mut paths = Vec::new();
        for f in files {
            let path = f.as_ref().to_owned();
            let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            sources.push((path.display().to_string(), text));
            paths.push(path);
        }
        let mut set = Self::from_sources(sources)?;
        set.files = paths;
        Ok(set)
    }

    /// Policies from (name, text) pairs: parsed, given their ids (`@id("...")`, or
    /// `<name>#<n>` for the n-th policy of a text without one), and validated against
    /// the schema in strict mode. Any problem refuses the whole set.
    pub fn from_sources(sources: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let schema = schema()?;
        let mut problems = Vec::new();
        let mut set = cedar_policy::PolicySet::new();
        let mut meta = HashMap::new();
        let mut ids = Vec::new();
        // Where each policy came from, to place validation problems.
        let mut origin: HashMap<PolicyId, (Arc<str>, Arc<str>)> = HashMap::new();
        // The texts, for the set's hash.
        let mut texts = Vec::new();
        for (name, text) in sources {
            texts.push(text.clone());
            let parsed = match cedar_policy::PolicySet::from_str(&text) {
                Ok(p) => p,
                Err(errs) => {
                    problems.extend(errs.iter().map(|e| problem(&name, &text, None, e)));
                    continue;
                }
            };
            if parsed.templates().next().is_some() {
                problems.push(Problem {
                    file: name.clone(),
                    line: 0,
                    column: 0,
                    policy: None,
                    reason: "templates are not supported: write static policies".to_owned(),
                });
            }
            let (name_arc, text_arc): (Arc<str>, Arc<str>) =
                (name.as_str().into(), text.as_str().into());
            let mut policies: Vec<_> = parsed.policies().collect();
            // Source order (the parser's ids are policy0, policy1, ...).
            policies.sort_by_key(|p| {
                p.id()
                    .to_string()
                    .trim_start_matches("policy")
                    .parse::<usize>()
                    .unwrap_or(usize::MAX)
            });
            for (n, p) in policies.into_iter().enumerate() {
                let id = p
                    .annotation("id")
                    .map_or_else(|| format!("{name}#{}", n + 1), str::to_owned);
                let pid = PolicyId::new(&id);
                // The policy's place: where its `@id` is written (the API has no span).
                let at = text
                    .find(&format!("\"{id}\""))
                    .map_or((0, 0), |o| place(&text, o));
                if origin.contains_key(&pid) {
                    problems.push(Problem {
                        file: name.clone(),
                        line: at.0,
                        column: at.1,
                        policy: Some(id.clone()),
                        reason: format!("the policy id `{id}` is used twice"),
                    });
                    continue;
                }
                let m = Meta {
                    ask: p.annotation("ask").is_some(),
                    reason: p.annotation("reason").map(str::to_owned),
                };
                if m.ask && p.effect() != cedar_policy::Effect::Forbid {
                    problems.push(Problem {
                        file: name.clone(),
                        line: at.0,
                        column: at.1,
                        policy: Some(id.clone()),
                        reason: "`@ask` belongs on a `forbid` policy (it asks a person instead of rejecting)".to_owned(),
                    });
                }
                if let Err(e) = set.add(p.new_id(pid.clone())) {
                    problems.push(Problem {
                        file: name.clone(),
                        line: at.0,
                        column: at.1,
                        policy: Some(id.clone()),
                        reason: e.to_string(),
                    });
                    continue;
                }
                origin.insert(pid.clone(), (Arc::clone(&name_arc), Arc::clone(&text_arc)));
                meta.insert(pid, m);
                ids.push(id);
            }
        }
        let validated = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
        for e in validated.validation_errors() {
            let id = e.policy_id();
            let (file, text) = origin.get(id).map_or(("?", ""), |(f, t)| (&**f, &**t));
            problems.push(problem(file, text, Some(id.to_string()), e));
        }
        if !problems.is_empty() {
            problems.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
            return Err(Error::Invalid { problems });
        }
        texts.sort();
        let hash =
            reins_evidence::digest(&texts, "a policy set's texts").map_err(|e| Error::Invalid {
                problems: vec![Problem {
                    file: String::new(),
                    line: 0,
                    column: 0,
                    policy: None,
                    reason: e.to_string(),
                }],
            })?;
        Ok(Self {
            set,
            meta,
            ids,
            files: Vec::new(),
            hash,
        })
    }

    /// The policy ids, in load order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// How many policies.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it has no policy.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The files it was read from ([`PolicySet::from_files`], [`PolicySet::from_dir`]).
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The set's hash: SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of the
    /// array of its source texts (each file's text as read), sorted by code point — so
    /// it names what the policies say, not where the files lie nor the order they were
    /// read in. Recorded with each decision the set makes (`policy_hash` in the audit
    /// trail) and signed into its receipt; anyone holding the `.cedar` files recomputes
    /// it (docs/evidence.md).
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_offsets() {
        assert_eq!(place("ab\ncd", 0), (1, 1));
        assert_eq!(place("ab\ncd", 4), (2, 2));
        assert_eq!(place("ab", 99), (1, 3));
    }

    #[test]
    fn the_hash_names_the_texts_not_their_names_nor_order() {
        let a = "permit (principal, action == Reins::Action::\"call\", resource);";
        let b = "forbid (principal, action == Reins::Action::\"grant\", resource);";
        let one =
            PolicySet::from_sources([("x.cedar".into(), a.into()), ("y.cedar".into(), b.into())])
                .unwrap();
        let two =
            PolicySet::from_sources([("b.cedar".into(), b.into()), ("a.cedar".into(), a.into())])
                .unwrap();
        assert_eq!(one.hash(), two.hash());
        assert_eq!(
            one.hash(),
            reins_evidence::digest(&[b, a], "texts").unwrap(),
            "H of the sorted texts (`forbid` before `permit`)"
        );
        let changed = PolicySet::from_source("x.cedar", &a.replace("call", "decide")).unwrap();
        assert_ne!(
            changed.hash(),
            PolicySet::from_source("x.cedar", a).unwrap().hash()
        );
        assert_eq!(
            PolicySet::empty().hash(),
            reins_evidence::digest(&Vec::<String>::new(), "none").unwrap()
        );
        assert_eq!(
            PolicySet::from_sources([]).unwrap().hash(),
            PolicySet::empty().hash()
        );
    }

    #[test]
    fn the_schema_parses() {
        assert!(schema().is_ok(), "{:?}", schema().err());
    }
}
