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

    /// The protocol whose id this is.
    pub fn from_id(id: &str) -> Option<Protocol> {
        [Protocol::AgentSocket, Protocol::Cwx, Protocol::Acp]
            .into_iter()
            .find(|p| p.id() == id)
    }

    /// The requirement catalogue.
    pub fn catalogue(self) -> crate::requirements::Catalogue {
        match self {
            Protocol::AgentSocket => agent_socket::catalogue(),
            Protocol::Cwx => cwx::catalogue(),
            Protocol::Acp => acp::catalogue(),
        }
    }

    /// The requirements checked on every message of every case that runs,
    /// whichever case cites them: any case that ran exercised them.
    pub fn watched(self, role: &str) -> &'static [&'static str] {
        match self {
            Protocol::AgentSocket if role == "client" => {
                agent_socket::scripted::rules::EVERY_MESSAGE
            }
            Protocol::AgentSocket => &[],
            Protocol::Cwx if role == "core" => cwx::scripted::rules::EVERY_MESSAGE,
            Protocol::Cwx => cwx::driver::rules::EVERY_MESSAGE,
            Protocol::Acp if role == "client" => acp::scripted::rules::EVERY_MESSAGE,
            Protocol::Acp => acp::monitor::rules::EVERY_MESSAGE,
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
