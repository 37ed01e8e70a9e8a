//! Boxing a future in its box.
//!
//! `Box::pin(f)` makes `f` first and then copies it into the box, and a future is as
//! large as its largest state: a run's future is about ten kilobytes, most of it never
//! written before it is polled, and the copy was an eighth of a single turn's
//! instructions (measured with `cargo xtask bench --cost`, docs/performance.md). Made
//! by a closure whose result is written straight into the box, the future is built
//! where it stays.

use std::future::Future;
use std::pin::Pin;

/// The future `make` makes, built in its box (see the [module docs](self)).
#[inline(always)]
pub(crate) fn boxed<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
