//! The crate's error type.

use serde::de::DeserializeOwned;

/// What went wrong reading or writing messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The JSON did not describe a valid value; `path` names the field
    /// (e.g. `content[0].type`, or `.` for the top level).
    #[error("invalid message JSON at `{path}`: {message}")]
    InvalidJson {
        /// The path of the offending field.
        path: String,
        /// What was wrong, from the parser.
        message: String,
    },
    /// A value could not be serialized.
    #[error("could not encode message as JSON: {0}")]
    Encode(String),
}

/// The crate's result type.
pub type Result<T, E = MessageError> = std::result::Result<T, E>;

/// Parses any message type from JSON, naming the path of the failing field.
pub fn from_json_str<T: DeserializeOwned>(json: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| MessageError::InvalidJson {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Converts any message type from a JSON value, naming the path of the failing field.
pub fn from_json_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| MessageError::InvalidJson {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}
