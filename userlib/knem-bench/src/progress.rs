//! A progress bar on stderr, only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `total` steps labelled `what`; hidden when stderr is not a
/// TTY, when `TERM` is unset or `dumb` (serial consoles, such as the test
/// VM's, which log every redraw), or when `KNEM_BENCH_NO_PROGRESS` is set.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    let term = std::env::var("TERM").unwrap_or_default();
    if !std::io::stderr().is_terminal()
        || term.is_empty()
        || term == "dumb"
        || std::env::var_os("KNEM_BENCH_NO_PROGRESS").is_some()
    {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} {msg} ({elapsed})")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(what.to_string());
    pb
}
