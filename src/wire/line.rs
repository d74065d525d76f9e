//! Newline-delimited framing, sans-IO.
//!
//! [`LineDecoder`] is fed whatever bytes a transport read and hands out whole
//! lines. It checks the limit before it buffers: a peer that sends more than
//! `max_len` bytes without a newline gets a [`LineError::TooLong`], and conform
//! never holds more than `max_len + 1` bytes of a line, whatever the peer sent.
//!
//! State after an error: the decoder is in [`State::Discarding`] and drops
//! bytes up to and including the next newline, so a stream protocol (ACP) can
//! resynchronise. A one-shot exchange (agent-socket) simply stops reading.

use thiserror::Error;

/// What went wrong with a line, from the peer's side.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    /// The line outgrew the limit before its newline arrived.
    #[error("line longer than the limit of {limit} bytes")]
    TooLong { limit: usize },
}

/// Where the decoder is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Collecting bytes of the current line.
    Reading,
    /// A line went over the limit; dropping bytes through its newline.
    Discarding,
}

/// A line-at-a-time decoder with an explicit maximum line length.
#[derive(Debug)]
pub struct LineDecoder {
    max_len: usize,
    buf: Vec<u8>,
    state: State,
}

impl LineDecoder {
    /// A decoder that accepts lines of at most `max_len` bytes, newline excluded.
    pub fn new(max_len: usize) -> Self {
        LineDecoder {
            max_len,
            buf: Vec::new(),
            state: State::Reading,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Bytes of the current, unfinished line held so far.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the bytes of the unfinished line (at the end of a stream).
    pub fn take_pending(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Feeds `input` and returns how many of its bytes were consumed and what
    /// came of them: a whole line (newline stripped), an error, or nothing yet
    /// (all bytes consumed). Call again with the rest of `input` after a line.
    pub fn feed(&mut self, input: &[u8]) -> (usize, Option<Result<Vec<u8>, LineError>>) {
        let newline = input.iter().position(|&b| b == b'\n');
        match self.state {
            State::Discarding => match newline {
                Some(i) => {
                    self.state = State::Reading;
                    (i + 1, None)
                }
                None => (input.len(), None),
            },
            State::Reading => {
                let take = newline.unwrap_or(input.len());
                // The limit is checked before the bytes are kept.
                if self.buf.len() + take > self.max_len {
                    // Its memory goes back too, not only its length.
                    self.buf = Vec::new();
                    self.state = State::Discarding;
                    let consumed = match newline {
                        Some(i) => {
                            self.state = State::Reading;
                            i + 1
                        }
                        None => input.len(),
                    };
                    return (
                        consumed,
                        Some(Err(LineError::TooLong {
                            limit: self.max_len,
                        })),
                    );
                }
                self.buf.extend_from_slice(&input[..take]);
                match newline {
                    Some(i) => (i + 1, Some(Ok(std::mem::take(&mut self.buf)))),
                    None => (input.len(), None),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(decoder: &mut LineDecoder, mut input: &[u8]) -> Vec<Result<Vec<u8>, LineError>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (used, item) = decoder.feed(input);
            input = &input[used..];
            out.extend(item);
        }
        out
    }

    #[test]
    fn splits_on_newlines_and_keeps_the_rest_pending() {
        let mut d = LineDecoder::new(16);
        let got = lines(&mut d, b"ab\ncd\nef");
        assert_eq!(got, vec![Ok(b"ab".to_vec()), Ok(b"cd".to_vec())]);
        assert_eq!(d.pending(), b"ef");
    }

    #[test]
    fn a_line_at_the_limit_is_accepted() {
        let mut d = LineDecoder::new(3);
        assert_eq!(lines(&mut d, b"abc\n"), vec![Ok(b"abc".to_vec())]);
    }

    #[test]
    fn line_over_limit_is_an_error_and_the_stream_resynchronises() {
        let mut d = LineDecoder::new(3);
        let got = lines(&mut d, b"ab");
        assert!(got.is_empty());
        let got = lines(&mut d, b"cd");
        assert_eq!(got, vec![Err(LineError::TooLong { limit: 3 })]);
        assert_eq!(d.state(), State::Discarding);
        assert!(d.pending().is_empty(), "nothing over the limit is kept");
        let got = lines(&mut d, b"efgh\nok\n");
        assert_eq!(got, vec![Ok(b"ok".to_vec())]);
    }

    proptest::proptest! {
        #[test]
        fn never_holds_more_than_the_limit(chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..32), limit in 0usize..40) {
            let mut d = LineDecoder::new(limit);
            for chunk in &chunks {
                for line in lines(&mut d, chunk).into_iter().flatten() {
                    proptest::prop_assert!(line.len() <= limit);
                    proptest::prop_assert!(!line.contains(&b'\n'));
                }
                proptest::prop_assert!(d.pending().len() <= limit);
            }
        }

        #[test]
        fn chunking_does_not_change_the_lines(data in proptest::collection::vec(proptest::prop_oneof![proptest::prelude::Just(b'\n'), proptest::prelude::any::<u8>()], 0..200), split in 0usize..200) {
            let mut whole = LineDecoder::new(1 << 20);
            let expected = lines(&mut whole, &data);
            let mut parts = LineDecoder::new(1 << 20);
            let at = split.min(data.len());
            let mut got = lines(&mut parts, &data[..at]);
            got.extend(lines(&mut parts, &data[at..]));
            proptest::prop_assert_eq!(got, expected);
        }
    }
}
