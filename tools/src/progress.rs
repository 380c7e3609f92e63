//! Progress bars for long operations, drawn on stderr only when stderr is a terminal, so pipes,
//! files and CI logs stay quiet.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar that is hidden unless stderr is a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total` units; `bytes` renders the counts as sizes.
    pub fn new(total: u64, what: &str, bytes: bool) -> Progress {
        let bar = ProgressBar::new(total);
        if std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            let template = if bytes {
                "{msg:>12} [{bar:40}] {bytes}/{total_bytes} ({eta})"
            } else {
                "{msg:>12} [{bar:40}] {pos}/{len} ({eta})"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
        } else {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_message(what.to_owned());
        Progress { bar }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Removes the bar so that the report that follows starts on a clean line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
