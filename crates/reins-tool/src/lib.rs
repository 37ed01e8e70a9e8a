//! # reins-tool
//!
//! Filled in by its own issue; see the README status table.
