//! Progress bars: one style for every long command.

use indicatif::{ProgressBar, ProgressStyle};

/// An empty bar drawn with `template` (indicatif syntax); hidden when stderr
/// is not a terminal.
pub fn styled_bar(template: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}
