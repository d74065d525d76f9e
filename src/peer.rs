//! What the three "conform plays the peer" roles share (agent-socket
//! `--role client`, acp `--role client`, cwx `--role core`): how a case's
//! checks become its evidence, the exit a check wants, and how a scripted
//! peer's record is read back.

use crate::evidence::{Evidence, Kind};
use crate::outcome::SkipKind;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::path::Path;

/// The most of a scripted peer's record conform reads back.
pub const RECORD_LIMIT: u64 = 32 * 1024 * 1024;

/// What one check of a peer case found.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Holds,
    /// The peer broke the check.
    Broken(Kind, String),
    /// Seen and worth knowing, never a failure.
    Note(String),
    /// The peer never did what the check is about (the workload the case
    /// gives it), so neither this check nor the later ones can be judged.
    Unseen(String),
}

/// The evidence of a peer case: the every-message rules the peer broke, as
/// (requirement, kind, why), then each step's check in order (`info` marks
/// the steps whose break is information only); `who` did `summary`.
pub fn evidence<S>(
    broken: Vec<(String, Kind, String)>,
    steps: &[S],
    info: impl Fn(&S) -> bool,
    mut check: impl FnMut(&S) -> Check,
    who: &str,
    summary: String,
) -> Evidence {
    let mut ev = Evidence::default();
    for (requirement, kind, why) in broken {
        if !ev
            .findings
            .iter()
            .any(|f| f.requirement.as_deref() == Some(&requirement) && f.message == why)
        {
            ev.broke(&requirement, kind, why);
        }
    }
    for step in steps {
        match check(step) {
            Check::Holds => {}
            // The later steps are about what the peer did not do: moot.
            Check::Unseen(why) => {
                ev.skip(why, SkipKind::Outside);
                break;
            }
            Check::Broken(_, why) if info(step) => ev.notes.push(why),
            Check::Broken(kind, why) => {
                ev.fail(kind, why);
            }
            Check::Note(why) => ev.notes.push(why),
        }
    }
    ev.summary = Some(format!("What the {who} did: {summary}"));
    ev
}

/// The exit status a check wants: a code, or `zero` / `nonzero`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ExitWant {
    Code(i32),
    Named(ExitClass),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitClass {
    Zero,
    Nonzero,
}

impl ExitWant {
    /// Whether an exit with `code` (`None`: by a signal) is the one wanted.
    pub fn holds(self, code: Option<i32>) -> bool {
        match (self, code) {
            (ExitWant::Code(w), Some(c)) => w == c,
            (ExitWant::Named(ExitClass::Zero), Some(c)) => c == 0,
            (ExitWant::Named(ExitClass::Nonzero), Some(c)) => c != 0,
            (ExitWant::Named(ExitClass::Nonzero), None) => true,
            (_, None) => false,
        }
    }
}

impl std::fmt::Display for ExitWant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitWant::Code(c) => write!(f, "{c}"),
            ExitWant::Named(ExitClass::Zero) => f.write_str("0"),
            ExitWant::Named(ExitClass::Nonzero) => f.write_str("non-zero"),
        }
    }
}

/// Where a scripted peer writes down what it exchanged, one JSON line an
/// event: the file conform reads back when the peer is a process of its
/// own, or memory when it runs in conform (the tests').
pub enum Record {
    File(std::fs::File),
    Memory(std::sync::Arc<std::sync::Mutex<Vec<String>>>),
}

impl Record {
    /// A record appended to the file at `path`.
    pub fn append_to(path: &Path) -> std::io::Result<Record> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Record::File)
    }

    /// Writes one event down. A record that cannot be written leaves the
    /// case without evidence, which its grading then says; the peer goes on.
    pub fn write(&mut self, event: &impl serde::Serialize) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        match self {
            Record::File(f) => {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
            Record::Memory(lines) => {
                if let Ok(mut l) = lines.lock() {
                    l.push(line);
                }
            }
        }
    }
}

/// The events of a record kept in memory.
pub fn read_memory<E: DeserializeOwned>(lines: &std::sync::Mutex<Vec<String>>) -> Vec<E> {
    lines
        .lock()
        .map(|l| {
            l.iter()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect()
        })
        .unwrap_or_default()
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
