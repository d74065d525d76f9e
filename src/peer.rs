//! What the three "conform plays the peer" roles share (agent-socket
//! `--role client`, acp `--role client`, cwx `--role core`): how a case's
//! findings become its grade, and how a scripted peer's record is read back.

use crate::case::Case;
use crate::outcome::{Outcome, SkipKind};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::path::Path;

/// The most of a scripted peer's record conform reads back.
pub const RECORD_LIMIT: u64 = 32 * 1024 * 1024;

/// A case's grade.
#[derive(Debug, Clone, PartialEq)]
pub struct Grade {
    pub outcome: Outcome,
    pub message: String,
    /// Requirements broken that the case does not cite (the every-message rules).
    pub also_broken: Vec<String>,
    pub skip_kind: Option<SkipKind>,
}

/// What the checks of one case found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every-message rules broken, as (requirement, why): a failure whatever
    /// the case's level, since those rules are MUSTs.
    pub broken: Vec<(String, String)>,
    /// The case's own checks that failed.
    pub failures: Vec<String>,
    /// Information: never a failure.
    pub notes: Vec<String>,
    /// What the peer never did, so the case's checks could not run.
    pub unseen: Vec<String>,
}

impl Findings {
    /// The grade of `case` from these findings; `summary` says what the
    /// peer did, `who` names it ("client", "core").
    pub fn grade<D: crate::case::Dialect>(
        mut self,
        case: &Case<D>,
        strict: bool,
        summary: &str,
        who: &str,
    ) -> Grade {
        let notes = self.notes;
        let with = |lines: Vec<String>| {
            let mut text = lines.join("; ");
            if !notes.is_empty() {
                text.push_str(&format!(" (also: {})", notes.join("; ")));
            }
            format!("{text}. What the {who} did: {summary}")
        };
        let grade = |outcome, message, also_broken, skip_kind| Grade {
            outcome,
            message,
            also_broken,
            skip_kind,
        };
        if !self.broken.is_empty() {
            self.broken.sort();
            self.broken.dedup();
            let also = self
                .broken
                .iter()
                .map(|(r, _)| r.clone())
                .filter(|r| !case.requirements.contains(r))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut lines: Vec<String> = self
                .broken
                .iter()
                .map(|(r, w)| format!("[{r}] {w}"))
                .collect();
            lines.extend(self.failures);
            return grade(Outcome::Fail, with(lines), also, None);
        }
        if !self.failures.is_empty() {
            let outcome = Outcome::grade(case.level, true, strict);
            return grade(outcome, with(self.failures), vec![], None);
        }
        if !self.unseen.is_empty() {
            return grade(
                Outcome::Skip,
                with(self.unseen),
                vec![],
                Some(SkipKind::Outside),
            );
        }
        let outcome = Outcome::grade(case.level, false, strict);
        let message = match (outcome == Outcome::Pass, notes.is_empty()) {
            (true, true) => String::new(),
            (_, true) => format!("What the {who} did: {summary}"),
            _ => format!("{}. What the {who} did: {summary}", notes.join("; ")),
        };
        grade(outcome, message, vec![], None)
    }
}

/// Reads a scripted peer's record (JSON lines, at most [`RECORD_LIMIT`]
/// bytes); none at all when the peer was never started.
pub fn read_record<E: DeserializeOwned>(path: &Path) -> Result<Vec<E>, String> {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(path) {
        Ok(f) => {
            f.take(RECORD_LIMIT)
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read the scripted peer's record: {e}"))?;
        }
        Err(_) => return Ok(vec![]),
    }
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// A scripted peer ready to start: its temporary directory (the script is
/// in it), the shell-quoted command line that starts it, and where it
/// writes its record.
pub struct Prepared {
    pub dir: tempfile::TempDir,
    pub command: String,
    pub record: std::path::PathBuf,
}

/// Writes `script` into a fresh temporary directory named `prefix...` and
/// builds the command line `exe peer --protocol <protocol> --script S
/// --record R`.
pub fn prepare(
    prefix: &str,
    protocol: &str,
    exe: &Path,
    script: &impl serde::Serialize,
) -> Result<Prepared, String> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let script_path = dir.path().join("script.json");
    let record = dir.path().join("record.jsonl");
    std::fs::write(
        &script_path,
        serde_json::to_vec(script).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write the script: {e}"))?;
    let command = [
        exe.display().to_string(),
        "peer".into(),
        "--protocol".into(),
        protocol.into(),
        "--script".into(),
        script_path.display().to_string(),
        "--record".into(),
        record.display().to_string(),
    ]
    .iter()
    .map(|w| crate::matcher::shell_quote(w))
    .collect::<Vec<_>>()
    .join(" ");
    Ok(Prepared {
        dir,
        command,
        record,
    })
}

/// How the peer under test (a client or a core) ended.
pub struct Ended {
    /// Its exit status, when it exited before the deadline.
    pub code: Option<i32>,
    /// It was still running at the deadline and conform stopped it.
    pub stopped: bool,
    /// Milliseconds from `started` to its end (before any shutdown).
    pub ms: u64,
    /// What it logged: the reference's log, or the process's stderr.
    pub log: String,
}

/// Runs the peer under test until it exits or `deadline` passes: the
/// builtin reference (`builtin`, a task), or `line` run with `env` for an
/// `exec:` target, whose whole group (the scripted peer it started
/// included) is then ended. `role` ("client", "core") words the errors.
pub async fn launch<F>(
    target: &crate::target::Target,
    role: &str,
    builtin: F,
    line: impl FnOnce(&str) -> String,
    env: &[(&str, &std::ffi::OsStr)],
    started: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> Result<Ended, String>
where
    F: std::future::Future<Output = (i32, Vec<String>)> + Send + 'static,
{
    use crate::target::Target;
    use crate::transport::process::{self, Stdio3};
    let ms = || started.elapsed().as_millis() as u64;
    match target {
        Target::Builtin => {
            let task = tokio::spawn(builtin);
            let abort = task.abort_handle();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok((code, log))) => Ok(Ended {
                    code: Some(code),
                    stopped: false,
                    ms: ms(),
                    log: log.join("\n"),
                }),
                Ok(Err(e)) => Err(format!("conform's reference {role} failed: {e}")),
                Err(_) => {
                    abort.abort();
                    Ok(Ended {
                        code: None,
                        stopped: true,
                        ms: ms(),
                        log: String::new(),
                    })
                }
            }
        }
        Target::Exec(cmd) => {
            let mut spawned = process::spawn(&line(cmd), env, Stdio3::CaptureOutput)
                .map_err(|e| format!("cannot start `{cmd}`: {e}"))?;
            let status = spawned
                .wait_for_exit(deadline.saturating_duration_since(tokio::time::Instant::now()))
                .await;
            let ms = ms();
            // The whole group, the scripted peer it spawned included.
            let _ = spawned.shutdown(process::TERM_GRACE).await;
            Ok(Ended {
                code: status.and_then(|s| s.code()),
                stopped: status.is_none(),
                ms,
                log: spawned.stderr_tail(),
            })
        }
        Target::Unix(_) => Err(format!("--role {role} cannot test unix: targets")),
    }
}
