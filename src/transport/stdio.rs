//! A message stream over a child's stdin and stdout: newline-delimited (ACP)
//! or `CWX1` frames (cwx).
//!
//! A reader task feeds the child's stdout through a sans-IO decoder and
//! hands whole messages to the driver over a small bounded channel. A big
//! message takes the process's one big-message permit (`budget`), so
//! conform holds few messages whatever the child writes. Every wait has a
//! deadline, moved only by the reader's own waits for the permit.

use super::budget::{self, Held, Meter, Stall};
use super::process::{self, Spawned, Stdio3};
use crate::wire::{Codec, Decode, Refused};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the reader saw on the child's stdout.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// A whole line (newline stripped) or frame payload.
    Line(Held),
    /// A line went over the limit; its bytes up to the next newline are dropped.
    TooLong { limit: usize },
    /// The stream broke (a bad frame header); nothing more is read from it.
    Broken(String),
    /// stdout closed; `partial` holds bytes of a last line with no newline.
    Closed { partial: Held },
}

/// Messages queued between the reader and the driver at most: small ones,
/// as a big one holds the process's one permit.
const QUEUE: usize = 4;

/// The pipes a target served in this process reads and writes: what
/// conform writes arrives on `input`; what it writes to `output` conform reads.
pub struct Pipes {
    pub input: DuplexStream,
    pub output: DuplexStream,
}

/// A target served in this process over [`Pipes`] (the tests').
pub type Serve = Arc<dyn Fn(Pipes) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// How a stdio target is started: a command line conform spawns (in its own
/// process group, through [`process::spawn`]), or a target served in this
/// process over in-memory pipes, as lsp-server's `Connection::memory()`.
#[derive(Clone)]
pub enum Launcher {
    Command(String),
    /// conform's own executable with these arguments, started without a
    /// shell (its built-in references: a fuzzer starts many).
    Own(Vec<String>),
    Memory(Serve),
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Launcher::Command(c) => write!(f, "Command({c:?})"),
            Launcher::Own(args) => write!(f, "Own({args:?})"),
            Launcher::Memory(_) => f.write_str("Memory"),
        }
    }
}

impl Launcher {
    /// The target's process, for a launcher that starts one.
    fn spawn(&self, env: &[(&str, &std::ffi::OsStr)]) -> std::io::Result<Spawned> {
        match self {
            Launcher::Command(line) => process::spawn(line, env, Stdio3::Pipes),
            Launcher::Own(args) => {
                let exe = std::env::current_exe()?;
                let program = exe
                    .to_str()
                    .ok_or_else(|| std::io::Error::other("conform's own path is not UTF-8"))?;
                process::spawn_in(
                    process::Program::Argv(program, args),
                    None,
                    env,
                    Stdio3::Pipes,
                )
            }
            Launcher::Memory(_) => Err(std::io::Error::other(
                "a target served in this process has no process",
            )),
        }
    }

    /// Starts the target and reads its output in `codec`'s messages.
    pub fn start(
        &self,
        env: &[(&str, &std::ffi::OsStr)],
        codec: Codec,
    ) -> std::io::Result<LineStream> {
        match self {
            Launcher::Command(_) | Launcher::Own(_) => {
                let mut process = self.spawn(env)?;
                let stdin = process
                    .stdin
                    .take()
                    .ok_or_else(|| std::io::Error::other("the child has no stdin pipe"))?;
                let stdout = process
                    .stdout_pipe
                    .take()
                    .ok_or_else(|| std::io::Error::other("the child has no stdout pipe"))?;
                Ok(LineStream::over(
                    Child::Process(process),
                    Box::new(stdin),
                    Box::new(stdout),
                    codec,
                ))
            }
            Launcher::Memory(serve) => {
                // Big enough for a frame header and a message at once; a
                // writer past it waits, as on a pipe.
                const PIPE: usize = 256 * 1024;
                let (to_target, input) = tokio::io::duplex(PIPE);
                let (output, from_target) = tokio::io::duplex(PIPE);
                let task = tokio::spawn(serve(Pipes { input, output }));
                Ok(LineStream::over(
                    Child::Task { task, done: false },
                    Box::new(to_target),
                    Box::new(from_target),
                    codec,
                ))
            }
        }
    }
}

/// The other end of a stream: a process conform spawned, or a task of its own.
pub enum Child {
    Process(Spawned),
    Task {
        task: tokio::task::JoinHandle<()>,
        done: bool,
    },
}

impl Child {
    /// How it ended, once it has (a task ends with status 0).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        match self {
            Child::Process(p) => p.exit_status(),
            Child::Task { task, done } => (*done || task.is_finished()).then(ExitStatus::default),
        }
    }

    /// Waits at most `within` for it to end.
    pub async fn wait_for_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        match self {
            Child::Process(p) => p.wait_for_exit(within).await,
            Child::Task { task, done } => {
                if !*done && tokio::time::timeout(within, &mut *task).await.is_ok() {
                    *done = true;
                }
                done.then(ExitStatus::default)
            }
        }
    }

    /// Ends it: a process as [`Spawned::shutdown`] does; a task is aborted.
    pub async fn shutdown(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        match self {
            Child::Process(p) => p.shutdown(grace).await,
            Child::Task { task, done } => {
                task.abort();
                *done = true;
                (Some(ExitStatus::default()), false)
            }
        }
    }

    /// The last of what it wrote to stderr (a task writes none).
    pub fn stderr_tail(&self) -> String {
        match self {
            Child::Process(p) => p.stderr_tail(),
            Child::Task { .. } => String::new(),
        }
    }
}

pub struct LineStream {
    pub process: Child,
    codec: Codec,
    stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    events: mpsc::Receiver<(Instant, StreamEvent)>,
    /// The reader's waits for the big-message permit.
    stall: std::sync::Arc<Stall>,
    /// The reader task: ended with the stream, even while it waits.
    reader: tokio::task::JoinHandle<()>,
    closed: bool,
}

impl Drop for LineStream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl LineStream {
    /// Spawns `command_line` and starts reading its stdout in lines of at
    /// most `line_limit` bytes.
    pub fn spawn(
        command_line: &str,
        env: &[(&str, &std::ffi::OsStr)],
        line_limit: usize,
    ) -> std::io::Result<LineStream> {
        Launcher::Command(command_line.to_owned()).start(env, Codec::Lines { limit: line_limit })
    }

    /// Spawns `command_line` and reads its stdout in `CWX1` frames.
    pub fn spawn_framed(
        command_line: &str,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> std::io::Result<LineStream> {
        Launcher::Command(command_line.to_owned()).start(env, Codec::Frames)
    }

    fn over(
        process: Child,
        stdin: Box<dyn AsyncWrite + Send + Unpin>,
        stdout: Box<dyn AsyncRead + Send + Unpin>,
        codec: Codec,
    ) -> LineStream {
        let (tx, rx) = mpsc::channel(QUEUE);
        let meter = Meter::new();
        let stall = meter.stall();
        let reader = tokio::spawn(read_messages(stdout, codec.decoder(), meter, tx));
        LineStream {
            process,
            codec,
            stdin: Some(stdin),
            events: rx,
            stall,
            reader,
            closed: false,
        }
    }

    /// How the target's messages are framed.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Writes `bytes` to the child's stdin within `deadline`.
    pub async fn send(&mut self, bytes: &[u8], deadline: Duration) -> Result<(), String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("conform already closed the target's stdin".into());
        };
        match tokio::time::timeout(deadline, async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        })
        .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("writing to the target's stdin failed: {e}")),
            Err(_) => Err(format!(
                "the target did not read its stdin for {:.1}s",
                deadline.as_secs_f64()
            )),
        }
    }

    /// Writes one message in the stream's framing within `deadline`.
    pub async fn send_message(
        &mut self,
        message: &serde_json::Value,
        deadline: Duration,
    ) -> Result<(), String> {
        let payload = message.to_string().into_bytes();
        let bytes = self
            .codec
            .encode(&payload)
            .ok_or("a message over the frame limit")?;
        self.send(&bytes, deadline).await
    }

    /// Closes the child's stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next event, or `None` when `until` passes first. After `Closed`
    /// every call returns `None` at once. `until` moves by the time the
    /// reader spent waiting for the big-message permit meanwhile.
    pub async fn next(&mut self, until: Instant) -> Option<(Instant, StreamEvent)> {
        if self.closed {
            return None;
        }
        let mut until = until;
        let mut seen = self.stall.waited(Instant::now());
        // timeout_at polls a ready channel even past its deadline: a target
        // that keeps writing would stretch every wait without end.
        if Instant::now() >= until {
            return None;
        }
        let received = loop {
            match tokio::time::timeout_at(until, self.events.recv()).await {
                Ok(r) => break Ok(r),
                Err(e) => match budget::extend(until, &self.stall, &mut seen) {
                    Some(later) => until = later,
                    None => break Err(e),
                },
            }
        };
        match received {
            Ok(Some(ev)) => {
                if matches!(ev.1, StreamEvent::Closed { .. }) {
                    self.closed = true;
                }
                Some(ev)
            }
            Ok(None) => {
                self.closed = true;
                Some((
                    Instant::now(),
                    StreamEvent::Closed {
                        partial: Held::unmetered(Vec::new()),
                    },
                ))
            }
            Err(_) => None,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

async fn read_messages(
    mut stdout: Box<dyn AsyncRead + Send + Unpin>,
    mut decoder: Box<dyn Decode>,
    mut meter: Meter,
    tx: mpsc::Sender<(Instant, StreamEvent)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut broken = false;
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => 0,
            Ok(n) => n,
        };
        if n == 0 {
            let partial = if broken {
                Vec::new()
            } else {
                decoder.take_partial()
            };
            let partial = meter.finish(partial);
            let _ = tx
                .send((Instant::now(), StreamEvent::Closed { partial }))
                .await;
            return;
        }
        // After a broken frame the rest is drained unread, so the child never
        // blocks on a full pipe.
        if broken {
            continue;
        }
        // The permit first, if these bytes may make the message big.
        meter.hold(decoder.pending_len() + n).await;
        let mut input = &buf[..n];
        while !input.is_empty() {
            let (used, out) = decoder.decode(input);
            input = &input[used..];
            let event = match out {
                None => continue,
                Some(Ok(message)) => StreamEvent::Line(meter.finish(message)),
                Some(Err(Refused::TooLong { limit })) => StreamEvent::TooLong { limit },
                Some(Err(Refused::Broken(why))) => StreamEvent::Broken(why),
            };
            broken = matches!(event, StreamEvent::Broken(_));
            meter.settle(if broken { 0 } else { decoder.pending_len() });
            if tx.send((Instant::now(), event)).await.is_err() {
                return;
            }
            if broken {
                break;
            }
        }
    }
}
