//! Ctrl-C and SIGTERM, the signals that end a run early, as one stream.
//! Listening replaces their default action (ending the process at once), so
//! conform can end its targets, write what it learned and remove its
//! temporary directories before it exits with 128 + the signal's number.

use crate::outcome::StopSignal;
use tokio::signal::unix::{Signal, SignalKind, signal};

pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    /// Starts listening; a signal that comes before [`Signals::recv`] is
    /// kept for it.
    pub fn listen() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.interrupt.recv() => StopSignal::Interrupt,
            _ = self.terminate.recv() => StopSignal::Terminate,
        }
    }
}
