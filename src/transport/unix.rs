//! One-shot exchanges over a Unix socket (or, in the tests, in-memory pipes
//! to a server in this process): connect, write a request, read one reply
//! line, bounded in size and time.

use super::budget::{self, Held, Meter};
use crate::wire::{LineDecoder, LineError};
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::UnixStream;
use tokio::time::{Instant, timeout_at};

/// How a read of one reply line ended.
#[derive(Debug)]
pub enum ReadOutcome {
    /// A whole line (newline stripped) and whatever bytes came after it in
    /// the same reads.
    Line { line: Held, after: Vec<u8> },
    /// The peer closed before a newline; `partial` is what it sent.
    Closed { partial: Held },
    /// The line grew past the limit.
    TooLong { limit: usize },
    /// The deadline passed first; `partial` is what had arrived.
    TimedOut { partial: Held },
    /// The socket failed (reset by the peer, ...).
    Failed { error: String, partial: Held },
}

/// A connection of either kind.
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// Hands the server's end of a new in-memory connection to its server.
pub type Accept = Arc<dyn Fn(DuplexStream) + Send + Sync>;

/// Where a connection-per-request server is reached: a Unix socket, or a
/// server in this process over in-memory pipes (as lsp-server's
/// `Connection::memory()`).
#[derive(Clone)]
pub enum Connector {
    Unix(PathBuf),
    Memory(Accept),
}

impl Connector {
    /// A new connection, within `within`.
    pub async fn connect(&self, within: Duration) -> std::io::Result<Box<dyn Conn>> {
        match self {
            Connector::Unix(path) => Ok(Box::new(connect(path, within).await?)),
            Connector::Memory(accept) => {
                let (ours, theirs) = tokio::io::duplex(256 * 1024);
                accept(theirs);
                Ok(Box::new(ours))
            }
        }
    }

    /// The socket's path, for a Unix socket.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Connector::Unix(p) => Some(p),
            Connector::Memory(_) => None,
        }
    }
}

impl std::fmt::Display for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connector::Unix(p) => write!(f, "{}", p.display()),
            Connector::Memory(_) => f.write_str("an in-memory server"),
        }
    }
}

/// Connects within `within`.
pub async fn connect(path: &Path, within: Duration) -> std::io::Result<UnixStream> {
    match tokio::time::timeout(within, UnixStream::connect(path)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {:.1}s", within.as_secs_f64()),
        )),
    }
}

/// Writes all of `bytes` before `deadline`.
pub async fn write_all(
    stream: &mut (impl AsyncWrite + Unpin + ?Sized),
    bytes: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    match timeout_at(deadline, stream.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the target did not take the request before the deadline",
        )),
    }
}

/// Reads one line of at most `limit` bytes before `deadline`. A big line
/// waits for the process's big-message permit (`budget`); the deadline moves
/// by that wait, which is conform's, not the target's.
pub async fn read_line(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
    limit: usize,
    deadline: Instant,
) -> ReadOutcome {
    let mut decoder = LineDecoder::new(limit);
    let mut meter = Meter::new();
    let stall = meter.stall();
    let mut seen = Duration::ZERO;
    let mut deadline = deadline;
    // Read into spare capacity: a connection costs no zeroed buffer.
    let mut chunk: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        chunk.clear();
        let n = match timeout_at(deadline, stream.read_buf(&mut chunk)).await {
            Err(_) => {
                return ReadOutcome::TimedOut {
                    partial: meter.finish(decoder.take_pending()),
                };
            }
            Ok(Err(e)) => {
                return ReadOutcome::Failed {
                    error: e.to_string(),
                    partial: meter.finish(decoder.take_pending()),
                };
            }
            Ok(Ok(0)) => {
                return ReadOutcome::Closed {
                    partial: meter.finish(decoder.take_pending()),
                };
            }
            Ok(Ok(n)) => n,
        };
        meter.hold(decoder.pending().len() + n).await;
        if let Some(later) = budget::extend(deadline, &stall, &mut seen) {
            deadline = later;
        }
        let (used, item) = decoder.feed(&chunk[..n]);
        match item {
            Some(Ok(line)) => {
                return ReadOutcome::Line {
                    line: meter.finish(line),
                    after: chunk[used..n].to_vec(),
                };
            }
            Some(Err(LineError::TooLong { limit })) => return ReadOutcome::TooLong { limit },
            None => {}
        }
    }
}

/// Collects what the peer sends after its reply, until it closes, `within`
/// passes, or `max` bytes have arrived.
pub async fn read_rest(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
    within: Duration,
    max: usize,
) -> Vec<u8> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while out.len() < max {
        match timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&chunk[..n.min(max - out.len())]),
            _ => break,
        }
    }
    out
}

/// Reads until the peer closes or `within` passes, keeping at most `max`
/// bytes; says whether the peer closed (a reset counts as a close).
pub async fn read_until_close(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
    within: Duration,
    max: usize,
) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => {
                let keep = n.min(max.saturating_sub(out.len()));
                out.extend_from_slice(&chunk[..keep]);
            }
            Err(_) => return (out, false),
        }
    }
}
