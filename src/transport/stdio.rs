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
use crate::wire::frame::FrameDecoder;
use crate::wire::line::{LineDecoder, LineError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
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

pub struct LineStream {
    pub process: Spawned,
    stdin: Option<ChildStdin>,
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
        let meter = Meter::new();
        let stall = meter.stall();
        let reader = tokio::spawn(read_messages(stdout, decoder, meter, tx));
        Ok(LineStream {
            process,
            stdin,
            events: rx,
            stall,
            reader,
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

/// A sans-IO decoder of a child's output: lines or frames.
trait Decoder: Send {
    /// Feeds `input`: bytes used, and a whole message or an error.
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, StreamEvent>>);
    /// Takes the bytes of the unfinished message, at the end of the stream.
    fn take_partial(&mut self) -> Vec<u8>;
    /// Bytes of the unfinished message held.
    fn pending_len(&self) -> usize;
}

impl Decoder for LineDecoder {
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, StreamEvent>>) {
        let (used, out) = self.feed(input);
        let event = out.map(|r| {
            r.map_err(|e| match e {
                LineError::TooLong { limit } => StreamEvent::TooLong { limit },
            })
        });
        (used, event)
    }

    fn take_partial(&mut self) -> Vec<u8> {
        self.take_pending()
    }

    fn pending_len(&self) -> usize {
        self.pending().len()
    }
}

impl Decoder for FrameDecoder {
    fn feed_event(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, StreamEvent>>) {
        let (used, out) = self.feed(input);
        let event = out.map(|r| r.map_err(|e| StreamEvent::Broken(e.to_string())));
        (used, event)
    }

    fn take_partial(&mut self) -> Vec<u8> {
        // Only its length matters for a report: an unfinished frame.
        vec![0; self.pending_len()]
    }

    fn pending_len(&self) -> usize {
        FrameDecoder::pending_len(self)
    }
}

async fn read_messages(
    mut stdout: tokio::process::ChildStdout,
    mut decoder: Box<dyn Decoder>,
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
            let (used, out) = decoder.feed_event(input);
            input = &input[used..];
            let event = match out {
                None => continue,
                Some(Ok(message)) => StreamEvent::Line(meter.finish(message)),
                Some(Err(e)) => e,
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
