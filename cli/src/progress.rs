//! A spinner on stderr for work that takes seconds (booting a microVM,
//! pulling nothing but still waiting on a daemon), shown only on a
//! terminal and never with `--json`, so scripts see the same bytes as before.

use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Runs `work`, with `message` and the elapsed time spinning on stderr meanwhile.
pub async fn spin<T>(json: bool, message: String, work: impl Future<Output = T>) -> T {
    if json || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"));
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    let out = work.await;
    bar.finish_and_clear();
    out
}
