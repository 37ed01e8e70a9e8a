//! The SafeAgent demo agent as an HTTP service with the approval inbox:
//! `cargo xtask serve` (see the `reins_demo` crate).
//!
//! ```text
//! cargo xtask serve                                  # http://127.0.0.1:8080
//! cargo xtask serve --port 9000
//! cargo xtask serve --database-url postgres://user@localhost/reins
//! cargo xtask serve --help                           # every flag
//! ```

fn main() -> std::process::ExitCode {
    reins_demo::serve()
}
