//! Spawned targets: their own process group, stdout and stderr captured into
//! bounded buffers, and a shutdown ladder (SIGTERM to the group, a grace,
//! SIGKILL to the group) that always reaps.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

/// How much of a target's stderr (and unused stdout) a report keeps: the tail.
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// How long a target has to exit after SIGTERM before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(3);

/// The last bytes of an output stream, and how many there were in all.
#[derive(Debug, Default)]
pub struct Tail {
    pub bytes: Vec<u8>,
    pub total: u64,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > OUTPUT_TAIL_BYTES {
            let cut = self.bytes.len() - OUTPUT_TAIL_BYTES;
            self.bytes.drain(..cut);
        }
    }

    /// The tail as text, saying how much came before it.
    pub fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        if self.total as usize > self.bytes.len() {
            format!(
                "[last {} of {} bytes]\n{text}",
                self.bytes.len(),
                self.total
            )
        } else {
            text.into_owned()
        }
    }
}

/// Which of the child's standard streams conform keeps for itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio3 {
    /// stdin is /dev/null; stdout and stderr go into tails (agent-socket).
    CaptureOutput,
    /// stdin and stdout are the protocol stream; stderr goes into a tail.
    Pipes,
}

/// A running target process.
pub struct Spawned {
    pid: i32,
    status: watch::Receiver<Option<ExitStatus>>,
    /// True once the stderr pipe reached its end.
    stderr_done: watch::Receiver<bool>,
    pub stderr: Arc<Mutex<Tail>>,
    pub stdout: Arc<Mutex<Tail>>,
    pub stdin: Option<ChildStdin>,
    pub stdout_pipe: Option<ChildStdout>,
    finished: bool,
}

/// Starts `command_line` with `/bin/sh -c` in a process group of its own,
/// with `env` added to its environment.
pub fn spawn(
    command_line: &str,
    env: &[(&str, &std::ffi::OsStr)],
    stdio: Stdio3,
) -> std::io::Result<Spawned> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(command_line);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.process_group(0);
    cmd.stderr(Stdio::piped());
    match stdio {
        Stdio3::CaptureOutput => {
            cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        }
        Stdio3::Pipes => {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        }
    }
    // A backstop only: `shutdown` (or Drop) kills the whole group.
    cmd.kill_on_drop(true);
    let mut child: Child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let stderr = Arc::new(Mutex::new(Tail::default()));
    let stdout = Arc::new(Mutex::new(Tail::default()));
    let (stderr_done_tx, stderr_done) = watch::channel(false);
    if let Some(err) = child.stderr.take() {
        tokio::spawn(drain(err, stderr.clone(), stderr_done_tx));
    }
    let mut stdout_pipe = child.stdout.take();
    if stdio == Stdio3::CaptureOutput
        && let Some(out) = stdout_pipe.take()
    {
        tokio::spawn(drain(out, stdout.clone(), watch::channel(false).0));
    }
    let stdin = child.stdin.take();
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let status = child.wait().await.ok();
        let _ = tx.send(status);
    });
    Ok(Spawned {
        pid,
        status: rx,
        stderr_done,
        stderr,
        stdout,
        stdin,
        stdout_pipe,
        finished: false,
    })
}

async fn drain(mut r: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>, done: watch::Sender<bool>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut t) = tail.lock() {
            t.push(&buf[..n]);
        }
    }
    let _ = done.send(true);
}

impl Spawned {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The exit status, once the process has ended.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }

    /// A receiver that sees the exit status when it comes.
    pub fn status_watch(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.status.clone()
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().map(|t| t.describe()).unwrap_or_default()
    }

    /// Ends the process group: SIGTERM, up to `grace` for the whole group to
    /// exit, then SIGKILL for whatever is left of it, grandchildren included.
    /// Returns the exit status and whether anything of the group outlived
    /// the grace.
    pub async fn shutdown(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        self.finished = true;
        drop(self.stdin.take());
        let group = Pid::from_raw(self.pid);
        let mut outlived = false;
        if self.exit_status().is_none() || group_alive(self.pid) {
            let _ = killpg(group, Signal::SIGTERM);
            // The grace is the group's, not only the leader's: a `sh -c`
            // leader dies at once, and the target it started gets its time
            // to clean up too.
            let by = tokio::time::Instant::now() + grace;
            loop {
                if self.exit_status().is_some() && !group_alive(self.pid) {
                    break;
                }
                if tokio::time::Instant::now() >= by {
                    outlived = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let _ = killpg(group, Signal::SIGKILL);
        let status = self.wait_for_exit(Duration::from_secs(5)).await;
        // The group's other members (a grandchild holding the pipes) die of
        // the same SIGKILL, but not at once: wait, bounded, until none is
        // left, so nothing of the target outlives the run.
        let gone_by = tokio::time::Instant::now() + Duration::from_secs(2);
        while group_alive(self.pid) && tokio::time::Instant::now() < gone_by {
            let _ = killpg(group, Signal::SIGKILL);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // With every writer gone, the rest of its stderr is on the way:
        // read to the end (bounded), so a report shows all of it.
        let mut done = self.stderr_done.clone();
        let _ = tokio::time::timeout(Duration::from_millis(500), done.wait_for(|d| *d)).await;
        (status, outlived)
    }

    /// Waits up to `within` for the process to exit.
    pub async fn wait_for_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let mut rx = self.status.clone();
        let _ = tokio::time::timeout(within, rx.wait_for(|s| s.is_some())).await;
        self.exit_status()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if !self.finished && self.pid > 0 {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// Whether a process of group `pgid` is still running (not a zombie left
/// for a parent, or for an init that does not reap, to collect). Reads
/// `/proc`; elsewhere asks the kernel, which counts zombies too.
fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return killpg(Pid::from_raw(pgid), None).is_ok();
    };
    dir.filter_map(Result::ok).any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parens.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// Describes an exit status for a report.
pub fn describe_status(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "still running".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (_, Some(sig)) => format!(
                "was killed by signal {sig} ({})",
                Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?")
            ),
            _ => "ended".into(),
        },
    }
}
