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
    /// The run was interrupted (Ctrl-C): 128 + SIGINT, as a shell reports it.
    #[error("interrupted")]
    Interrupted,
}

impl From<crate::case::CaseFileError> for RunError {
    fn from(e: crate::case::CaseFileError) -> Self {
        RunError::Usage(format!("bad case file: {e}"))
    }
}

impl RunError {
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Interrupted => 130,
            RunError::Usage(_) | RunError::Target(_) | RunError::Conform(_) => 2,
        }
    }
}
