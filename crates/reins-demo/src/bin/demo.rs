//! The SafeAgent terminal chat: `cargo xtask demo` (see the `reins_demo` crate).
//!
//! ```text
//! cargo xtask demo                    # chat (offline model unless an API key is set)
//! cargo xtask demo --resume           # answer the call a previous run left pending
//! cargo xtask demo --script builtin   # replay the built-in script (what CI checks)
//! cargo xtask demo --help             # every flag
//! ```

fn main() -> std::process::ExitCode {
    reins_demo::demo()
}
