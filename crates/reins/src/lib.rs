//! # reins
//!
//! The facade: re-exports of the reins crates.

pub use reins_message as message;
