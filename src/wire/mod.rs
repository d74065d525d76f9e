//! Framing layers, sans-IO: bytes in, messages (or typed framing errors) out.

pub mod frame;
pub mod line;

pub use line::{LineDecoder, LineError};
