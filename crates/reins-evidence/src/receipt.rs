//! Signed receipts: [`Receipt`], [`Signer`] (a key from the configuration) and
//! [`Keyring`] (the verifying keys, rotation and revocation, published as a JWKS).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::chain::canonical;
use crate::error::{Error, Result};

/// What a receipt attests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A decision about a paused call was applied.
    Approval,
    /// A call finished (its result is recorded in the ledger).
    Execution,
}

/// The facts a receipt binds. Every member is always written (`null` when unknown), so
/// the signed text is the same whoever re-encodes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// What it attests.
    pub kind: ReceiptKind,
    /// The session.
    pub session: String,
    /// The tool call id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The fingerprint of the arguments the person was shown (approvals).
    pub args_shown: Option<String>,
    /// The fingerprint of the arguments the call ran with (executions).
    pub args_executed: Option<String>,
    /// The decision (`approve`, `reject`, ...) for approvals; the outcome
    /// (`success`, `error`) for executions.
    pub decision: Option<String>,
    /// Who decided.
    pub actor: Option<String>,
    /// The identity provider's issuer of the actor's token, where there is one.
    pub issuer: Option<String>,
    /// The actor's subject at that issuer.
    pub subject: Option<String>,
    /// Through which door the decision came (`native`, `ag-ui`, `a2a`, `mcp`, ...).
    pub door: Option<String>,
    /// The hash of the policy set, where a policy decided.
    pub policy_hash: Option<String>,
    /// When the receipt was signed (RFC 3339, UTC).
    pub at: String,
    /// The hash of the chain entry before the receipt's own entry: the chain as it
    /// stood when the receipt was signed.
    pub chain_head: String,
}

/// A [`Receipt`] with its Ed25519 signature: the body of a receipt chain entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedReceipt {
    /// The receipt.
    pub receipt: Receipt,
    /// The id of the key that signed it.
    pub kid: String,
    /// Always `EdDSA` (Ed25519).
    pub alg: String,
    /// The signature over the receipt's RFC 8785 canonical JSON, base64url without
    /// padding.
    pub sig: String,
}

/// A signing key with its id, read from the configuration (a file or the
/// environment) — never from a store. Its `Debug` shows the id only.
#[derive(Clone)]
pub struct Signer {
    kid: String,
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer from a 32-byte Ed25519 seed (the private key).
    pub fn from_seed(kid: impl Into<String>, seed: [u8; 32]) -> Self {
        Self {
            kid: kid.into(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// A signer from a seed written as base64url (padded or not), as a configuration
    /// file or an environment variable holds it. The error never shows the seed.
    pub fn from_base64url(kid: impl Into<String>, seed: &str) -> Result<Self> {
        let kid = kid.into();
        let bytes = URL_SAFE_NO_PAD
            .decode(seed.trim().trim_end_matches('='))
            .map_err(|_| Error::Key {
                kid: kid.clone(),
                reason: "the seed is not base64url".to_owned(),
            })?;
        let seed: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| Error::Key {
            kid: kid.clone(),
            reason: format!("an Ed25519 seed is 32 bytes, this one is {}", b.len()),
        })?;
        Ok(Self::from_seed(kid, seed))
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// Signs `receipt`.
    pub fn sign(&self, receipt: Receipt) -> Result<SignedReceipt> {
        let message = canonical(&receipt, "a receipt")?;
        let sig = self.key.sign(&message);
        Ok(SignedReceipt {
            receipt,
            kid: self.kid.clone(),
            alg: "EdDSA".to_owned(),
            sig: URL_SAFE_NO_PAD.encode(sig.to_bytes()),
        })
    }
}

/// The verifying keys receipts are checked with: several at once (keys rotate: the
/// old one stays to check old receipts), each by id; a revoked key is refused for
/// every receipt it signed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    keys: BTreeMap<String, KeyRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyRecord {
    key: VerifyingKey,
    revoked: bool,
}

/// Why a receipt's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyRefusal {
    Unknown,
    Revoked,
    BadSignature,
    Malformed(String),
}

impl std::fmt::Display for KeyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown => f.write_str("signed with an unknown key"),
            Self::Revoked => f.write_str("signed with a revoked key"),
            Self::BadSignature => f.write_str("the signature does not match the receipt"),
            Self::Malformed(why) => f.write_str(why),
        }
    }
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a verifying key.
    pub fn insert(&mut self, kid: impl Into<String>, key: VerifyingKey) {
        self.keys.insert(
            kid.into(),
            KeyRecord {
                key,
                revoked: false,
            },
        );
    }

    /// Adds a signer's public key.
    pub fn insert_signer(&mut self, signer: &Signer) {
        self.insert(signer.kid.clone(), signer.verifying_key());
    }

    /// Marks a key revoked (true when the keyring holds it).
    pub fn revoke(&mut self, kid: &str) -> bool {
        match self.keys.get_mut(kid) {
            Some(r) => {
                r.revoked = true;
                true
            }
            None => false,
        }
    }

    /// Whether the keyring holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys as JWKS members (`kty` `OKP`, `crv` `Ed25519`, `x` the public key in
    /// base64url, `kid`, `alg` `EdDSA`, `use` `sig`), revoked ones with
    /// `"revoked": true`, by key id.
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|(kid, r)| {
                let mut jwk = json!({
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "x": URL_SAFE_NO_PAD.encode(r.key.as_bytes()),
                    "kid": kid,
                    "alg": "EdDSA",
                    "use": "sig",
                });
                if r.revoked {
                    jwk["revoked"] = Value::Bool(true);
                }
                jwk
            })
            .collect();
        json!({ "keys": keys })
    }

    /// Adds one JWKS member (as [`jwks`](Keyring::jwks) writes it; other key types
    /// are refused).
    pub fn insert_jwk(&mut self, jwk: &Value) -> Result<(), String> {
        let field = |name: &str| jwk.get(name).and_then(Value::as_str);
        let kid = field("kid").ok_or("a key without a `kid`")?;
        if field("kty") != Some("OKP") || field("crv") != Some("Ed25519") {
            return Err(format!("key `{kid}` is not an OKP Ed25519 key"));
        }
        let x = field("x").ok_or_else(|| format!("key `{kid}` has no `x`"))?;
        let bytes: [u8; 32] = URL_SAFE_NO_PAD
            .decode(x)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("key `{kid}`: `x` is not 32 bytes of base64url"))?;
        let key = VerifyingKey::from_bytes(&bytes)
            .map_err(|_| format!("key `{kid}`: `x` is not an Ed25519 point"))?;
        let revoked = jwk.get("revoked").and_then(Value::as_bool).unwrap_or(false);
        self.keys.insert(kid.to_owned(), KeyRecord { key, revoked });
        Ok(())
    }

    /// A keyring from a JWKS document (`{"keys": [...]}`).
    pub fn from_jwks(jwks: &Value) -> Result<Self, String> {
        let mut ring = Self::new();
        let keys = jwks
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("a JWKS without a `keys` array")?;
        for k in keys {
            ring.insert_jwk(k)?;
        }
        Ok(ring)
    }

    /// Checks a signed receipt's signature.
    pub(crate) fn check(&self, signed: &SignedReceipt) -> Result<(), KeyRefusal> {
        if signed.alg != "EdDSA" {
            return Err(KeyRefusal::Malformed(format!(
                "alg `{}` where `EdDSA` was expected",
                signed.alg
            )));
        }
        let record = self.keys.get(&signed.kid).ok_or(KeyRefusal::Unknown)?;
        if record.revoked {
            return Err(KeyRefusal::Revoked);
        }
        let bytes: [u8; 64] = URL_SAFE_NO_PAD
            .decode(&signed.sig)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| KeyRefusal::Malformed("`sig` is not 64 bytes of base64url".into()))?;
        let message = canonical(&signed.receipt, "a receipt")
            .map_err(|e| KeyRefusal::Malformed(e.to_string()))?;
        record
            .key
            .verify_strict(&message, &Signature::from_bytes(&bytes))
            .map_err(|_| KeyRefusal::BadSignature)
    }

    /// Whether `signed` carries a valid signature by a known, unrevoked key.
    pub fn verifies(&self, signed: &SignedReceipt) -> bool {
        self.check(signed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn receipt() -> Receipt {
        Receipt {
            kind: ReceiptKind::Approval,
            session: "s".into(),
            call_id: "call_1".into(),
            tool: "send_email".into(),
            args_shown: Some("fp".into()),
            args_executed: None,
            decision: Some("approve".into()),
            actor: Some("alice".into()),
            issuer: None,
            subject: None,
            door: Some("native".into()),
            policy_hash: None,
            at: "2026-01-01T00:00:00.000000Z".into(),
            chain_head: crate::GENESIS.into(),
        }
    }

    #[test]
    fn a_signature_verifies_until_the_key_is_revoked() {
        let signer = Signer::from_seed("k1", [7; 32]);
        let signed = signer.sign(receipt()).unwrap();
        let mut ring = Keyring::new();
        assert_eq!(ring.check(&signed), Err(KeyRefusal::Unknown));
        ring.insert_signer(&signer);
        assert!(ring.verifies(&signed));
        let mut changed = signed.clone();
        changed.receipt.actor = Some("mallory".into());
        assert_eq!(ring.check(&changed), Err(KeyRefusal::BadSignature));
        assert!(ring.revoke("k1"));
        assert_eq!(ring.check(&signed), Err(KeyRefusal::Revoked));
    }

    #[test]
    fn the_jwks_round_trips_with_rotation_and_revocation() {
        let mut ring = Keyring::new();
        ring.insert_signer(&Signer::from_seed("k1", [1; 32]));
        ring.insert_signer(&Signer::from_seed("k2", [2; 32]));
        ring.revoke("k1");
        let jwks = ring.jwks();
        assert_eq!(jwks["keys"][0]["kty"], "OKP");
        assert_eq!(jwks["keys"][0]["revoked"], true);
        assert_eq!(Keyring::from_jwks(&jwks).unwrap(), ring);
    }

    #[test]
    fn a_seed_from_the_configuration_is_checked_and_never_shown() {
        let seed = URL_SAFE_NO_PAD.encode([9u8; 32]);
        let s = Signer::from_base64url("k", &seed).unwrap();
        assert!(!format!("{s:?}").contains(&seed));
        let err = Signer::from_base64url("k", "c2hvcnQ")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("32 bytes") && !err.contains("c2hvcnQ"),
            "{err}"
        );
    }
}
