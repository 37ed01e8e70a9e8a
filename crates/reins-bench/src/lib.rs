//! Shared parts of the reins benchmark programs (`src/bin/*`): a counting global
//! allocator, so a program can report what a run allocates beside what it takes, and
//! the scenarios' agents.
//!
//! ```
//! use reins_bench::alloc::{Counting, INSTRUMENTED_SYSTEM, Snapshot};
//!
//! // In a program: `#[global_allocator] static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;`
//! static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;
//! let before = Snapshot::of(ALLOC);
//! // ... the work to count ...
//! let used = Snapshot::of(ALLOC).since(before);
//! assert_eq!(used.allocations, 0); // not installed here, so nothing was counted
//! ```

pub mod alloc;
pub mod scenario;
