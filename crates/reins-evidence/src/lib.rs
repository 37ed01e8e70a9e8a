//! # reins-evidence
//!
//! Evidence anyone can check, without trusting the database it came from:
//!
//! - a **hash chain** per session ([`ChainEntry`]): every audit-trail entry and every
//!   ledger outcome carries the hash of the entry before it, each hash a SHA-256 over
//!   the entry's RFC 8785 canonical JSON. The stores of `reins-memory` write the chain in
//!   the same transaction as the change it records;
//! - **signed receipts** ([`Receipt`], [`SignedReceipt`]): an approval and an execution
//!   each yield a receipt binding the session, the call, the fingerprints, the decision
//!   and its actor, the door and the chain head, signed with Ed25519 by a [`Signer`]
//!   whose key comes from the configuration, never from the store. A [`Keyring`] holds
//!   the verifying keys (several at once, so keys rotate; revoked ones are refused) and
//!   publishes them as a JWKS (OKP keys);
//! - an **export bundle** ([`Bundle`], JSON lines: a header, keys, entries) and an
//!   **offline verifier** ([`verify`], [`verify_with`]) that names the first entry that
//!   fails.
//!
//! The format is specified in `docs/evidence.md`, precisely enough to write another
//! verifier from it (the repository's tests run one written in Python).
//!
//! Why these crates: `sha2` and `ed25519-dalek` are the RustCrypto and dalek
//! implementations the rest of the ecosystem (and this workspace, through
//! `jsonwebtoken`) already builds on. For RFC 8785, `serde_jcs` writes canonical JSON
//! straight from `Serialize` with ECMAScript number formatting (`ryu-js`); unlike
//! `serde_json_canonicalizer` it does not switch on `serde_json`'s `float_roundtrip`
//! feature, which would change float parsing for the whole workspace.
//!
//! ```
//! use reins_evidence::{
//!     Bundle, ChainEntry, ChainHead, EntryKind, Keyring, Receipt, ReceiptKind, Signer,
//!     claim_body, verify,
//! };
//!
//! // The chain: each entry links to the one before it.
//! let claim = ChainEntry::next(
//!     "chat-1", &ChainHead::genesis(), EntryKind::Claim,
//!     "2026-01-01T10:00:00.000000Z", claim_body("call_1", "fp-of-args", 1),
//! )?;
//!
//! // A receipt, signed with a key from the configuration, bound to the chain head.
//! let signer = Signer::from_seed("2026-01", [42; 32]);
//! let receipt = Receipt {
//!     kind: ReceiptKind::Execution, session: "chat-1".into(), call_id: "call_1".into(),
//!     tool: "send_email".into(), args_shown: None, args_executed: Some("fp-of-args".into()),
//!     decision: Some("success".into()), actor: None, issuer: None, subject: None,
//!     door: None, policy_hash: None, at: "2026-01-01T10:00:01.000000Z".into(),
//!     chain_head: claim.hash.clone(),
//! };
//! let body = serde_json::to_value(signer.sign(receipt)?).unwrap();
//! let sealed = ChainEntry::next("chat-1", &claim.head(), EntryKind::Receipt, "2026-01-01T10:00:01.000000Z", body)?;
//!
//! // Export, then check offline.
//! let mut keys = Keyring::new();
//! keys.insert_signer(&signer);
//! let text = Bundle::new("chat-1", vec![claim, sealed], keys).to_jsonl()?;
//! let report = verify(&text).expect("an untouched bundle verifies");
//! assert_eq!((report.entries, report.receipts), (2, 1));
//!
//! // Change one byte of the claim (the first entry naming the arguments) and the
//! // verifier names the entry.
//! assert!(text.contains("fp-of-args"));
//! let err = verify(&text.replacen("fp-of-args", "fp-of-argz", 1)).unwrap_err();
//! assert_eq!(err.entry, Some(1));
//! # Ok::<(), reins_evidence::Error>(())
//! ```
//!
//! ## Features
//!
//! None: the crate is small on purpose (no async runtime, no store, no clock — times
//! are RFC 3339 strings the caller writes).

mod bundle;
mod chain;
mod error;
mod receipt;
mod verify;

pub use bundle::{Bundle, FORMAT};
pub use chain::{
    ChainEntry, ChainHead, EntryKind, GENESIS, canonical, claim_body, decision_body, digest,
    finish_body,
};
pub use ed25519_dalek::VerifyingKey;
pub use error::{Error, Result, VerifyError};
pub use receipt::{Keyring, Receipt, ReceiptKind, SignedReceipt, Signer};
pub use verify::{Report, verify, verify_with};
