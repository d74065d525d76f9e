//! Errors by who is at fault, each with its exit status (DESIGN.md).

/// Why a run could not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command line or a case file is wrong: the user's to fix. Exit 2.
    #[error("{0}")]
    Usage(String),
    /// The target could not be started or reached at all. Exit 2.
    #[error("{0}")]
    Target(String),
    /// conform itself failed (its own I/O). Exit 2: there is no verdict.
    #[error("conform failed: {0}")]
    Conform(String),
    /// A command with no report to keep was stopped by Ctrl-C or SIGTERM:
    /// 128 + the signal's number, as a shell reports it. (`conform run`
    /// writes the report of what finished instead.)
    #[error("interrupted by {}", .0.name())]
    Interrupted(crate::outcome::StopSignal),
}

impl From<crate::case::CaseFileError> for RunError {
    fn from(e: crate::case::CaseFileError) -> Self {
        RunError::Usage(format!("bad case file: {e}"))
    }
}

impl RunError {
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Interrupted(signal) => signal.exit_code(),
            RunError::Usage(_) | RunError::Target(_) | RunError::Conform(_) => 2,
        }
    }
}
