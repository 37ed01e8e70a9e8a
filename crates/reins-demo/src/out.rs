//! Printing on stdout that survives a closed stdout.
//!
//! `println!` panics when stdout is a pipe whose reader is gone (`serve --help | head
//! -1`, `demo --script builtin | head`). What this program prints there is for a
//! person, and a reader that left wants no more of it: the text is dropped, the
//! program goes on (a server keeps serving) or ends as it would have.

use std::io::Write as _;

/// Writes `text` on stdout and flushes; a write that fails (a closed pipe) is
/// dropped.
pub(crate) fn write(text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(text).and_then(|()| out.flush());
}

/// `println!` that drops what a closed stdout cannot take, instead of panicking.
macro_rules! say {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use say;
