//! conform's reference agent-socket client, the `builtin` target of
//! `--role client`: the client workload (docs/agent-socket.md, "Testing a client") run as
//! Vibe's `agent_socket.py` runs its requests. The reading of replies is
//! sans-IO; [`run`] adds the connections.

use super::table;
use super::validate::{self, DeclaredSandbox};
use crate::matcher;
use crate::transport::unix::Connector;
use crate::transport::unix::{self, ReadOutcome};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// The command the workload runs, its timeout, and the file it reads.
pub const WORKLOAD_COMMAND: &str = "printf conform";
pub const WORKLOAD_TIMEOUT_SECONDS: f64 = 5.0;
pub const WORKLOAD_FILE: &str = "conform.txt";
pub const WORKLOAD_MAX_BYTES: u64 = 1024;

/// The exit status of a run the server aborted (the source: "exits with code 4").
pub const EXIT_ABORTED: i32 = 4;
/// The exit status of a refused handshake (the workload contract; the source names none).
pub const EXIT_HANDSHAKE_REFUSED: i32 = 3;

/// Why a request gave no usable result.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// -32002: the server aborted the run.
    Aborted(String),
    /// -32001, with the limit the server says it applied.
    TimedOut(Option<f64>),
    /// Any other error.
    Error(String),
    /// A reply this client cannot use.
    Malformed(String),
    /// No connection, or it closed before the reply's newline.
    Connection(String),
    /// No reply within the wait.
    NoReply(f64),
}

/// A request as one compact line.
pub fn request_line(id: i64, method: &str, params: Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": id, "method": method, "params": params
    }))
    .expect("a Value serializes");
    line.push(b'\n');
    line
}

/// The result of the reply line to request `id`, read as `_call` reads it.
pub fn read_reply(line: &[u8], id: i64) -> Result<Value, Failure> {
    let Some(body) = line.strip_suffix(b"\n") else {
        return Err(Failure::Connection(
            "the server closed the connection before replying".into(),
        ));
    };
    let reply: Value = crate::jsonrpc::parse_json(body)
        .map_err(|e| Failure::Malformed(format!("not JSON: {e}")))?;
    if reply.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(Failure::Malformed("jsonrpc is not \"2.0\"".into()));
    }
    if let Some(error) = reply.get("error").filter(|e| !e.is_null()) {
        let violations = validate::shape_violations(error, table::ERROR_BODY, "error");
        if !violations.is_empty() {
            return Err(Failure::Malformed(violations.join("; ")));
        }
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        return Err(match error["code"].as_i64() {
            Some(c) if c == table::ABORT_ERROR.0 => Failure::Aborted(message),
            Some(c) if c == table::TIMEOUT_ERROR.0 => Failure::TimedOut(
                error
                    .get("data")
                    .and_then(|d| d.get("timeoutSeconds"))
                    .filter(|s| s.is_number())
                    .and_then(Value::as_f64)
                    .filter(|s| *s > 0.0),
            ),
            _ => Failure::Error(message),
        });
    }
    match (reply.get("id"), reply.get("result")) {
        (Some(got), Some(result)) if *got == json!(id) && !result.is_null() => Ok(result.clone()),
        _ => Err(Failure::Malformed(format!("no result for request {id}"))),
    }
}

/// What a handshake the client accepts declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub workspace: Option<String>,
    /// `namespace.name` of each tool, in declaration order.
    pub tools: Vec<String>,
    pub tool_timeout: f64,
}

/// Reads an `agent/initialize` result as `connect_agent_socket` does.
pub fn handshake(result: &Value) -> Result<Declared, String> {
    let violations = validate::shape_violations(result, table::INITIALIZE_RESULT, "result");
    if !violations.is_empty() {
        return Err(format!("a malformed reply: {}", violations.join("; ")));
    }
    if result["protocolVersion"] != json!(table::PROTOCOL_VERSION) {
        return Err(format!(
            "the server speaks protocol version {}; this client speaks {}",
            result["protocolVersion"],
            table::PROTOCOL_VERSION
        ));
    }
    let tools = validate::declared_tools(result);
    let refused = validate::declaration_violations(&tools);
    if !refused.is_empty() {
        return Err(format!(
            "the server declares a tool this client cannot offer: {}",
            refused
                .iter()
                .map(|(_, why)| why.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let workspace = match validate::declared_sandbox(result) {
        DeclaredSandbox::None => None,
        DeclaredSandbox::Pair { workspace, .. } if validate::is_absolute(&workspace) => {
            Some(workspace)
        }
        DeclaredSandbox::Pair { workspace, .. } => {
            return Err(format!(
                "the sandbox workspace {workspace:?} is not an absolute path"
            ));
        }
        DeclaredSandbox::Half | DeclaredSandbox::Malformed => {
            return Err("a malformed reply: workspace and python come together".into());
        }
    };
    Ok(Declared {
        workspace,
        tools: tools.into_iter().map(|t| t.full_name).collect(),
        tool_timeout: result
            .get("toolTimeoutSeconds")
            .and_then(Value::as_f64)
            .unwrap_or(table::CLIENT_TOOL_TIMEOUT_SECONDS),
    })
}

/// One request of the workload after the handshake.
#[derive(Debug, Clone)]
pub struct Planned {
    pub method: &'static str,
    pub params: Value,
    /// How long the client waits for the reply.
    pub wait: f64,
    /// The result's shape, checked once it arrives.
    pub shape: &'static [table::Field],
}

/// The workload a handshake leaves: a command and a file read in the
/// sandbox, if there is one, then one call of each tool.
pub fn plan(declared: &Declared) -> Vec<Planned> {
    let mut out = Vec::new();
    if let Some(ws) = &declared.workspace {
        out.push(Planned {
            method: "sandbox/execute",
            params: json!({"command": WORKLOAD_COMMAND, "cwd": ws,
                "timeout": WORKLOAD_TIMEOUT_SECONDS}),
            wait: WORKLOAD_TIMEOUT_SECONDS + table::EXECUTE_GRACE_SECONDS,
            shape: table::EXECUTE_RESULT,
        });
        out.push(Planned {
            method: "sandbox/readFile",
            params: json!({"path": format!("{}/{WORKLOAD_FILE}", ws.trim_end_matches('/')),
                "maxBytes": WORKLOAD_MAX_BYTES}),
            wait: table::REQUEST_TIMEOUT_SECONDS,
            shape: table::READ_FILE_RESULT,
        });
    }
    for (i, name) in declared.tools.iter().enumerate() {
        out.push(Planned {
            method: "tools/call",
            params: json!({"callbackId": format!("client_tool:conform-{}", i + 1),
                "name": name, "input": {}, "toolCallId": format!("call-conform-{}", i + 1),
                "caller": null}),
            wait: declared.tool_timeout,
            shape: table::TOOL_CALL_RESULT,
        });
    }
    out
}

/// Checks a result against the shape its method promises; `readFile`'s
/// content must be base64.
pub fn check_result(planned: &Planned, result: &Value) -> Result<(), Failure> {
    let violations = validate::shape_violations(result, planned.shape, "result");
    if !violations.is_empty() {
        return Err(Failure::Malformed(violations.join("; ")));
    }
    if let Some(content) = result.get("contentBase64").and_then(Value::as_str) {
        matcher::strict_base64(content)
            .map_err(|e| Failure::Malformed(format!("contentBase64 is not base64: {e}")))?;
    }
    Ok(())
}

/// Sends one request on a new connection and reads its reply line.
async fn exchange(socket: &Connector, line: &[u8], wait: f64) -> Result<Vec<u8>, Failure> {
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let mut stream = socket
        .connect(Duration::from_secs(5))
        .await
        .map_err(|e| Failure::Connection(format!("cannot connect: {e}")))?;
    unix::write_all(&mut stream, line, deadline)
        .await
        .map_err(|e| Failure::Connection(format!("cannot send: {e}")))?;
    match unix::read_line(&mut stream, table::REPLY_LIMIT_BYTES, deadline).await {
        ReadOutcome::Line { line, .. } => {
            let mut line = line.into_vec();
            line.push(b'\n');
            Ok(line)
        }
        ReadOutcome::Closed { partial } | ReadOutcome::Failed { partial, .. } => {
            Ok(partial.into_vec())
        }
        ReadOutcome::TooLong { limit } => Err(Failure::Malformed(format!(
            "the reply is longer than {limit} bytes"
        ))),
        ReadOutcome::TimedOut { .. } => Err(Failure::NoReply(wait)),
    }
    // The stream drops here: one request, one reply, closed.
}

/// Runs the workload against the server on `socket`; returns the exit
/// status and a log line per request for whoever reads the client's stderr.
pub async fn run(socket: &Connector) -> (i32, Vec<String>) {
    let mut log = Vec::new();
    let mut id = 0;
    let mut call = async |method: &str, params: Value, wait: f64| {
        id += 1;
        let line = request_line(id, method, params);
        let reply = exchange(socket, &line, wait).await?;
        read_reply(&reply, id)
    };
    let init = call(
        "agent/initialize",
        json!({"protocolVersion": table::PROTOCOL_VERSION,
            "vibeVersion": table::MODELLED_VIBE_VERSION}),
        table::REQUEST_TIMEOUT_SECONDS,
    )
    .await;
    let declared = match init.map_err(|f| match f {
        Failure::Aborted(m) => Err(m),
        other => Ok(format!("{other:?}")),
    }) {
        Ok(result) => match handshake(&result) {
            Ok(d) => d,
            Err(why) => {
                log.push(format!("handshake refused: {why}"));
                return (EXIT_HANDSHAKE_REFUSED, log);
            }
        },
        Err(Err(abort)) => {
            log.push(format!("the server aborted the run: {abort}"));
            return (EXIT_ABORTED, log);
        }
        Err(Ok(why)) => {
            log.push(format!("handshake failed: {why}"));
            return (EXIT_HANDSHAKE_REFUSED, log);
        }
    };
    for planned in plan(&declared) {
        let got = call(planned.method, planned.params.clone(), planned.wait)
            .await
            .and_then(|result| check_result(&planned, &result));
        match got {
            Ok(()) => log.push(format!("{}: ok", planned.method)),
            Err(Failure::Aborted(m)) => {
                log.push(format!("the server aborted the run: {m}"));
                return (EXIT_ABORTED, log);
            }
            // A failed step fails that step; the run goes on.
            Err(other) => log.push(format!("{} failed: {other:?}", planned.method)),
        }
    }
    (0, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_vibe_reads_them() {
        let ok = br#"{"jsonrpc":"2.0","id":3,"result":{"a":1},"extra":true}
"#;
        assert_eq!(read_reply(ok, 3), Ok(json!({"a": 1})));
        assert!(matches!(read_reply(ok, 4), Err(Failure::Malformed(_))));
        assert!(matches!(
            read_reply(&ok[..ok.len() - 1], 3),
            Err(Failure::Connection(_))
        ));
        let abort =
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32002,\"message\":\"m\"}}\n";
        assert_eq!(read_reply(abort, 1), Err(Failure::Aborted("m".into())));
        let timeout = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,\"message\":\"m\",\"data\":{\"timeoutSeconds\":true}}}\n";
        assert_eq!(read_reply(timeout, 1), Err(Failure::TimedOut(None)));
    }

    #[test]
    fn handshakes_vibe_refuses_are_refused() {
        let good = json!({"protocolVersion": 2, "workspace": "/w", "python": "p",
            "tools": [{"name": "t"}]});
        let d = handshake(&good).unwrap();
        assert_eq!(d.tools, vec!["client.t"]);
        assert_eq!(plan(&d).len(), 3);
        for bad in [
            json!({"protocolVersion": 3}),
            json!({"protocolVersion": 2, "workspace": "/w"}),
            json!({"protocolVersion": 2, "workspace": "w", "python": "p"}),
            json!({"protocolVersion": 2, "tools": [{"namespace": "vibe", "name": "x"}]}),
            json!({"protocolVersion": 2, "toolTimeoutSeconds": 0}),
        ] {
            assert!(handshake(&bad).is_err(), "{bad}");
        }
    }
}
