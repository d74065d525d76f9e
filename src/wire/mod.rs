//! Framing layers, sans-IO: bytes in, messages (or typed framing errors) out.

pub mod frame;
pub mod line;

pub use line::{LineDecoder, LineError};

/// How a stdio protocol frames its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// One JSON text and `\n` (ACP), a line at most `limit` bytes.
    Lines { limit: usize },
    /// `CWX1`, a u32 little-endian length, the payload (cwx).
    Frames,
}

/// What a decoder refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A line over the limit; its bytes up to the next newline are dropped
    /// and the stream goes on.
    TooLong { limit: usize },
    /// A bad frame header: nothing more can be read from the stream.
    Broken(String),
}

/// A sans-IO decoder of either framing.
pub trait Decode: Send {
    /// Feeds `input`: bytes used, and a whole message or what was refused.
    fn decode(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, Refused>>);
    /// Takes the bytes of the unfinished message, at the end of the stream.
    fn take_partial(&mut self) -> Vec<u8>;
    /// Bytes of the unfinished message held.
    fn pending_len(&self) -> usize;
}

impl Codec {
    pub fn decoder(self) -> Box<dyn Decode> {
        match self {
            Codec::Lines { limit } => Box::new(LineDecoder::new(limit)),
            Codec::Frames => Box::new(frame::FrameDecoder::default()),
        }
    }

    /// `payload` framed to write; `None` when no frame can hold it.
    pub fn encode(self, payload: &[u8]) -> Option<Vec<u8>> {
        match self {
            Codec::Lines { .. } => {
                let mut line = Vec::with_capacity(payload.len() + 1);
                line.extend_from_slice(payload);
                line.push(b'\n');
                Some(line)
            }
            Codec::Frames => frame::encode(payload),
        }
    }
}

impl Decode for LineDecoder {
    fn decode(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, Refused>>) {
        let (used, out) = self.feed(input);
        let out = out.map(|r| {
            r.map_err(|e| match e {
                LineError::TooLong { limit } => Refused::TooLong { limit },
            })
        });
        (used, out)
    }

    fn take_partial(&mut self) -> Vec<u8> {
        self.take_pending()
    }

    fn pending_len(&self) -> usize {
        self.pending().len()
    }
}

impl Decode for frame::FrameDecoder {
    fn decode(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, Refused>>) {
        let (used, out) = self.feed(input);
        (
            used,
            out.map(|r| r.map_err(|e| Refused::Broken(e.to_string()))),
        )
    }

    fn take_partial(&mut self) -> Vec<u8> {
        // Only its length matters for a report: an unfinished frame.
        vec![0; self.pending_len()]
    }

    fn pending_len(&self) -> usize {
        frame::FrameDecoder::pending_len(self)
    }
}
