//! How much of the targets' output conform holds at once, across every case
//! that runs.
//!
//! A message of up to [`SMALL`] bytes is read freely: a reader holds a few
//! of them at most (the one it is reading and its short queue). A longer
//! message is *big*, and the whole process holds one big message at a time:
//! the reader whose unfinished message grows past [`SMALL`] takes the one
//! big-message permit, the finished message keeps it until it is dropped,
//! and another reader that needs it waits. So however many cases run
//! (`-j`) and whatever the targets write, conform holds one message of a
//! limit (64 MiB) and a few small ones per reader.
//!
//! A wait for the permit is conform's, not the target's: a reader records
//! it in its [`Stall`], and the deadline of whoever waits on that reader is
//! moved by as much. A reader never waits holding the permit, so two
//! readers cannot wait for each other. But a case may keep one big reply
//! (a connection it reads in the background) while it reads another: so a
//! reader waits at most [`MAX_WAIT`], then reads that message without the
//! permit. Nothing hangs and no deadline is charged for conform's memory;
//! the bound gives way only to big messages kept longer than that.

use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The longest message a reader holds without the big-message permit.
pub const SMALL: usize = 1 << 20;

/// The longest a reader waits for the permit before it reads its message
/// without it.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

static BIG: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(1)));

/// A whole message read from a target, holding the big-message permit if
/// it is big. Dropping it gives the permit back.
pub struct Held {
    bytes: Vec<u8>,
    _big: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// A message outside the budget: one conform wrote itself, or a test's.
    pub fn unmetered(bytes: Vec<u8>) -> Held {
        Held { bytes, _big: None }
    }

    /// The bytes, out of the budget's sight: for a caller that keeps no
    /// more than one message and drops it soon.
    pub fn into_vec(self) -> Vec<u8> {
        self.bytes
    }
}

impl Deref for Held {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for Held {
    /// Its length and start: a message may be 64 MiB.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let start = &self.bytes[..self.bytes.len().min(64)];
        write!(
            f,
            "Held({} bytes: {:?})",
            self.bytes.len(),
            String::from_utf8_lossy(start)
        )
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Held {}

/// How long a reader has waited for the big-message permit.
#[derive(Debug, Default)]
pub struct Stall(Mutex<(Option<Instant>, Duration)>);

impl Stall {
    /// All the reader's waiting so far, the one under way included.
    pub fn waited(&self, now: Instant) -> Duration {
        let Ok(s) = self.0.lock() else {
            return Duration::ZERO;
        };
        s.1 + s
            .0
            .map(|since| now.saturating_duration_since(since))
            .unwrap_or_default()
    }

    fn begin(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.0 = Some(Instant::now());
        }
    }

    fn end(&self) {
        if let Ok(mut s) = self.0.lock() {
            if let Some(since) = s.0.take() {
                s.1 += since.elapsed();
            }
        }
    }
}

/// One reader's share of the budget: the permit while its unfinished
/// message is big.
#[derive(Debug, Default)]
pub struct Meter {
    big: Option<OwnedSemaphorePermit>,
    /// The reader gave up waiting for the permit for its current message.
    unmetered: bool,
    stall: Arc<Stall>,
}

impl Meter {
    pub fn new() -> Meter {
        Meter::default()
    }

    /// The record of this reader's waits, for whoever waits on the reader.
    pub fn stall(&self) -> Arc<Stall> {
        self.stall.clone()
    }

    /// Before the reader holds `pending` bytes of an unfinished message:
    /// takes the permit if they are more than [`SMALL`], waiting for it (at
    /// most [`MAX_WAIT`]) if another message has it.
    pub async fn hold(&mut self, pending: usize) {
        if pending <= SMALL || self.big.is_some() || self.unmetered {
            return;
        }
        let permit = match BIG.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                self.stall.begin();
                let p = tokio::time::timeout(MAX_WAIT, BIG.clone().acquire_owned()).await;
                self.stall.end();
                p.ok().and_then(Result::ok)
            }
        };
        self.unmetered = permit.is_none();
        self.big = permit;
    }

    /// The reader now holds `pending` bytes of an unfinished message (after
    /// a message was finished, or dropped over its limit): the permit goes
    /// back when they are no longer big.
    pub fn settle(&mut self, pending: usize) {
        if pending <= SMALL {
            self.big = None;
            self.unmetered = false;
        }
    }

    /// A finished message, with the permit if the reader holds it.
    pub fn finish(&mut self, bytes: Vec<u8>) -> Held {
        self.unmetered = false;
        Held {
            bytes,
            _big: self.big.take(),
        }
    }
}

/// Moves `until` by the time `stall`'s reader spent waiting for the permit
/// since `seen` (what [`Stall::waited`] said when the wait began); returns
/// the new deadline, or `None` when the reader did not wait.
pub fn extend(until: Instant, stall: &Stall, seen: &mut Duration) -> Option<Instant> {
    let waited = stall.waited(Instant::now());
    let more = waited.saturating_sub(*seen);
    *seen = waited;
    (!more.is_zero()).then(|| until + more)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The permit is one for the whole process: one test uses it, on a
    // paused clock that jumps ahead whenever every task waits.
    #[tokio::test(start_paused = true)]
    async fn one_big_message_is_held_at_a_time_and_a_long_wait_gives_up() {
        let mut a = Meter::new();
        let mut b = Meter::new();
        // Small messages need no permit.
        a.hold(SMALL).await;
        b.hold(SMALL).await;
        let small = a.finish(vec![0; 10]);
        assert!(small._big.is_none());

        // a grows past SMALL and takes the permit; b must wait for it.
        a.hold(SMALL + 1).await;
        let big = a.finish(vec![1; 4]);
        assert!(big._big.is_some());
        let waiting = tokio::spawn(async move {
            b.hold(SMALL + 1).await;
            b
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "b took a permit a message holds");
        drop(big);
        let mut b = waiting.await.unwrap();
        assert!(
            b.big.is_some(),
            "b gets the permit once the message is dropped"
        );
        let waited = b.stall.waited(Instant::now());
        assert!(waited >= Duration::from_millis(50), "waited {waited:?}");

        // A message dropped over its limit gives the permit back.
        b.settle(0);
        assert!(b.big.is_none());

        // A case keeps a big reply (the permit) while it reads another: the
        // reader waits MAX_WAIT, then reads without the permit.
        a.hold(SMALL + 1).await;
        let kept = a.finish(vec![0; 4]);
        let mut reader = Meter::new();
        reader.hold(SMALL + 1).await;
        assert!(reader.big.is_none() && reader.unmetered);
        assert_eq!(reader.stall.waited(Instant::now()), MAX_WAIT);
        // Once it gave up, the rest of that message does not wait again.
        reader.hold(SMALL * 2).await;
        assert_eq!(reader.stall.waited(Instant::now()), MAX_WAIT);
        assert!(reader.finish(vec![1])._big.is_none());
        assert!(!reader.unmetered);
        drop(kept);
        // The next message takes the permit again.
        reader.hold(SMALL + 1).await;
        assert!(reader.big.is_some());
    }

    #[test]
    fn a_deadline_moves_by_the_readers_wait_only() {
        let stall = Stall::default();
        *stall.0.lock().unwrap() = (None, Duration::from_secs(2));
        let until = Instant::now();
        let mut seen = Duration::from_secs(2);
        assert_eq!(extend(until, &stall, &mut seen), None);
        stall.0.lock().unwrap().1 = Duration::from_secs(5);
        assert_eq!(
            extend(until, &stall, &mut seen),
            Some(until + Duration::from_secs(3))
        );
        assert_eq!(seen, Duration::from_secs(5));
    }
}
