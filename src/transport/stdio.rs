//! A message stream over a child's stdin and stdout: newline-delimited (ACP)
//! or `CWX1` frames (cwx).
//!
//! A reader task feeds the child's stdout through a sans-IO decoder and
//! hands whole messages to the driver over a small bounded channel, so
//! conform holds at most a few messages of the limit at once whatever the
//! child writes. Every wait has a deadline.

use super::process::{self, Spawned, Stdio3};
use crate::wire::frame::FrameDecoder;
use crate::wire::line::{LineDecoder, LineError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the reader saw on the child's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A whole line, newline stripped.
    Line(Vec<u8>),
    /// A line went over the limit; its bytes up to the next newline are dropped.
    TooLong { limit: usize },
    /// The stream broke (a bad frame header); nothing more is read from it.
    Broken(String),
    /// stdout closed; `partial` holds bytes of a last line with no newline.
    Closed { partial: Vec<u8> },
}

/// Lines queued between the reader and the driver at most.
const QUEUE: usize = 8;

pub struct LineStream {
    pub process: Spawned,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<(Instant, StreamEvent)>,
    closed: bool,
}

impl LineStream {
    /// Spawns `command_line` and starts reading its stdout in lines of at
    /// most `line_limit` bytes.
    pub fn spawn(
        command_line: &str,
        env: &[(&str, &std::ffi::OsStr)],
        line_limit: usize,
    ) -> std::io::Result<LineStream> {
        Self::spawn_with(command_line, env, Box::new(LineDecoder::new(line_limit)))
    }

    /// Spawns `command_line` and reads its stdout in `CWX1` frames.
    pub fn spawn_framed(
        command_line: &str,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> std::io::Result<LineStream> {
        Self::spawn_with(command_line, env, Box::new(FrameDecoder::default()))
    }

    fn spawn_with(
        command_line: &str,
        env: &[(&str, &std::ffi::OsStr)],
        decoder: Box<dyn Decoder>,
    ) -> std::io::Result<LineStream> {
        let mut process = process::spawn(command_line, env, Stdio3::Pipes)?;
        let stdin = process.stdin.take();
        let stdout = process
            .stdout_pipe
            .take()
            .ok_or_else(|| std::io::Error::other("the child has no stdout pipe"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(read_messages(stdout, decoder, tx));
        Ok(LineStream {
            process,
            stdin,
            events: rx,
            closed: false,
        })
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

    /// Closes the child's stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next event, or `None` when `until` passes first. After `Closed`
    /// every call returns `None` at once.
    pub async fn next(&mut self, until: Instant) -> Option<(Instant, StreamEvent)> {
        if self.closed {
            return None;
        }
        // timeout_at polls a ready channel even past its deadline: a target
        // that keeps writing would stretch every wait without end.
        if Instant::now() >= until {
            return None;
        }
        match tokio::time::timeout_at(until, self.events.recv()).await {
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
                        partial: Vec::new(),
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

/// A sans-IO decoder of a child's output: lines or frames.
trait Decoder: Send {
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<StreamEvent>);
    fn partial(&self) -> Vec<u8>;
}

impl Decoder for LineDecoder {
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<StreamEvent>) {
        let (used, out) = self.feed(input);
        let event = out.map(|r| match r {
            Ok(line) => StreamEvent::Line(line),
            Err(LineError::TooLong { limit }) => StreamEvent::TooLong { limit },
        });
        (used, event)
    }

    fn partial(&self) -> Vec<u8> {
        self.pending().to_vec()
    }
}

impl Decoder for FrameDecoder {
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<StreamEvent>) {
        let (used, out) = self.feed(input);
        let event = out.map(|r| match r {
            Ok(payload) => StreamEvent::Line(payload),
            Err(e) => StreamEvent::Broken(e.to_string()),
        });
        (used, event)
    }

    fn partial(&self) -> Vec<u8> {
        // Only its length matters for a report: an unfinished frame.
        vec![0; self.pending_len()]
    }
}

async fn read_messages(
    mut stdout: tokio::process::ChildStdout,
    mut decoder: Box<dyn Decoder>,
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
                decoder.partial()
            };
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
        let mut input = &buf[..n];
        while !input.is_empty() {
            let (used, out) = decoder.feed_event(input);
            input = &input[used..];
            let Some(event) = out else { continue };
            broken = matches!(event, StreamEvent::Broken(_));
            if tx.send((Instant::now(), event)).await.is_err() {
                return;
            }
            if broken {
                break;
            }
        }
    }
}
