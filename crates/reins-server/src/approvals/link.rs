//! Signed approval links: what an email carries so that its recipient can decide on
//! one requirement without signing in.
//!
//! A link token is `<claims>.<signature>`, both base64url without padding: the claims
//! are JSON naming the session, the requirement, the fingerprint of the arguments the
//! email showed, the approver it was sent to, when it expires and a random nonce; the
//! signature is HMAC-SHA256 of the encoded claims under the server's link secret. A
//! token whose signature does not verify is refused before anything is read; one that
//! verifies is still refused when it expired, when the requirement is no longer
//! pending or shows other arguments, when its approver may no longer decide, or when
//! it was used (an applied decision recorded with its nonce, see
//! [`super::email`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, TimeZone, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What a link token binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LinkClaims {
    /// The session.
    #[serde(rename = "s")]
    pub(crate) session: String,
    /// The requirement.
    #[serde(rename = "r")]
    pub(crate) requirement: String,
    /// The fingerprint of the arguments the email showed.
    #[serde(rename = "f")]
    pub(crate) fingerprint: String,
    /// The approver the link was sent to (a principal's name).
    #[serde(rename = "p")]
    pub(crate) principal: String,
    /// When the link stops working (seconds since the epoch).
    #[serde(rename = "x")]
    pub(crate) expires: i64,
    /// A random id of this link, recorded with the decision it makes (single use).
    #[serde(rename = "n")]
    pub(crate) nonce: String,
}

impl LinkClaims {
    /// When the link stops working.
    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        Utc.timestamp_opt(self.expires, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}

/// Why a token is not a link this server signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tampered;

/// The secret links are signed with.
#[derive(Clone)]
pub(crate) struct LinkKey(Vec<u8>);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

impl LinkKey {
    pub(crate) fn new(secret: &[u8]) -> Self {
        Self(secret.to_vec())
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable_key(),
        }
    }

    /// The token of `claims`.
    pub(crate) fn sign(&self, claims: &LinkClaims) -> String {
        let json = serde_json::to_vec(claims).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(json);
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{body}.{sig}")
    }

    /// The claims of a token this key signed (compared in constant time).
    pub(crate) fn verify(&self, token: &str) -> Result<LinkClaims, Tampered> {
        let (body, sig) = token.split_once('.').ok_or(Tampered)?;
        let sig = URL_SAFE_NO_PAD.decode(sig).map_err(|_| Tampered)?;
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        mac.verify_slice(&sig).map_err(|_| Tampered)?;
        let json = URL_SAFE_NO_PAD.decode(body).map_err(|_| Tampered)?;
        serde_json::from_slice(&json).map_err(|_| Tampered)
    }
}

/// `Hmac::new_from_slice` never fails for HMAC (any key length is valid); this keeps
/// the signature total without a panic path the compiler can see.
fn unreachable_key() -> HmacSha256 {
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

/// A new random nonce (122 random bits).
pub(crate) fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn claims() -> LinkClaims {
        LinkClaims {
            session: "alice/s".to_owned(),
            requirement: "call_1".to_owned(),
            fingerprint: "abc".to_owned(),
            principal: "ana".to_owned(),
            expires: 1_900_000_000,
            nonce: nonce(),
        }
    }

    #[test]
    fn a_signed_token_verifies_and_any_change_is_tampering() {
        let key = LinkKey::new(b"secret");
        let t = key.sign(&claims());
        assert_eq!(key.verify(&t).unwrap().principal, "ana");
        // Another key, a changed claim, a changed signature, garbage.
        assert_eq!(LinkKey::new(b"other").verify(&t), Err(Tampered));
        let (body, sig) = t.split_once('.').unwrap();
        let mut c = claims();
        c.principal = "rita".to_owned();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&c).unwrap());
        assert_eq!(key.verify(&format!("{forged_body}.{sig}")), Err(Tampered));
        let mut bad = sig.to_owned();
        bad.replace_range(0..1, if sig.starts_with('A') { "B" } else { "A" });
        assert_eq!(key.verify(&format!("{body}.{bad}")), Err(Tampered));
        assert_eq!(key.verify("nope"), Err(Tampered));
        assert_eq!(key.verify(""), Err(Tampered));
    }
}
