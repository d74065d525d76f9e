//! The CWX1 extension-host protocol: conform plays the core and tests a host.
//! Its single source is the seed's `protocol.rs` (`../shared/specs/cwx/`).

pub mod corpus;
pub mod table;
pub mod validate;
