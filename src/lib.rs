//! conform: a conformance test harness and fuzzer for agent JSON-RPC protocols.
//!
//! Layers, bottom up: `wire` (framing, sans-IO), `jsonrpc` (envelopes),
//! `protocols::*::table` (each protocol written once), validators and the
//! case model (sans-IO), `transport` (the only tokio I/O), the runner, the
//! reports and the command line.

pub mod baseline;
pub mod case;
pub mod certify;
pub mod cli;
pub mod console;
pub mod corpus;
pub mod drive;
pub mod error;
pub mod evidence;
pub mod fuzz;
pub mod interrupt;
pub mod jsonrpc;
pub mod keep;
pub mod matcher;
pub mod outcome;
pub mod peer;
pub mod progress;
pub mod protocols;
pub mod redact;
pub mod report;
pub mod requirements;
pub mod run;
pub mod runner;
pub mod step;
pub mod suite;
pub mod target;
pub mod transport;
pub mod wire;
