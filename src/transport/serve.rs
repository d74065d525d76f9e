//! One serve loop for the sans-IO peers conform serves over a byte stream:
//! its reference agent and host (the `builtin` targets) and its scripted
//! agent and host (the peers a client or core under test starts), on stdio
//! or on in-memory pipes. Time is one model for all: the peer says when it
//! next has something to say by itself, and `now` is a parameter.

use crate::wire::{Codec, Refused};
use serde_json::Value;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What a served peer writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// A message, framed by the codec.
    Message(Value),
    /// Bytes as they are (a broken frame a scripted host writes).
    Raw(Vec<u8>),
}

/// What to do after the decoder refused what came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRefusal {
    /// Go on reading.
    Go,
    /// Stop reading, but drain the input until it ends, so the other side
    /// never blocks on a full pipe.
    Drain,
    /// Stop now.
    Stop,
}

/// A sans-IO peer conform serves.
pub trait Served: Send {
    fn codec(&self) -> Codec;
    /// What to write before reading anything (a host's `host/hello`).
    fn greet(&mut self, _now: Instant) -> Vec<Out> {
        vec![]
    }
    /// One whole message from the other side: what to write back.
    fn handle(&mut self, payload: &[u8], now: Instant) -> Vec<Out>;
    /// The decoder refused what came (a line over the limit, a broken frame).
    fn refused(&mut self, why: &Refused, now: Instant) -> (Vec<Out>, AfterRefusal);
    /// When the peer next has something to say by itself.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// What is due by `now`.
    fn tick(&mut self, _now: Instant) -> Vec<Out> {
        vec![]
    }
    /// Whether the peer is done (a host after `host/shutdown`).
    fn done(&self) -> bool {
        false
    }
    /// The other side closed its end.
    fn closed(&mut self, _now: Instant) {}
    /// The other side closed its end in the middle of a message: `count`
    /// bytes came after the last whole one (the first of them in `head`),
    /// before [`Served::closed`].
    fn unterminated(&mut self, _head: &[u8], _count: usize, _now: Instant) {}
}

/// The most of an unfinished message [`serve`] keeps to show.
const HEAD_LIMIT: usize = 4096;

/// The time now, in the runtime's clock (which the tests may pause).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn write_all(
    codec: Codec,
    output: &mut (impl AsyncWrite + Unpin),
    out: Vec<Out>,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    for o in out {
        let bytes = match o {
            Out::Message(m) => codec.encode(&serde_json::to_vec(&m).unwrap_or_default()),
            Out::Raw(b) => Some(b),
        };
        if let Some(bytes) = bytes {
            output.write_all(&bytes).await?;
        }
    }
    output.flush().await
}

/// Serves `peer` on `input` and `output` until the input ends, the peer is
/// done, or a refusal stops it.
pub async fn serve(
    peer: &mut impl Served,
    mut input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let codec = peer.codec();
    let mut decoder = codec.decoder();
    write_all(codec, &mut output, peer.greet(now())).await?;
    let mut buf = vec![0u8; 64 * 1024];
    // The bytes read since the last whole message (or refusal).
    let (mut head, mut count) = (Vec::new(), 0usize);
    loop {
        if peer.done() {
            return Ok(());
        }
        let wake = peer.next_deadline();
        let n = tokio::select! {
            r = input.read(&mut buf) => r?,
            _ = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {
                let due = peer.tick(now());
                write_all(codec, &mut output, due).await?;
                continue;
            }
        };
        if n == 0 {
            if count > 0 {
                peer.unterminated(&head, count, now());
            }
            peer.closed(now());
            return Ok(());
        }
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let (used, item) = decoder.decode(rest);
            if item.is_none() {
                let room = HEAD_LIMIT.saturating_sub(head.len()).min(used);
                head.extend_from_slice(&rest[..room]);
                count += used;
            } else {
                head.clear();
                count = 0;
            }
            rest = &rest[used..];
            match item {
                None => {}
                Some(Ok(payload)) => {
                    let out = peer.handle(&payload, now());
                    write_all(codec, &mut output, out).await?;
                    if peer.done() {
                        return Ok(());
                    }
                }
                Some(Err(why)) => {
                    let (out, then) = peer.refused(&why, now());
                    write_all(codec, &mut output, out).await?;
                    match then {
                        AfterRefusal::Go => {}
                        AfterRefusal::Stop => return Ok(()),
                        AfterRefusal::Drain => {
                            let mut sink = vec![0u8; 64 * 1024];
                            while input.read(&mut sink).await? > 0 {}
                            peer.closed(now());
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}

/// Test support: a served peer bent into a deviation, served in memory.
#[cfg(test)]
pub mod testing {
    use super::*;
    use crate::transport::stdio::{Launcher, Pipes};
    use std::sync::Arc;

    /// `inner` with `bend` applied to every message it writes; a message
    /// `bend` returns false for is not written at all.
    pub struct Bent<S, F> {
        pub inner: S,
        pub bend: F,
    }

    impl<S: Served, F: FnMut(&mut Value) -> bool + Send> Bent<S, F> {
        fn bent(&mut self, out: Vec<Out>) -> Vec<Out> {
            out.into_iter()
                .filter_map(|o| match o {
                    Out::Message(mut m) => (self.bend)(&mut m).then_some(Out::Message(m)),
                    raw => Some(raw),
                })
                .collect()
        }
    }

    impl<S: Served, F: FnMut(&mut Value) -> bool + Send> Served for Bent<S, F> {
        fn codec(&self) -> Codec {
            self.inner.codec()
        }
        fn greet(&mut self, now: Instant) -> Vec<Out> {
            let out = self.inner.greet(now);
            self.bent(out)
        }
        fn handle(&mut self, payload: &[u8], now: Instant) -> Vec<Out> {
            let out = self.inner.handle(payload, now);
            self.bent(out)
        }
        fn refused(&mut self, why: &Refused, now: Instant) -> (Vec<Out>, AfterRefusal) {
            let (out, then) = self.inner.refused(why, now);
            (self.bent(out), then)
        }
        fn next_deadline(&self) -> Option<Instant> {
            self.inner.next_deadline()
        }
        fn tick(&mut self, now: Instant) -> Vec<Out> {
            let out = self.inner.tick(now);
            self.bent(out)
        }
        fn done(&self) -> bool {
            self.inner.done()
        }
    }

    /// A target served in memory: a fresh `make()` bent by `bend` each start.
    pub fn memory<S, M>(make: M, bend: fn(&mut Value) -> bool) -> Launcher
    where
        S: Served + 'static,
        M: Fn() -> S + Send + Sync + 'static,
    {
        Launcher::Memory(Arc::new(move |pipes: Pipes| {
            let mut peer = Bent {
                inner: make(),
                bend,
            };
            Box::pin(async move {
                let _ = serve(&mut peer, pipes.input, pipes.output).await;
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Echoes each message, and says "tick" once, 5 s after the first.
    struct Echo {
        due: Option<Instant>,
    }

    impl Served for Echo {
        fn codec(&self) -> Codec {
            Codec::Lines { limit: 64 }
        }

        fn handle(&mut self, payload: &[u8], now: Instant) -> Vec<Out> {
            self.due
                .get_or_insert(now + std::time::Duration::from_secs(5));
            vec![Out::Message(
                serde_json::from_slice(payload).unwrap_or(Value::Null),
            )]
        }

        fn refused(&mut self, _: &Refused, _: Instant) -> (Vec<Out>, AfterRefusal) {
            (vec![Out::Message(json!("refused"))], AfterRefusal::Go)
        }

        fn next_deadline(&self) -> Option<Instant> {
            self.due
        }

        fn tick(&mut self, now: Instant) -> Vec<Out> {
            match self.due {
                Some(at) if now >= at => {
                    self.due = None;
                    vec![Out::Message(json!("tick"))]
                }
                _ => vec![],
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_served_peer_answers_refuses_and_ticks_on_the_runtimes_clock() {
        let (mut conform, target) = tokio::io::duplex(4096);
        let (input, output) = tokio::io::split(target);
        let task = tokio::spawn(async move {
            let mut echo = Echo { due: None };
            serve(&mut echo, input, output).await
        });
        conform
            .write_all(format!("[1]\n\"{}\"\n", "x".repeat(100)).as_bytes())
            .await
            .unwrap();
        let mut got = String::new();
        while got.lines().count() < 3 {
            let mut buf = [0u8; 256];
            let n = conform.read(&mut buf).await.unwrap();
            got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        assert_eq!(got, "[1]\n\"refused\"\n\"tick\"\n");
        drop(conform);
        task.await.unwrap().unwrap();
    }
}
