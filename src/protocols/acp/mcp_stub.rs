//! conform's own minimal MCP server, for the cases that give an agent a
//! stdio MCP server ("All Agents MUST support connecting to MCP servers via
//! stdio"): newline-delimited JSON-RPC on stdin and stdout, answering
//! `initialize`, `ping`, `tools/list` (one tool, `conform_echo`) and
//! `tools/call`, and writing every message it receives to its record so the
//! case can tell whether the agent connected. Sans-IO; `conform peer
//! --protocol acp` serves it when its script is [`SCRIPT`].

use crate::peer::Record;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::wire::{Codec, Refused};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Instant;

/// The script that makes `conform peer --protocol acp` this stub.
pub const SCRIPT: &str = r#"{"mcpStub": true}"#;

/// The MCP protocol version the stub answers when the agent asks for none.
const MCP_VERSION: &str = "2025-06-18";
/// The most one line may hold, and the most messages the record keeps.
const LINE_LIMIT: usize = 1024 * 1024;
const RECORDED: usize = 1000;

/// A script: whether it asks for this stub.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    #[serde(default)]
    pub mcp_stub: bool,
}

/// Whether the script file at `path` asks for the MCP stub.
pub fn is_stub_script(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Script>(&b).ok())
        .is_some_and(|s| s.mcp_stub)
}

pub struct Stub {
    record: Record,
    recorded: usize,
}

impl Stub {
    pub fn new(_: Script, record: Record) -> Stub {
        Stub {
            record,
            recorded: 0,
        }
    }

    /// The answer to one message, if it is a request.
    pub fn answer(message: &Value) -> Option<Value> {
        let id = message.get("id")?;
        let method = message.get("method").and_then(Value::as_str)?;
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => json!({
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!(MCP_VERSION)),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "conform-mcp-stub", "version": env!("CARGO_PKG_VERSION")},
            }),
            "ping" => json!({}),
            "tools/list" => json!({"tools": [{
                "name": "conform_echo",
                "description": "Returns the text it is given.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }]}),
            "tools/call" => json!({"content": [{
                "type": "text",
                "text": params.pointer("/arguments/text").and_then(Value::as_str).unwrap_or(""),
            }]}),
            _ => {
                return Some(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("Method not found: {method}")}}));
            }
        };
        Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

impl Served for Stub {
    fn codec(&self) -> Codec {
        Codec::Lines { limit: LINE_LIMIT }
    }

    fn handle(&mut self, line: &[u8], _: Instant) -> Vec<Out> {
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return vec![];
        };
        if self.recorded < RECORDED {
            self.recorded += 1;
            self.record.write(&message);
        }
        Stub::answer(&message)
            .map(Out::Message)
            .into_iter()
            .collect()
    }

    fn refused(&mut self, _: &Refused, _: Instant) -> (Vec<Out>, AfterRefusal) {
        (vec![], AfterRefusal::Go)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stub_answers_the_handshake_and_lists_one_tool() {
        let init = Stub::answer(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2024-11-05"}}))
        .unwrap();
        assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
        let list =
            Stub::answer(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).unwrap();
        assert_eq!(list["result"]["tools"][0]["name"], "conform_echo");
        assert!(
            Stub::answer(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .is_none()
        );
        let other = Stub::answer(&json!({"jsonrpc": "2.0", "id": 3, "method": "x"})).unwrap();
        assert_eq!(other["error"]["code"], -32601);
    }

    #[test]
    fn only_its_own_script_makes_the_stub() {
        let dir = tempfile::tempdir().unwrap();
        let stub = dir.path().join("s.json");
        std::fs::write(&stub, SCRIPT).unwrap();
        assert!(is_stub_script(&stub));
        let other = dir.path().join("o.json");
        std::fs::write(&other, r#"{"turn": []}"#).unwrap();
        assert!(!is_stub_script(&other));
    }
}
