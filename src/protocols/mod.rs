//! The protocols conform tests.

pub mod acp;
pub mod agent_socket;
pub mod cwx;

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    #[value(name = "agent-socket")]
    AgentSocket,
    Cwx,
    Acp,
}

impl Protocol {
    pub fn id(self) -> &'static str {
        match self {
            Protocol::AgentSocket => "agent-socket",
            Protocol::Cwx => "cwx",
            Protocol::Acp => "acp",
        }
    }

    /// The roles conform can test, the default first (DESIGN.md).
    pub fn roles(self) -> &'static [&'static str] {
        match self {
            Protocol::AgentSocket => &["server", "client"],
            Protocol::Cwx => &["host", "core"],
            Protocol::Acp => &["agent", "client"],
        }
    }
}
