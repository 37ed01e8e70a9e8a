//! The SafeAgent terminal chat: `cargo xtask demo`.
//!
//! An agent with `delete_file`, `send_email` (both wait for your approval) and
//! `search_web` (runs at once), acting on a sandbox directory the demo creates under
//! its data directory (`./.reins-demo/` unless `--data-dir`). Sessions live in SQLite,
//! so a pause survives quitting: `cargo xtask demo --resume` continues it.
//!
//! ```text
//! cargo xtask demo                    # chat (offline model unless an API key is set)
//! cargo xtask demo --resume           # answer the call a previous run left pending
//! cargo xtask demo --script builtin   # replay the built-in script (what CI checks)
//! cargo xtask demo --help             # every flag
//! ```

#[path = "../demo/mod.rs"]
mod demo;

fn main() -> std::process::ExitCode {
    demo::main()
}
