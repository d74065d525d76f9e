//! The protocols conform tests, one folder each: its table, validators,
//! step dialects, drivers, references and fuzzer. Their suites are listed
//! in [`crate::suite::SUITES`].

pub mod acp;
pub mod agent_socket;
pub mod cwx;
