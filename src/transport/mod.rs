//! Everything that touches sockets, pipes and processes. Protocol logic above
//! this layer is sans-IO; every wait here is bounded by a deadline.

pub mod budget;
pub mod process;
pub mod serve;
pub mod stdio;
pub mod unix;
