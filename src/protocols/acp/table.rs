//! What the schema does not say about methods: which capability gates each,
//! the error codes by name, the stop reasons, and conform's own bounds.
//! The method list itself, with directions and shapes, is the schema's
//! (`schema.rs`); a test checks every method here is one of its methods.

use crate::jsonrpc::ErrorCode;
use serde_json::Value;

/// ACP's own codes, besides JSON-RPC 2.0's (schema `ErrorCode`).
pub const AUTH_REQUIRED: ErrorCode = ErrorCode(-32000);
pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(-32002);
pub const REQUEST_CANCELLED: ErrorCode = ErrorCode(-32800);

/// The protocol version this suite tests.
pub const PROTOCOL_VERSION: u64 = 1;

/// The newest protocol version a release of ACP defines, as far as conform's
/// sources know: the repository's `docs/protocol/v1` and `v2` pages. The
/// schema's `ProtocolVersion` (uint16) admits any; a version above this is
/// one no release defines, so no agent can support it.
pub const NEWEST_DEFINED_VERSION: u64 = 2;

/// The release of the vendored schema (`corpus/acp/schema.json`).
pub const SCHEMA_RELEASE: &str = "1.21.0";

/// The most conform reads of one line the agent writes. ACP sets no limit;
/// this is conform's bound as a reader of untrusted output, and a line over
/// it is reported as conform unable to judge, not as the agent's fault.
pub const LINE_LIMIT: usize = 64 * 1024 * 1024;

/// A method that may be called only when the peer advertised a capability.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub method: &'static str,
    /// A JSON pointer into the advertised capabilities object.
    pub capability: &'static str,
    /// The catalogue requirement that states the gate.
    pub requirement: &'static str,
}

/// Methods the agent may call only when the client advertised the capability
/// in `initialize` (`clientCapabilities`).
pub const CLIENT_GATES: &[Gate] = &[
    Gate {
        method: "fs/read_text_file",
        capability: "/fs/readTextFile",
        requirement: "acp.fs.no-call-without-capability",
    },
    Gate {
        method: "fs/write_text_file",
        capability: "/fs/writeTextFile",
        requirement: "acp.fs.no-call-without-capability",
    },
    Gate {
        method: "terminal/create",
        capability: "/terminal",
        requirement: "acp.terminal.no-call-without-capability",
    },
    Gate {
        method: "terminal/output",
        capability: "/terminal",
        requirement: "acp.terminal.no-call-without-capability",
    },
    Gate {
        method: "terminal/release",
        capability: "/terminal",
        requirement: "acp.terminal.no-call-without-capability",
    },
    Gate {
        method: "terminal/wait_for_exit",
        capability: "/terminal",
        requirement: "acp.terminal.no-call-without-capability",
    },
    Gate {
        method: "terminal/kill",
        capability: "/terminal",
        requirement: "acp.terminal.no-call-without-capability",
    },
];

/// Methods the client may call only when the agent advertised the capability
/// (`agentCapabilities`); conform uses them to decide which cases apply.
pub const AGENT_GATES: &[Gate] = &[
    Gate {
        method: "session/load",
        capability: "/loadSession",
        requirement: "acp.load.client-no-load-without-capability",
    },
    Gate {
        method: "session/list",
        capability: "/sessionCapabilities/list",
        requirement: "acp.session.list-client-no-call-without-capability",
    },
    Gate {
        method: "session/resume",
        capability: "/sessionCapabilities/resume",
        requirement: "acp.session.resume-client-no-call-without-capability",
    },
    Gate {
        method: "session/close",
        capability: "/sessionCapabilities/close",
        requirement: "acp.session.close-client-no-call-without-capability",
    },
    Gate {
        method: "session/delete",
        capability: "/sessionCapabilities/delete",
        requirement: "acp.session.delete-client-no-call-without-capability",
    },
    Gate {
        method: "logout",
        capability: "/auth/logout",
        requirement: "acp.auth.no-logout-without-capability",
    },
];

/// Whether `capabilities` advertises the capability at `pointer`: `true`, or
/// an object (the schema's "supplying `{}` means supported"). Absent, null
/// and false do not.
pub fn advertised(capabilities: &Value, pointer: &str) -> bool {
    match capabilities.pointer(pointer) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Object(_)) => true,
        _ => false,
    }
}

/// The gate of `method` among `gates`, if it has one.
pub fn gate<'a>(gates: &'a [Gate], method: &str) -> Option<&'a Gate> {
    gates.iter().find(|g| g.method == method)
}

/// Session updates that belong to a prompt turn: after the turn's response,
/// none of these may arrive for that session until the next prompt. The rest
/// (commands, modes, config, session info, usage) may come at any time.
pub const TURN_UPDATES: &[&str] = &[
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_gated_method_is_a_method_of_the_schema_on_the_right_side() {
        let s = super::super::schema::schema();
        for g in CLIENT_GATES {
            let m = s.method(g.method).expect(g.method);
            assert_eq!(m.side, super::super::schema::Side::Client, "{}", g.method);
        }
        for g in AGENT_GATES {
            let m = s.method(g.method).expect(g.method);
            assert_eq!(m.side, super::super::schema::Side::Agent, "{}", g.method);
        }
        // Every terminal method of the schema is gated.
        for m in s.methods().filter(|m| m.name.starts_with("terminal/")) {
            assert!(gate(CLIENT_GATES, &m.name).is_some(), "{}", m.name);
        }
    }

    #[test]
    fn a_capability_is_advertised_by_true_or_an_object() {
        let caps = json!({"fs": {"readTextFile": true, "writeTextFile": false},
            "sessionCapabilities": {"list": {}, "close": null}});
        assert!(advertised(&caps, "/fs/readTextFile"));
        assert!(!advertised(&caps, "/fs/writeTextFile"));
        assert!(!advertised(&caps, "/terminal"));
        assert!(advertised(&caps, "/sessionCapabilities/list"));
        assert!(!advertised(&caps, "/sessionCapabilities/close"));
    }
}
