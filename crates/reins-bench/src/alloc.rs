//! Counting what the programs allocate: a global allocator from `stats_alloc` (the
//! workspace forbids `unsafe`, which a `GlobalAlloc` of our own would need), and
//! [`Snapshot`], its counters reduced to what the reports print.

use std::alloc::System;

pub use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// The allocator a program installs:
/// `#[global_allocator] static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;`.
pub type Counting = StatsAlloc<System>;

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Calls to `alloc` and `realloc` so far.
    pub allocations: u64,
    /// Bytes asked for by `alloc` calls, plus the growth asked for by `realloc` calls.
    pub bytes: u64,
    /// Bytes held right now.
    pub held: u64,
}

impl Snapshot {
    /// The counters of `alloc` now.
    pub fn of(alloc: &Counting) -> Self {
        let s = alloc.stats();
        let grown = s.bytes_reallocated.max(0) as u64;
        Self {
            allocations: (s.allocations + s.reallocations) as u64,
            bytes: s.bytes_allocated as u64 + grown,
            held: (s.bytes_allocated as i128 - s.bytes_deallocated as i128
                + s.bytes_reallocated as i128)
                .max(0) as u64,
        }
    }

    /// What happened between `earlier` and this snapshot (`held` is the change, clamped
    /// at zero).
    pub fn since(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            allocations: self.allocations.saturating_sub(earlier.allocations),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            held: self.held.saturating_sub(earlier.held),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_counted_and_clamped() {
        let a = Snapshot {
            allocations: 10,
            bytes: 1_000,
            held: 500,
        };
        let b = Snapshot {
            allocations: 14,
            bytes: 1_640,
            held: 300,
        };
        assert_eq!(
            b.since(a),
            Snapshot {
                allocations: 4,
                bytes: 640,
                held: 0
            }
        );
    }

    #[test]
    fn an_allocator_that_is_not_installed_counts_nothing() {
        let fresh: Counting = StatsAlloc::system();
        let before = Snapshot::of(&fresh);
        let v = vec![0u8; 1024];
        std::hint::black_box(&v);
        assert_eq!(Snapshot::of(&fresh).since(before), Snapshot::default());
    }
}
