//! The live conformance run: `cargo xtask live --base-url URL --model NAME`.
//!
//! Runs a fixed set of scenarios (plain and streamed chat, forced tool calls
//! streamed and not, a tool round trip, two tools in parallel, an agent that pauses
//! and is approved or rejected, an interrupt mid-stream, usage) against any
//! OpenAI-compatible or Anthropic endpoint and prints a Markdown table: scenario,
//! pass/fail, latency, and the exact error. See docs/providers.md.
//!
//! ```text
//! cargo run -p reins-examples --bin live -- --base-url http://127.0.0.1:8000/v1 --model local
//! cargo run -p reins-examples --bin live -- --provider anthropic \
//!     --base-url https://api.anthropic.com --model claude-sonnet-4-5
//! cargo run -p reins-examples --bin live -- --list
//! ```

#[path = "../live/mod.rs"]
mod live;

fn main() -> std::process::ExitCode {
    live::main()
}
