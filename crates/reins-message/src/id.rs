//! Message ids: UUIDv7 strings from a per-thread generator.
//!
//! `uuid::Uuid::now_v7` asks the operating system for random bytes on every call (one
//! `getrandom` system call per message). Here each thread seeds a small generator
//! once and then makes ids without a system call:
//!
//! - bits 0-47: the Unix time in milliseconds (never going back within a thread);
//! - bits 48-51: the version (7); bits 64-65: the variant (`10`);
//! - a 42-bit counter in `rand_a` and the top of `rand_b` (RFC 9562, method 1), set
//!   to a random value with headroom at each new millisecond and incremented within
//!   one, so a thread's ids strictly increase;
//! - 32 random bits in the rest of `rand_b`, fresh for every id.
//!
//! Ids of one thread sort in creation order; ids of different threads sort by their
//! millisecond. Two threads' ids collide only if their random counter starts *and*
//! their 32 random bits coincide. The random bits identify nothing and are not
//! secrets: these ids are names, not tokens.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Bits of the per-millisecond counter (12 in `rand_a`, 30 in `rand_b`).
const COUNTER_BITS: u32 = 42;
const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
/// A fresh millisecond's counter starts below this, leaving 2^41 ids of headroom.
const COUNTER_START_MASK: u64 = COUNTER_MAX >> 1;

#[derive(Clone, Copy)]
struct Generator {
    last_ms: u64,
    counter: u64,
    rng: u64,
}

thread_local! {
    static GENERATOR: Cell<Option<Generator>> = const { Cell::new(None) };
}

impl Generator {
    fn seeded() -> Self {
        // One system call per thread: the random part of a library UUIDv7 (62 bits
        // in its low word), mixed with this thread's own random hasher keys.
        let seed = uuid::Uuid::now_v7().as_u64_pair().1;
        let keys =
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), seed);
        Self {
            last_ms: 0,
            counter: 0,
            rng: seed ^ keys.rotate_left(17),
        }
    }

    /// splitmix64: fast, and every seed gives a full-period sequence.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next(&mut self, now_ms: u64) -> u128 {
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.counter = self.next_random() & COUNTER_START_MASK;
        } else if self.counter >= COUNTER_MAX {
            // 2^41 ids in one millisecond: borrow the next one.
            self.last_ms += 1;
            self.counter = self.next_random() & COUNTER_START_MASK;
        } else {
            self.counter += 1;
        }
        let random = self.next_random() & 0xFFFF_FFFF;
        let ms = u128::from(self.last_ms & 0xFFFF_FFFF_FFFF);
        let counter = u128::from(self.counter);
        (ms << 80)
            | (0x7 << 76)
            | ((counter >> 30) << 64)
            | (0b10 << 62)
            | ((counter & 0x3FFF_FFFF) << 32)
            | u128::from(random)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The next UUIDv7 of this thread, as a number.
fn next_v7() -> u128 {
    GENERATOR.with(|cell| {
        let mut g = cell.get().unwrap_or_else(Generator::seeded);
        let id = g.next(now_ms());
        cell.set(Some(g));
        id
    })
}

/// A fresh message id: a UUIDv7 string, so ids sort by creation time (strictly within
/// a thread, by millisecond across threads). Made without a system call.
pub fn new_id() -> String {
    let mut buf = uuid::Uuid::encode_buffer();
    uuid::Uuid::from_u128(next_v7())
        .hyphenated()
        .encode_lower(&mut buf)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_version_7_with_the_rfc_variant_and_the_current_time() {
        let before = now_ms();
        let id = uuid::Uuid::parse_str(&new_id()).unwrap();
        let after = now_ms();
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        let (secs, nanos) = id.get_timestamp().unwrap().to_unix();
        let ms = secs * 1000 + u64::from(nanos) / 1_000_000;
        assert!(before <= ms && ms <= after, "{before} <= {ms} <= {after}");
    }

    #[test]
    fn ids_of_one_thread_strictly_increase() {
        let ids: Vec<String> = (0..100_000).map(|_| new_id()).collect();
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "{} then {}", w[0], w[1]);
        }
    }

    #[test]
    fn ids_are_unique_across_threads() {
        let threads: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| (0..20_000).map(|_| new_id()).collect::<Vec<_>>()))
            .collect();
        let mut all = HashSet::new();
        for t in threads {
            let ids = t.join().unwrap();
            for w in ids.windows(2) {
                assert!(w[0] < w[1]);
            }
            for id in ids {
                assert!(all.insert(id), "duplicate id");
            }
        }
        assert_eq!(all.len(), 160_000);
    }

    #[test]
    fn ids_of_different_threads_order_by_millisecond() {
        let a = new_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = std::thread::spawn(new_id).join().unwrap();
        assert!(a < b);
    }

    #[test]
    fn a_clock_going_back_or_a_full_counter_keeps_ids_increasing() {
        let mut g = Generator::seeded();
        let first = g.next(1_000);
        let back = g.next(900);
        assert!(back > first);
        g.counter = COUNTER_MAX;
        let borrowed = g.next(1_000);
        assert!(borrowed > back);
        assert_eq!(borrowed >> 80, 1_001);
        assert!(g.next(1_001) > borrowed);
    }

    proptest::proptest! {
        /// Whatever the clock does (forward, still, back), one generator's ids
        /// strictly increase and carry version 7 and the RFC variant.
        #[test]
        fn ids_increase_for_any_clock(steps in proptest::collection::vec(-3i64..4, 1..300)) {
            let mut g = Generator::seeded();
            let mut clock: i64 = 1_700_000_000_000;
            let mut last = 0u128;
            for s in steps {
                clock += s;
                let id = g.next(clock as u64);
                proptest::prop_assert!(id > last);
                proptest::prop_assert_eq!((id >> 76) & 0xF, 7);
                proptest::prop_assert_eq!((id >> 62) & 0b11, 0b10);
                last = id;
            }
        }
    }
}
