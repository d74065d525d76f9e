//! Spawned targets: their own process group, stdout and stderr captured into
//! bounded buffers, and a shutdown ladder (SIGTERM to the target, a grace,
//! SIGKILL to the target) that always reaps.
//!
//! "The target" is every process it started, not only its process group: a
//! daemonising child calls `setsid()` and leaves the group. conform is a
//! child subreaper ([`adopt_orphans`]), so such a child, once its parent is
//! gone, becomes conform's child instead of init's; and each target carries
//! a token in its environment ([`TARGET_ID_ENV`]), which its descendants
//! inherit. A process is the target's when it is in the target's group,
//! descends from the target's first process, or carries its token.

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
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
    /// stdin is /dev/null; stdout and stderr are the caller's to read (a
    /// sandbox command, a terminal).
    Output,
}

/// What a spawned process runs.
#[derive(Debug, Clone, Copy)]
pub enum Program<'a> {
    /// A command line, run by `/bin/sh -c`.
    Shell(&'a str),
    /// A program and its arguments, run as they are.
    Argv(&'a str, &'a [String]),
}

/// How many processes this conform has started.
static SPAWNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The environment variable that marks every process of one target:
/// `<conform's pid>-<n>`, unique within a run.
pub const TARGET_ID_ENV: &str = "CONFORM_TARGET_ID";

/// Makes conform the reaper of its orphaned descendants (Linux), so that a
/// target's daemonised child stays within reach until the target is ended.
/// Without it (elsewhere, or if the kernel refuses), the environment token
/// still finds such a child.
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Makes every allocation of 256 KiB or more a mapping of its own (glibc),
/// returned to the system when it is freed. glibc's default raises that
/// threshold after each large free, up to 32 MiB, and keeps what is freed
/// below it in per-thread arenas: a target's stream of large messages would
/// leave conform holding several of them in freed memory.
pub fn return_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called once,
    // at start, before conform allocates anything large.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Kills every process of a target still left, the last step before
/// conform exits: those that carry one of this conform's target tokens,
/// the orphans it adopted (each target has been ended by now, so any child
/// left is one), and their descendants. For a target that was never shut
/// down (an interrupted run), or a process that cleared its environment.
pub fn sweep() {
    // Nothing spawned, nothing to find: every process a target left is a
    // descendant of one conform started (a reference server's exit, say,
    // need not read the process table).
    if SPAWNED.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        return;
    }
    let me = std::process::id() as i32;
    let prefix = format!("{me}-");
    let table = processes();
    let roots: Vec<i32> = table
        .iter()
        .filter(|p| p.live && (p.ppid == me || p.token(|t| t.starts_with(&prefix))))
        .map(|p| p.pid)
        .collect();
    let left: Vec<i32> = roots
        .iter()
        .flat_map(|root| members(&table, *root, ""))
        .map(|(pid, _)| pid)
        .collect();
    for pid in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    reap(&left);
}

/// A running target process.
pub struct Spawned {
    pid: i32,
    /// The value of [`TARGET_ID_ENV`] in its environment.
    token: String,
    status: watch::Receiver<Option<ExitStatus>>,
    /// True once the stderr pipe reached its end.
    stderr_done: watch::Receiver<bool>,
    pub stderr: Arc<Mutex<Tail>>,
    pub stdout: Arc<Mutex<Tail>>,
    pub stdin: Option<ChildStdin>,
    pub stdout_pipe: Option<ChildStdout>,
    /// stderr, for [`Stdio3::Output`].
    pub stderr_pipe: Option<ChildStderr>,
    finished: bool,
}

/// Starts `command_line` with `/bin/sh -c` in a process group of its own,
/// with `env` added to its environment.
pub fn spawn(
    command_line: &str,
    env: &[(&str, &std::ffi::OsStr)],
    stdio: Stdio3,
) -> std::io::Result<Spawned> {
    spawn_in(Program::Shell(command_line), None, env, stdio)
}

/// Starts `program` in `cwd` (by default conform's) in a process group of
/// its own, with `env` added to its environment and marked as one target
/// ([`TARGET_ID_ENV`]): every process conform starts goes through here, so
/// every one is ended with its group and found by the exit sweep.
pub fn spawn_in(
    program: Program<'_>,
    cwd: Option<&std::path::Path>,
    env: &[(&str, &std::ffi::OsStr)],
    stdio: Stdio3,
) -> std::io::Result<Spawned> {
    let token = format!(
        "{}-{}",
        std::process::id(),
        SPAWNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut cmd = match program {
        Program::Shell(line) => {
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-c").arg(line);
            cmd
        }
        Program::Argv(program, args) => {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        }
    };
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env(TARGET_ID_ENV, &token);
    cmd.process_group(0);
    end_with_conform(&mut cmd);
    cmd.stderr(Stdio::piped());
    match stdio {
        Stdio3::CaptureOutput => {
            cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        }
        Stdio3::Pipes => {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        }
        Stdio3::Output => {
            cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        }
    }
    // A backstop only: `shutdown` (or Drop) kills the whole group.
    cmd.kill_on_drop(true);
    let mut child: Child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    if pid > 0 {
        guard::watch(pid);
    }
    let stderr = Arc::new(Mutex::new(Tail::default()));
    let stdout = Arc::new(Mutex::new(Tail::default()));
    let (stderr_done_tx, stderr_done) = watch::channel(false);
    let mut stderr_pipe = child.stderr.take();
    if stdio != Stdio3::Output
        && let Some(err) = stderr_pipe.take()
    {
        tokio::spawn(drain(err, stderr.clone(), stderr_done_tx));
    } else {
        let _ = stderr_done_tx.send(true);
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
        token,
        status: rx,
        stderr_done,
        stderr,
        stdout,
        stdin,
        stdout_pipe,
        stderr_pipe,
        finished: false,
    })
}

/// The target's first process is killed when conform dies, however it dies:
/// a SIGKILL leaves conform no chance to end its targets, and the sweep
/// never runs. Linux's parent-death signal is sent when the thread that
/// spawned the child exits; conform spawns from tokio's worker threads,
/// which live as long as the runtime. Descendants that the target started
/// are the target's to end (the sweep finds them while conform lives).
fn end_with_conform(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let conform = nix::unistd::getpid();
        // SAFETY: between fork and exec the closure makes only
        // async-signal-safe system calls (prctl, getppid) and allocates
        // nothing (its errors are raw OS errors).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // conform died between fork and prctl: the signal will
                // never come, so do not start at all.
                if nix::unistd::getppid() != conform {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// What ends a target's whole process group when conform dies without
/// ending it (a SIGKILL gives conform no chance; the parent-death signal
/// reaches only the target's first process, and a `sh -c` target's program
/// is that shell's child). One small shell per conform, in a group of its
/// own so a terminal's Ctrl-C does not end it first: conform tells it each
/// group it starts (`+ PGID`) and ends (`- PGID`) over a pipe, and when the
/// pipe closes, because conform exited however it exited, it kills every
/// group still listed. A group is taken off the list once conform has ended
/// it, so a number the system gives again later is never killed.
mod guard {
    use std::io::Write;
    use std::process::{ChildStdin, Command, Stdio};
    use std::sync::{Mutex, OnceLock};

    const SCRIPT: &str = r#"g=' '
while read -r op pg; do
  case "$op" in
    +) g="$g$pg " ;;
    -) case "$g" in *" $pg "*) g="${g%% $pg *} ${g#* $pg }" ;; esac ;;
  esac
done
for pg in $g; do kill -s KILL -- "-$pg" 2>/dev/null; done
"#;

    static PIPE: OnceLock<Mutex<Option<ChildStdin>>> = OnceLock::new();

    fn start() -> Option<ChildStdin> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(SCRIPT)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()?;
        child.stdin.take()
    }

    fn tell(line: String) {
        let pipe = PIPE.get_or_init(|| Mutex::new(start()));
        if let Ok(mut pipe) = pipe.lock()
            && let Some(w) = pipe.as_mut()
            && w.write_all(line.as_bytes()).is_err()
        {
            // The guard is gone; a target is still ended by conform itself.
            *pipe = None;
        }
    }

    pub fn watch(pgid: i32) {
        tell(format!("+ {pgid}\n"));
    }

    pub fn release(pgid: i32) {
        if PIPE.get().is_some() {
            tell(format!("- {pgid}\n"));
        }
    }
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

    /// Ends the target: SIGTERM to all of it, up to `grace` for all of it to
    /// exit, then SIGKILL for whatever is left, grandchildren included, even
    /// those that left the group. Returns the exit status and whether
    /// anything of the target outlived the grace.
    pub async fn shutdown(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        self.finished = true;
        drop(self.stdin.take());
        // A target that ended by itself, all of it, needs no signal: one look
        // at the process table, not three (a fuzzer ends many).
        if self.exit_status().is_some() && self.members().is_empty() {
            let mut done = self.stderr_done.clone();
            let _ = tokio::time::timeout(Duration::from_millis(500), done.wait_for(|d| *d)).await;
            guard::release(self.pid);
            return (self.exit_status(), false);
        }
        let mut outlived = false;
        if self.exit_status().is_none() || !self.members().is_empty() {
            self.signal(Signal::SIGTERM);
            // The grace is the whole target's, not only the leader's: a
            // `sh -c` leader dies at once, and the target it started gets its
            // time to clean up too.
            let by = tokio::time::Instant::now() + grace;
            loop {
                if self.exit_status().is_some() && self.members().is_empty() {
                    break;
                }
                if tokio::time::Instant::now() >= by {
                    outlived = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let mut killed = self.signal(Signal::SIGKILL);
        let status = self.wait_for_exit(Duration::from_secs(5)).await;
        // The other members (a grandchild holding the pipes) die of the same
        // SIGKILL, but not at once: wait, bounded, until none is left, so
        // nothing of the target outlives the run.
        let gone_by = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            reap(&killed);
            if self.members().is_empty() || tokio::time::Instant::now() >= gone_by {
                break;
            }
            killed.extend(self.signal(Signal::SIGKILL));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // With every writer gone, the rest of its stderr is on the way:
        // read to the end (bounded), so a report shows all of it.
        let mut done = self.stderr_done.clone();
        let _ = tokio::time::timeout(Duration::from_millis(500), done.wait_for(|d| *d)).await;
        guard::release(self.pid);
        (status, outlived)
    }

    /// Sends `signal` to the group and to every other live member; returns
    /// the members outside the group it was sent to.
    fn signal(&self, signal: Signal) -> Vec<i32> {
        let _ = killpg(Pid::from_raw(self.pid), signal);
        let outside: Vec<i32> = self
            .members()
            .into_iter()
            .filter(|(_, pgrp)| *pgrp != self.pid)
            .map(|(pid, _)| pid)
            .collect();
        for pid in &outside {
            let _ = kill(Pid::from_raw(*pid), signal);
        }
        outside
    }

    /// The target's live processes (not zombies), with their groups.
    fn members(&self) -> Vec<(i32, i32)> {
        members(&processes(), self.pid, &self.token)
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
            self.signal(Signal::SIGKILL);
            guard::release(self.pid);
        }
    }
}

/// One line of the process table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Process {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    /// Not a zombie (or dead) left for a parent to collect.
    live: bool,
}

impl Process {
    /// Whether its environment has a target token that `accept`s.
    fn token(&self, accept: impl Fn(&str) -> bool) -> bool {
        let Ok(environ) = std::fs::read(format!("/proc/{}/environ", self.pid)) else {
            return false;
        };
        let key = format!("{TARGET_ID_ENV}=");
        environ
            .split(|b| *b == 0)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .filter_map(|v| v.strip_prefix(&key))
            .any(accept)
    }
}

/// The process table, from `/proc` (empty elsewhere: then only the group
/// is signalled).
fn processes() -> Vec<Process> {
    use std::io::Read;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // One read of each `stat` into one buffer: the fields wanted come
    // first, after a command name of at most 16 bytes, and a fuzzer that
    // ends many targets reads the table once for each. A name that is not
    // UTF-8 does not hide a process.
    let mut buf = [0u8; 512];
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let n = std::fs::File::open(e.path().join("stat"))
                .and_then(|mut f| f.read(&mut buf))
                .ok()?;
            parse_stat(pid, &String::from_utf8_lossy(&buf[..n]))
        })
        .collect()
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp ...`, where comm
/// may hold spaces and parentheses.
fn parse_stat(pid: i32, stat: &str) -> Option<Process> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Process {
        pid,
        ppid,
        pgrp,
        live: state != "Z" && state != "X",
    })
}

/// The live processes of the target whose first process is `leader` (and
/// group `leader`): those in its group, and those descending from it or
/// from one of conform's adopted orphans that carries its `token`. Only
/// conform's own children have their environment read, so a scan costs
/// about one read of each process's `stat`.
fn members(table: &[Process], leader: i32, token: &str) -> Vec<(i32, i32)> {
    let me = std::process::id() as i32;
    let parents: HashMap<i32, i32> = table.iter().map(|p| (p.pid, p.ppid)).collect();
    let roots: Vec<i32> = std::iter::once(leader)
        .chain(
            table
                .iter()
                .filter(|p| p.ppid == me && p.pid != leader && p.token(|t| t == token))
                .map(|p| p.pid),
        )
        .collect();
    let descends = |mut pid: i32| {
        // Bounded: a chain is at most as long as the table.
        for _ in 0..=table.len() {
            if roots.contains(&pid) {
                return true;
            }
            match parents.get(&pid) {
                Some(&ppid) if ppid > 1 && ppid != pid && ppid != me => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    table
        .iter()
        .filter(|p| p.live && (p.pgrp == leader || descends(p.pid)))
        .map(|p| (p.pid, p.pgrp))
        .collect()
}

/// Whether process `pid` is running (not a zombie left for its parent).
pub fn is_running(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    parse_stat(pid, &stat).is_some_and(|p| p.live)
}

/// Collects those of `pids` that have become conform's zombies: orphans it
/// adopted as a subreaper, then killed. None of them is a child tokio
/// waits for (conform's own children lead their groups and are not
/// signalled one by one).
fn reap(pids: &[i32]) {
    let me = std::process::id() as i32;
    for &pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if parse_stat(pid, &stat).is_some_and(|p| !p.live && p.ppid == me) {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, pgrp: i32) -> Process {
        Process {
            pid,
            ppid,
            pgrp,
            live: true,
        }
    }

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let stat = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560";
        assert_eq!(parse_stat(4242, stat), Some(p(4242, 17, 4242)));
        let zombie = parse_stat(9, "9 (x) Z 1 9 9").unwrap();
        assert!(!zombie.live);
        assert_eq!(parse_stat(9, "9 (x"), None);
    }

    #[test]
    fn members_are_the_group_and_the_descendants_that_left_it() {
        // 100 leads the target's group; 101 is in it; 102 called setsid()
        // and 103 is its child; 200 is another process of the machine, and
        // 104 a zombie of the target.
        let mut zombie = p(104, 100, 100);
        zombie.live = false;
        let table = vec![
            p(100, 1, 100),
            p(101, 100, 100),
            p(102, 101, 102),
            p(103, 102, 102),
            p(200, 1, 200),
            zombie,
        ];
        let mut got: Vec<i32> = members(&table, 100, "no-such-token")
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        got.sort();
        assert_eq!(got, vec![100, 101, 102, 103]);
    }

    #[test]
    fn a_cycle_in_the_table_ends_the_walk() {
        // A table read while processes come and go may be inconsistent.
        let table = vec![p(300, 301, 300), p(301, 300, 301), p(100, 1, 100)];
        let got = members(&table, 100, "no-such-token");
        assert_eq!(got, vec![(100, 100)]);
    }
}
