//! Progress of a run: a bar on a terminal, plain lines elsewhere (a CI log,
//! a pipe), so a long run is never silent and never garbles a log.
//!
//! The bar (indicatif) is drawn on stderr when stderr is a terminal; the
//! cases that did not pass are printed above it as they finish. Elsewhere
//! every finished case is one plain line: on stdout when the human report
//! goes there (the lines are its list of cases), else on stderr.

use crate::outcome::{CaseResult, Outcome};
use crate::report::progress_line;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

enum Mode {
    Bar(ProgressBar),
    Lines { to_stdout: bool },
}

pub struct Progress {
    mode: Mode,
    /// The target's label in a multi-target run (`[2] `), else empty.
    label: String,
}

impl Progress {
    /// `human_on_stdout`: the report is human text on standard output.
    pub fn new(human_on_stdout: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal()
            && std::env::var("TERM").map(|t| t != "dumb").unwrap_or(true);
        let mode = if terminal {
            // Drawn from the first `start`, when the length is known.
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            bar.set_style(
                ProgressStyle::with_template("{prefix}[{bar:30}] {pos}/{len} {elapsed} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            Mode::Bar(bar)
        } else {
            Mode::Lines {
                to_stdout: human_on_stdout,
            }
        };
        Progress {
            mode,
            label: String::new(),
        }
    }

    /// Whether per-case lines were printed where the human report goes, so
    /// the report need not list the cases again.
    pub fn listed_on_stdout(&self) -> bool {
        matches!(self.mode, Mode::Lines { to_stdout: true })
    }

    /// A new target starts (`label` is empty for a single-target run).
    pub fn start(&mut self, label: &str, total: usize) {
        self.label = label.to_owned();
        if let Mode::Bar(bar) = &self.mode {
            bar.reset();
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.set_length(total as u64);
            bar.set_position(0);
            bar.set_prefix(self.label.clone());
        }
    }

    /// One case finished (`done` of `total`).
    pub fn case(&mut self, r: &CaseResult, done: usize, total: usize) {
        let line = format!("{}{}", self.label, progress_line(r, done, total));
        match &self.mode {
            Mode::Bar(bar) => {
                if !matches!(r.outcome, Outcome::Pass | Outcome::Skip) {
                    bar.println(line);
                }
                bar.set_position(done as u64);
                bar.set_message(r.id.clone());
            }
            Mode::Lines { to_stdout: true } => crate::console::out(&format!("{line}\n")),
            Mode::Lines { to_stdout: false } => crate::console::err_line(&line),
        }
    }

    /// The run is over: the bar is cleared.
    pub fn finish(&self) {
        if let Mode::Bar(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }
}
