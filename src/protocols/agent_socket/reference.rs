//! conform's reference agent-socket server: the `builtin` target.
//!
//! [`handle_line`] is the sans-IO part: a request line in, a reply or an
//! action out. [`serve`] is the transport: a Unix listener, one task per
//! connection, commands in their own process groups.

use super::table::{self, METHODS};
use super::validate;
use crate::jsonrpc::ErrorCode;
use crate::transport::process;
use crate::transport::unix::Connector;
use crate::wire::{LineDecoder, LineError};
use base64::Engine;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixListener;

/// The longest request line the reference reads: Vibe's own reply limit.
pub const REQUEST_LIMIT_BYTES: usize = table::REPLY_LIMIT_BYTES;
/// The most of each output stream a command may produce; more is an error,
/// never a silently cut result.
pub const OUTPUT_LIMIT_BYTES: usize = 8 * 1024 * 1024;
/// How long a connection may take to send its request line.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What the reference serves.
#[derive(Debug, Clone)]
pub struct Config {
    pub workspace: PathBuf,
    pub python: String,
}

/// The tools the reference declares.
pub fn tools() -> Value {
    json!([
        {"namespace": "conform", "name": "echo", "description": "Returns its input as its output.",
         "inputSchema": {"type": "object"}, "outputSchema": null, "modelAccess": "both"},
        {"name": "fail", "description": "Always answers with a tool error.",
         "inputSchema": {"type": "object"}, "outputSchema": null}
    ])
}

/// What to do with one request line.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this reply.
    Reply(Value),
    /// Run a command, then reply to `id`.
    Execute {
        id: Value,
        command: String,
        cwd: String,
        timeout: Option<f64>,
    },
    /// Read a file, then reply to `id`.
    ReadFile {
        id: Value,
        path: String,
        max_bytes: u64,
    },
    /// A notification: no reply.
    Nothing,
}

fn error(id: Value, code: ErrorCode, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message.into()}})
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// Reads one request line; sans-IO.
pub fn handle_line(config: &Config, line: &[u8]) -> Action {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        // "If there was an error in detecting the id in the Request Object (e.g. Parse error/Invalid Request), it MUST be Null."
        return Action::Reply(error(Value::Null, ErrorCode::PARSE_ERROR, "Parse error"));
    };
    let id = match value.get("id") {
        None => None,
        Some(id @ (Value::Number(_) | Value::String(_) | Value::Null)) => Some(id.clone()),
        Some(_) => {
            return Action::Reply(error(
                Value::Null,
                ErrorCode::INVALID_REQUEST,
                "id must be a number, a string or null",
            ));
        }
    };
    let (Some("2.0"), Some(method)) = (
        value.get("jsonrpc").and_then(Value::as_str),
        value.get("method").and_then(Value::as_str),
    ) else {
        return Action::Reply(error(
            id.unwrap_or(Value::Null),
            ErrorCode::INVALID_REQUEST,
            "not a JSON-RPC 2.0 request",
        ));
    };
    // "A Notification is a Request object without an "id" member. ... The Server MUST NOT reply to a Notification".
    let Some(id) = id else { return Action::Nothing };
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let Some(spec) = METHODS.iter().find(|m| m.name == method) else {
        return Action::Reply(error(
            id,
            ErrorCode::METHOD_NOT_FOUND,
            format!("no method {method}"),
        ));
    };
    let problems = validate::shape_violations(&params, spec.params, "params");
    if !problems.is_empty() {
        return Action::Reply(error(id, ErrorCode::INVALID_PARAMS, problems.join("; ")));
    }
    let str_of = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match method {
        "agent/initialize" => Action::Reply(result(
            id,
            json!({
                "protocolVersion": table::PROTOCOL_VERSION,
                "workspace": config.workspace.display().to_string(),
                "python": config.python,
                "tools": tools(),
                "toolTimeoutSeconds": null,
                "instructions": null,
            }),
        )),
        "sandbox/execute" => {
            let timeout = params.get("timeout").and_then(Value::as_f64);
            if timeout.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
                return Action::Reply(error(
                    id,
                    ErrorCode::INVALID_PARAMS,
                    "timeout must be a non-negative number",
                ));
            }
            Action::Execute {
                id,
                command: str_of("command"),
                cwd: str_of("cwd"),
                timeout,
            }
        }
        "sandbox/readFile" => match params.get("maxBytes").and_then(Value::as_u64) {
            Some(max_bytes) => Action::ReadFile {
                id,
                path: str_of("path"),
                max_bytes,
            },
            None => Action::Reply(error(
                id,
                ErrorCode::INVALID_PARAMS,
                "maxBytes must be a non-negative integer",
            )),
        },
        "tools/call" => Action::Reply(tool_call(
            id,
            &str_of("name"),
            params.get("input").cloned().unwrap_or(Value::Null),
        )),
        _ => Action::Reply(error(
            id,
            ErrorCode::METHOD_NOT_FOUND,
            format!("no method {method}"),
        )),
    }
}

fn tool_call(id: Value, name: &str, input: Value) -> Value {
    match name {
        "conform.echo" => result(
            id,
            json!({"output": input, "annotations": {"reference": true}, "error": null}),
        ),
        "client.fail" => result(
            id,
            json!({"output": null, "annotations": {}, "error": {"message": "fail always fails", "code": "reference_fail", "details": null}}),
        ),
        other => error(id, ErrorCode::INVALID_PARAMS, format!("no tool {other}")),
    }
}

/// A sandbox path as the sandbox's shell reads it: "A path starting with
/// ``~`` is kept as written, for the sandbox to expand against its own
/// home." The reference's home is its `HOME`, which its commands inherit.
pub fn expand_home(path: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    match (path.strip_prefix('~'), home()) {
        (Some(""), Some(h)) => h,
        (Some(rest), Some(h)) if rest.starts_with('/') => h.join(&rest[1..]),
        _ => PathBuf::from(path),
    }
}

/// Reads at most `max_bytes` of a regular file; None when there is none.
pub fn read_file(path: &str, max_bytes: u64) -> std::io::Result<Option<Vec<u8>>> {
    let p = &expand_home(path);
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => {}
        // "null when there is no such file": a directory is not a regular file either.
        Ok(_) => return Ok(None),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.kind() == std::io::ErrorKind::NotADirectory =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    let mut out = Vec::new();
    use std::io::Read;
    std::fs::File::open(p)?
        .take(max_bytes)
        .read_to_end(&mut out)?;
    Ok(Some(out))
}

/// Process groups of commands still running, killed when the server stops.
#[derive(Debug, Default, Clone)]
pub struct Running(Arc<Mutex<HashSet<i32>>>);

impl Running {
    fn add(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(pgid);
        }
    }
    fn remove(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.remove(&pgid);
        }
    }
    /// Kills every command still running.
    pub fn kill_all(&self) {
        if let Ok(s) = self.0.lock() {
            for &pgid in s.iter() {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

async fn read_capped(mut r: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut over = false;
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if out.len() + n > cap {
            over = true;
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    (out, over)
}

/// How long a command with `timeout: null` may run: without bound, as far
/// as a timer goes.
const UNBOUNDED: Duration = Duration::from_secs(365 * 86400);

/// Runs a command as the sandbox: `sh -c` in `cwd`, in its own process
/// group, started through `transport::process` as every process conform starts.
pub async fn execute(
    running: &Running,
    id: Value,
    command: &str,
    cwd: &str,
    timeout: Option<f64>,
) -> Value {
    if !Path::new(cwd).is_dir() {
        // Like a shell that cannot enter its directory: a result, not a sandbox failure.
        return result(
            id,
            json!({"exitCode": 2, "stdout": "", "stderr": format!("sh: cannot cd to {cwd}: no such directory\n")}),
        );
    }
    let mut child = match process::spawn_in(
        process::Program::Shell(command),
        Some(Path::new(cwd)),
        &[],
        process::Stdio3::Output,
    ) {
        Ok(c) => c,
        Err(e) => {
            return error(
                id,
                ErrorCode::INTERNAL_ERROR,
                format!("cannot start the command: {e}"),
            );
        }
    };
    let pgid = child.pid();
    running.add(pgid);
    let (Some(stdout), Some(stderr)) = (child.stdout_pipe.take(), child.stderr_pipe.take()) else {
        return error(
            id,
            ErrorCode::INTERNAL_ERROR,
            "the command has no output pipes",
        );
    };
    let out = tokio::spawn(read_capped(stdout, OUTPUT_LIMIT_BYTES));
    let err = tokio::spawn(read_capped(stderr, OUTPUT_LIMIT_BYTES));
    let kill = || {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    };
    // `timeout: null`: no limit of the reference's own (Vibe bounds its wait).
    let within = timeout.map_or(UNBOUNDED, Duration::from_secs_f64);
    let reply = match child.wait_for_exit(within).await {
        None => {
            kill();
            let _ = child.wait_for_exit(Duration::from_secs(5)).await;
            // "A request that outlives its timeout is answered with the JSON-RPC error code -32001."
            error(
                id,
                table::TIMEOUT_ERROR,
                format!(
                    "the command outlived its timeout of {}s",
                    timeout.unwrap_or_default()
                ),
            )
        }
        Some(status) => {
            // The group may hold background processes that keep the pipes open.
            kill();
            let (stdout, o_over) = out.await.unwrap_or_default();
            let (stderr, e_over) = err.await.unwrap_or_default();
            if o_over || e_over {
                error(
                    id,
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "the command's output passed the reference's {OUTPUT_LIMIT_BYTES}-byte limit"
                    ),
                )
            } else {
                use std::os::unix::process::ExitStatusExt;
                let code = status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                result(
                    id,
                    json!({"exitCode": code, "stdout": String::from_utf8_lossy(&stdout), "stderr": String::from_utf8_lossy(&stderr)}),
                )
            }
        }
    };
    running.remove(pgid);
    reply
}

/// Serves connections until the listener task is aborted.
pub async fn serve(listener: UnixListener, config: Arc<Config>, running: Running) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let config = config.clone();
        let running = running.clone();
        tokio::spawn(async move {
            let _ = connection(stream, &config, &running).await;
        });
    }
}

/// The reference server in this process, reached over in-memory pipes:
/// each connection served as one on the socket is.
pub fn memory(config: Arc<Config>, running: Running) -> Connector {
    Connector::Memory(Arc::new(move |stream| {
        let (config, running) = (config.clone(), running.clone());
        tokio::spawn(async move {
            let _ = connection(stream, &config, &running).await;
        });
    }))
}

async fn connection(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    config: &Config,
    running: &Running,
) -> std::io::Result<()> {
    let mut decoder = LineDecoder::new(REQUEST_LIMIT_BYTES);
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let line = loop {
        buf.clear();
        let n = match tokio::time::timeout(REQUEST_READ_TIMEOUT, stream.read_buf(&mut buf)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        match decoder.feed(&buf[..n]).1 {
            Some(Ok(line)) => break line,
            Some(Err(LineError::TooLong { limit })) => {
                let reply = error(
                    Value::Null,
                    ErrorCode::INVALID_REQUEST,
                    format!("request line over {limit} bytes"),
                );
                return write_reply(&mut stream, &reply).await;
            }
            None => {}
        }
    };
    let reply = match handle_line(config, &line) {
        Action::Nothing => return Ok(()),
        Action::Reply(r) => r,
        Action::Execute {
            id,
            command,
            cwd,
            timeout,
        } => execute(running, id, &command, &cwd, timeout).await,
        Action::ReadFile {
            id,
            path,
            max_bytes,
        } => match read_file(&path, max_bytes) {
            Ok(content) => result(
                id,
                json!({"contentBase64": content.map(|c| base64::engine::general_purpose::STANDARD.encode(c))}),
            ),
            Err(e) => error(
                id,
                ErrorCode::INTERNAL_ERROR,
                format!("cannot read {path}: {e}"),
            ),
        },
    };
    write_reply(&mut stream, &reply).await
}

async fn write_reply(stream: &mut (impl AsyncWrite + Unpin), reply: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    stream.shutdown().await
}

/// The interpreter the reference declares: `python3` from PATH.
pub fn find_python() -> String {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("python3"))
                .find(|p| p.is_file())
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/bin/python3".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            workspace: "/w".into(),
            python: "/usr/bin/python3".into(),
        }
    }

    #[test]
    fn malformed_lines_get_a_parse_error_with_a_null_id() {
        let Action::Reply(r) = handle_line(&cfg(), b"{not json") else {
            panic!()
        };
        assert_eq!(r["error"]["code"], -32700);
        assert_eq!(r["id"], Value::Null);
    }

    #[test]
    fn unknown_methods_and_bad_params_get_their_codes() {
        let Action::Reply(r) = handle_line(
            &cfg(),
            br#"{"jsonrpc":"2.0","id":"x","method":"nope","params":{}}"#,
        ) else {
            panic!()
        };
        assert_eq!(r["error"]["code"], -32601);
        assert_eq!(r["id"], "x");
        let Action::Reply(r) = handle_line(
            &cfg(),
            br#"{"jsonrpc":"2.0","id":1,"method":"sandbox/readFile","params":{"path":1}}"#,
        ) else {
            panic!()
        };
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn notifications_get_no_reply() {
        assert_eq!(
            handle_line(
                &cfg(),
                br#"{"jsonrpc":"2.0","method":"agent/initialize","params":{}}"#
            ),
            Action::Nothing
        );
    }

    #[test]
    fn the_handshake_declares_both_halves_validly() {
        let Action::Reply(r) = handle_line(&cfg(), br#"{"jsonrpc":"2.0","id":1,"method":"agent/initialize","params":{"protocolVersion":2,"vibeVersion":"3"}}"#) else { panic!() };
        let res = &r["result"];
        assert!(validate::shape_violations(res, table::INITIALIZE_RESULT, "result").is_empty());
        assert!(validate::declaration_violations(&validate::declared_tools(res)).is_empty());
    }
}
