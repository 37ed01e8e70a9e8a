//! Whose signature a [`ContentBlock::Thinking`](crate::ContentBlock::Thinking) block
//! carries.
//!
//! Providers hand back opaque tokens that must return, unchanged, with the turn they
//! came from: Anthropic signs its thinking blocks, OpenAI's Responses API returns
//! encrypted reasoning items, Gemini puts thought signatures on its parts, Bedrock
//! signs reasoning content. reins keeps each in the `signature` of a thinking block.
//! A token only means something to the provider that minted it: sent to another one,
//! it is refused with HTTP 400. So every provider but the Anthropic Messages API
//! (whose signatures predate this scheme and are stored plain) prefixes its tokens
//! with its name and a colon — `gemini:…`, `openai-responses:…` — and each provider
//! sends back only the tokens it minted, dropping (and logging) the others.
//!
//! Plain signatures are base64 and never contain a colon, so the two forms cannot be
//! confused.
//!
//! ```
//! use reins_message::signature::{provider_of, seal, unseal};
//!
//! let sig = seal("gemini", "CiQB0e2Kb...");
//! assert_eq!(sig, "gemini:CiQB0e2Kb...");
//! assert_eq!(provider_of(&sig), Some("gemini"));
//! assert_eq!(unseal(&sig, "gemini"), Some("CiQB0e2Kb..."));
//! assert_eq!(unseal(&sig, "bedrock"), None);
//! // An Anthropic Messages API signature is plain.
//! assert_eq!(provider_of("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pk"), None);
//! ```

/// `payload` as the signature of a thinking block minted by `provider` (a short
/// lowercase name: ASCII letters, digits and `-`).
pub fn seal(provider: &str, payload: &str) -> String {
    let mut out = String::with_capacity(provider.len() + 1 + payload.len());
    out.push_str(provider);
    out.push(':');
    out.push_str(payload);
    out
}

/// The provider that minted `signature`, or `None` for a plain signature (the
/// Anthropic Messages API's).
pub fn provider_of(signature: &str) -> Option<&str> {
    let (name, _) = signature.split_once(':')?;
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid.then_some(name)
}

/// The token inside `signature` when `provider` minted it; `None` otherwise.
pub fn unseal<'a>(signature: &'a str, provider: &str) -> Option<&'a str> {
    match provider_of(signature) {
        Some(name) if name == provider => Some(&signature[name.len() + 1..]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_tokens_round_trip_and_plain_ones_have_no_provider() {
        let s = seal("openai-responses", "{\"id\":\"rs_1\"}");
        assert_eq!(provider_of(&s), Some("openai-responses"));
        assert_eq!(unseal(&s, "openai-responses"), Some("{\"id\":\"rs_1\"}"));
        assert_eq!(unseal(&s, "gemini"), None);
        assert_eq!(provider_of("abc+/=="), None);
        assert_eq!(provider_of(":x"), None);
        assert_eq!(provider_of("Not A Name:x"), None);
        assert_eq!(unseal("plain", "gemini"), None);
    }
}
