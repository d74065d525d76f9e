//! conform's own writes to its standard output and error. A reader that
//! went away (`conform list --json | head`) is not an error and not a panic:
//! `print!` panics on a closed pipe, so nothing of conform's uses it.

use std::io::Write;

/// Writes `text` to standard output; a closed pipe ends the writing quietly.
pub fn out(text: &str) {
    out_bytes(text.as_bytes());
}

/// Writes `bytes` to standard output; a closed pipe ends the writing quietly.
pub fn out_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes).and_then(|()| out.flush());
}

/// Writes `line` and a newline to standard error, whatever became of it.
pub fn err_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(line.as_bytes());
    let _ = err.write_all(b"\n");
}
