//! `CWX1` framing, sans-IO: 4-byte magic `CWX1`, u32 little-endian payload
//! length, payload (UTF-8 JSON). "The payload buffer is allocated only after
//! the length is checked against `MAX_FRAME`" (the seed's `read_frame`).
//!
//! [`FrameDecoder`] is fed whatever bytes a transport read and hands out
//! whole payloads. It checks the magic as soon as four bytes are there and
//! the length as soon as eight are, before it reserves anything.
//!
//! State after an error: [`State::Broken`]. A length-prefixed stream cannot
//! resynchronise ("bad magic or length ends the host instead of
//! desynchronising it"), so every later call returns the same error.

use thiserror::Error;

pub const MAGIC: [u8; 4] = *b"CWX1";
pub const HEADER_LEN: usize = 8;
/// "Enough for base64 screenshots later; anything larger is refused, never truncated."
pub const MAX_FRAME: usize = 32 * 1024 * 1024;

/// What is wrong with the byte stream, from the peer's side.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("bad frame magic {0:02x?} (expected \"CWX1\")")]
    BadMagic([u8; 4]),
    #[error("frame of {0} bytes exceeds MAX_FRAME ({MAX_FRAME})")]
    TooLarge(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Collecting a header.
    Header,
    /// Collecting a payload of this many bytes.
    Payload(usize),
    /// The stream broke; nothing more is read from it.
    Broken,
}

#[derive(Debug)]
pub struct FrameDecoder {
    max_frame: usize,
    header: Vec<u8>,
    payload: Vec<u8>,
    state: State,
    error: Option<FrameError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new(MAX_FRAME)
    }
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            max_frame,
            header: Vec::with_capacity(HEADER_LEN),
            payload: Vec::new(),
            state: State::Header,
            error: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Bytes of an unfinished frame held so far (for a report at EOF).
    pub fn pending_len(&self) -> usize {
        self.header.len() + self.payload.len()
    }

    /// Whether the stream stopped at a frame boundary.
    pub fn at_boundary(&self) -> bool {
        self.state == State::Header && self.header.is_empty()
    }

    /// Feeds `input`; returns how many bytes were consumed and what came of
    /// them: a whole payload, an error, or nothing yet (all consumed).
    pub fn feed(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, FrameError>>) {
        let mut used = 0;
        loop {
            match self.state {
                State::Broken => {
                    let e = self
                        .error
                        .clone()
                        .expect("a broken decoder keeps its error");
                    return (input.len(), Some(Err(e)));
                }
                State::Header => {
                    let want = HEADER_LEN - self.header.len();
                    let take = want.min(input.len() - used);
                    self.header.extend_from_slice(&input[used..used + take]);
                    used += take;
                    if self.header.len() >= 4 && self.header[..4] != MAGIC {
                        let mut m = [0u8; 4];
                        m.copy_from_slice(&self.header[..4]);
                        return (used, Some(Err(self.break_with(FrameError::BadMagic(m)))));
                    }
                    if self.header.len() < HEADER_LEN {
                        return (used, None);
                    }
                    let len = u32::from_le_bytes([
                        self.header[4],
                        self.header[5],
                        self.header[6],
                        self.header[7],
                    ]) as usize;
                    // The length is checked before anything is reserved.
                    if len > self.max_frame {
                        return (
                            used,
                            Some(Err(self.break_with(FrameError::TooLarge(len as u64)))),
                        );
                    }
                    self.header.clear();
                    self.payload = Vec::with_capacity(len);
                    self.state = State::Payload(len);
                }
                State::Payload(len) => {
                    let take = (len - self.payload.len()).min(input.len() - used);
                    self.payload.extend_from_slice(&input[used..used + take]);
                    used += take;
                    if self.payload.len() < len {
                        return (used, None);
                    }
                    self.state = State::Header;
                    return (used, Some(Ok(std::mem::take(&mut self.payload))));
                }
            }
        }
    }

    fn break_with(&mut self, e: FrameError) -> FrameError {
        self.state = State::Broken;
        self.header.clear();
        self.payload = Vec::new();
        self.error = Some(e.clone());
        e
    }
}

/// One frame around `payload`, or `None` when it is over `MAX_FRAME`.
pub fn encode(payload: &[u8]) -> Option<Vec<u8>> {
    if payload.len() > MAX_FRAME {
        return None;
    }
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    Some(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(d: &mut FrameDecoder, mut input: &[u8]) -> Vec<Result<Vec<u8>, FrameError>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (used, got) = d.feed(input);
            input = &input[used..];
            if let Some(g) = got {
                let stop = g.is_err();
                out.push(g);
                if stop {
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn a_frame_round_trips() {
        let f = encode(br#"{"jsonrpc":"2.0"}"#).unwrap();
        let mut d = FrameDecoder::default();
        assert_eq!(
            decode_all(&mut d, &f),
            vec![Ok(br#"{"jsonrpc":"2.0"}"#.to_vec())]
        );
        assert!(d.at_boundary());
    }

    #[test]
    fn bad_magic_is_refused_after_four_bytes_and_stays_broken() {
        let mut d = FrameDecoder::default();
        assert_eq!(d.feed(b"CWX"), (3, None));
        let (_, got) = d.feed(b"2\x01\x00\x00\x00x");
        assert_eq!(got, Some(Err(FrameError::BadMagic(*b"CWX2"))));
        assert_eq!(d.state(), State::Broken);
        assert!(matches!(d.feed(b"CWX1"), (4, Some(Err(_)))));
    }

    #[test]
    fn a_length_over_the_limit_is_refused_before_any_payload() {
        let mut d = FrameDecoder::default();
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&u32::MAX.to_le_bytes());
        let (used, got) = d.feed(&header);
        assert_eq!(used, 8);
        assert_eq!(got, Some(Err(FrameError::TooLarge(u32::MAX as u64))));
        assert_eq!(d.pending_len(), 0);
    }

    #[test]
    fn the_limit_itself_is_accepted() {
        let mut d = FrameDecoder::new(4);
        let f = [&MAGIC[..], &4u32.to_le_bytes(), b"abcd"].concat();
        assert_eq!(decode_all(&mut d, &f), vec![Ok(b"abcd".to_vec())]);
        let f = [&MAGIC[..], &5u32.to_le_bytes()].concat();
        assert_eq!(decode_all(&mut d, &f), vec![Err(FrameError::TooLarge(5))]);
    }

    proptest! {
        #[test]
        fn chunking_does_not_change_the_frames(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..6),
            cuts in proptest::collection::vec(1usize..16, 1..32),
        ) {
            let stream: Vec<u8> = payloads.iter().flat_map(|p| encode(p).unwrap()).collect();
            let mut d = FrameDecoder::default();
            let mut got = Vec::new();
            let mut rest = &stream[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                i += 1;
                let mut chunk = &rest[..n];
                rest = &rest[n..];
                while !chunk.is_empty() {
                    let (used, out) = d.feed(chunk);
                    chunk = &chunk[used..];
                    if let Some(o) = out { got.push(o.unwrap()); }
                }
            }
            prop_assert_eq!(got, payloads);
            prop_assert!(d.at_boundary());
        }
    }
}
