//! Cedar policies for reins: policy as code for the three questions a person would
//! otherwise answer.
//!
//! | question | Cedar action | reins hook |
//! |---|---|---|
//! | may this call run without asking? (allow / deny / ask) | `Reins::Action::"call"` | [`ApprovalPolicy`](reins_agent::ApprovalPolicy), the `Consult` step of every driver |
//! | who may approve or reject it? | `Reins::Action::"decide"` | [`EligibilityPolicy::may_decide`](reins_agent::EligibilityPolicy::may_decide), the run's input check (every door, every driver) |
//! | who may create a grant for it? | `Reins::Action::"grant"` | [`EligibilityPolicy::may_grant`](reins_agent::EligibilityPolicy::may_grant) |
//!
//! Policies are read from `.cedar` files ([`PolicySet::from_dir`],
//! [`PolicySet::from_files`]) and validated against the published [`SCHEMA`] (strict
//! mode) at load: a set with a bad policy is refused as a whole, each problem with its
//! file, line and reason ([`Error::Invalid`]). [`CedarPolicy`] holds the active set and
//! swaps in a new one atomically ([`CedarPolicy::reload`]): a decision sees the old set
//! or the new one, never a mix. Every answer names the policies that produced it
//! ([`Answer::policies`]): the reason of an allow and the note of a deny, both in the
//! session's audit trail, name them (policy `tmp-deletes`). A set has a hash
//! ([`PolicySet::hash`]) that each call it allows or rejects records in the audit trail
//! and signs into its evidence receipt (`docs/evidence.md`).
//!
//! A **shadow** set ([`CedarPolicy::set_shadow`]) is evaluated beside the active one on
//! every question; where they answer differently the difference is recorded in the
//! [`ShadowLog`] (and its JSON-lines file, when it has one), and nothing else happens.
//!
//! ```
//! use reins_policy::{CedarPolicy, PolicySet};
//!
//! let set = PolicySet::from_source(
//!     "tmp.cedar",
//!     r#"@id("tmp-deletes")
//!        permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
//!        when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };"#,
//! )?;
//! let policy = CedarPolicy::new(set);
//! assert_eq!(policy.active().ids().collect::<Vec<_>>(), ["tmp-deletes"]);
//! assert_eq!(policy.active().hash().len(), 64); // SHA-256, hex
//! // Agent::builder().approval_policy(policy.clone()).eligibility_policy(policy) ...
//! # Ok::<(), reins_policy::Error>(())
//! ```
//!
//! [`PolicyDir`] keeps the sets in directories: it reads every `*.cedar` file again on
//! [`reload`](PolicyDir::reload) (a new file is picked up), and its [`ReloadStatus`]
//! says which sets answer, their digests, and the last refused reload.
//!
//! docs/policy.md describes the schema, the annotations (`@id`, `@ask`, `@reason`) and
//! shadow mode with examples.

mod dir;
mod error;
mod eval;
mod live;
mod load;
mod shadow;

pub use dir::{LoadedSet, PolicyDir, ReloadError, ReloadStatus};
pub use error::{Error, Problem, Result};
pub use eval::{Answer, Question, Verdict};
pub use live::CedarPolicy;
pub use load::PolicySet;
pub use shadow::{ARGUMENTS_SUMMARY_CHARS, ShadowDifference, ShadowLog};

/// The Cedar schema every policy set is validated against (the file
/// `schema/reins.cedarschema` of this crate; docs/policy.md explains it).
pub const SCHEMA: &str = include_str!("../schema/reins.cedarschema");
