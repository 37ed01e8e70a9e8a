//! The offline verifier: every hash link, every signature, the first failure named.

use crate::bundle::{FORMAT, Line};
use crate::chain::{ChainEntry, ChainHead, EntryKind};
use crate::error::VerifyError;
use crate::receipt::{Keyring, SignedReceipt};

/// What a bundle that verifies holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The session.
    pub session: String,
    /// How many entries the chain holds (receipts included).
    pub entries: u64,
    /// How many of them are signed receipts.
    pub receipts: u64,
    /// The chain's last entry (what an outside record of the head is compared with).
    pub head: ChainHead,
}

/// Checks a bundle (its JSON lines text) with the keys it carries: the header, every
/// entry's hash and link, that every entry belongs to the bundle's session, and every
/// receipt's signature. The first failure is returned, naming the entry.
///
/// The keys in a bundle come from whoever exported it; to check against keys you hold
/// yourself (the operator's published JWKS), use [`verify_with`].
pub fn verify(bundle: &str) -> Result<Report, VerifyError> {
    check(bundle, None)
}

/// As [`verify`], but receipts are checked with `keys` only; the bundle's key lines
/// are ignored.
pub fn verify_with(bundle: &str, keys: &Keyring) -> Result<Report, VerifyError> {
    check(bundle, Some(keys))
}

fn check(bundle: &str, trusted: Option<&Keyring>) -> Result<Report, VerifyError> {
    let fail = |entry: Option<u64>, line: usize, reason: String| VerifyError {
        entry,
        line,
        reason,
    };
    let mut lines = bundle
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let session = match lines.next() {
        Some((n, text)) => match serde_json::from_str::<Line>(text) {
            Ok(Line::Header { format, session }) if format == FORMAT => session,
            Ok(Line::Header { format, .. }) => {
                return Err(fail(None, n, format!("unknown format `{format}`")));
            }
            Ok(_) => return Err(fail(None, n, "the first line is not a header".into())),
            Err(e) => return Err(fail(None, n, format!("not a bundle line: {e}"))),
        },
        None => return Err(fail(None, 1, "the bundle is empty".into())),
    };
    let mut own_keys = Keyring::new();
    let mut entries = Vec::new();
    for (n, text) in lines {
        match serde_json::from_str::<Line>(text) {
            Ok(Line::Key { jwk }) => own_keys
                .insert_jwk(&jwk)
                .map_err(|why| fail(None, n, why))?,
            Ok(Line::Entry { entry }) => entries.push((n, entry)),
            Ok(Line::Header { .. }) => return Err(fail(None, n, "a second header".into())),
            Err(e) => {
                // Name the entry this line would have been.
                let pos = entries.len() as u64 + 1;
                return Err(fail(Some(pos), n, format!("not a bundle line: {e}")));
            }
        }
    }
    let keys = trusted.unwrap_or(&own_keys);
    let mut head = ChainHead::genesis();
    let mut receipts = 0;
    for (i, (n, value)) in entries.into_iter().enumerate() {
        let pos = i as u64 + 1;
        let fail = |reason: String| fail(Some(pos), n, reason);
        let entry: ChainEntry =
            serde_json::from_value(value).map_err(|e| fail(format!("not a chain entry: {e}")))?;
        if entry.session != session {
            return Err(fail(format!(
                "it belongs to session `{}`, not `{session}`",
                entry.session
            )));
        }
        if entry.seq != pos {
            return Err(fail(format!(
                "it carries seq {} where {pos} was expected (an entry was removed, added or moved)",
                entry.seq
            )));
        }
        if entry.prev != head.hash {
            return Err(fail(
                "its `prev` is not the hash of the entry before it".to_owned(),
            ));
        }
        let hash = entry
            .content_hash()
            .map_err(|e| fail(format!("cannot encode it: {e}")))?;
        if hash != entry.hash {
            return Err(fail(
                "its content does not match its hash (it was changed)".to_owned(),
            ));
        }
        if entry.kind == EntryKind::Receipt {
            let signed: SignedReceipt = serde_json::from_value(entry.body.clone())
                .map_err(|e| fail(format!("not a signed receipt: {e}")))?;
            if signed.receipt.session != session {
                return Err(fail(format!(
                    "its receipt is for session `{}`",
                    signed.receipt.session
                )));
            }
            if signed.receipt.chain_head != entry.prev {
                return Err(fail(
                    "its receipt's chain_head is not the entry before it".to_owned(),
                ));
            }
            keys.check(&signed).map_err(|why| {
                fail(format!(
                    "its receipt is refused: {why} (key `{}`)",
                    signed.kid
                ))
            })?;
            receipts += 1;
        }
        head = entry.head();
    }
    Ok(Report {
        session,
        entries: head.seq,
        receipts,
        head,
    })
}
