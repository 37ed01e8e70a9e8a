//! The crate's errors.

use std::fmt;
use std::path::PathBuf;

/// One problem found in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or the name given to an in-memory source).
    pub file: String,
    /// The line (1-based; 0 when the problem has no place in the text).
    pub line: usize,
    /// The column (1-based; 0 when unknown).
    pub column: usize,
    /// The policy, when the problem is in one.
    pub policy: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)?;
        if let Some(p) = &self.policy {
            write!(f, " (policy `{p}`)")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Why a policy set could not be loaded. The set in use stays as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read policy file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The policies do not parse, or do not validate against the schema; each problem
    /// has its file, line and reason.
    #[error("the policy set was refused: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// What is wrong, in file order.
        problems: Vec<Problem>,
    },
    /// The shadow log's file could not be written or read.
    #[error("shadow log {}: {source}", path.display())]
    ShadowLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    /// The problems of an [`Error::Invalid`] (empty for the others).
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid { problems } => problems,
            _ => &[],
        }
    }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
