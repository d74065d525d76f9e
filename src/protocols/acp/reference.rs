//! conform's reference ACP agent (the `builtin` target), with a
//! deterministic fake model that follows the prompt script of
//! `corpus/acp/SCRIPT.md`. The agent is sans-IO: [`Agent::handle`] takes one
//! line and returns the messages to write, [`Agent::tick`] ends `wait` turns
//! whose time ran out; [`serve`] is the stdio loop around it.

use super::schema;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::wire::{Codec, Refused};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How long a `wait` turn (or an unanswered request) lasts at most.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Where a turn is.
#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// Waiting for `session/cancel` (the `wait` directive).
    Waiting,
    Read,
    Write,
    TerminalCreate,
    TerminalWait(String),
    TerminalOutput(String),
    TerminalRelease(String),
    Permission,
}

#[derive(Debug)]
struct Turn {
    prompt_id: Value,
    stage: Stage,
    /// The key of the request the turn waits on, if any.
    waiting_on: Option<String>,
    cancelled: bool,
    deadline: Instant,
    /// What the agent said in the turn, for the history.
    said: Vec<String>,
}

#[derive(Debug, Clone)]
struct SessionData {
    cwd: String,
    /// (true for the user, text) in order.
    history: Vec<(bool, String)>,
    mode: String,
    model: String,
}

#[derive(Debug, Default)]
pub struct Agent {
    client_capabilities: Value,
    sessions: BTreeMap<String, SessionData>,
    turns: HashMap<String, Turn>,
    /// Request key -> session whose turn sent it.
    requests: HashMap<String, String>,
    next_session: u64,
    next_request: u64,
    next_tool_call: u64,
}

fn message(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: &Value, code: i64, text: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text.into()}})
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": session, "update": update}})
}

fn chunk(session: &str, user: bool, text: &str) -> Value {
    let kind = if user {
        "user_message_chunk"
    } else {
        "agent_message_chunk"
    };
    update(
        session,
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}}),
    )
}

fn modes(current: &str) -> Value {
    json!({"currentModeId": current, "availableModes": [
        {"id": "ask", "name": "Ask", "description": "Answers without changing files"},
        {"id": "code", "name": "Code", "description": "Edits files"}]})
}

fn config_options(model: &str) -> Value {
    json!([{"id": "model", "name": "Model", "category": "model", "type": "select",
        "currentValue": model, "options": [
            {"value": "fast", "name": "Fast"}, {"value": "careful", "name": "Careful"}]}])
}

impl Agent {
    pub fn new() -> Agent {
        Agent {
            client_capabilities: json!({}),
            ..Agent::default()
        }
    }

    fn can(&self, pointer: &str) -> bool {
        super::table::advertised(&self.client_capabilities, pointer)
    }

    /// Handles one line from the client; returns the messages to write.
    pub fn handle(&mut self, line: &[u8], now: Instant) -> Vec<Value> {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return vec![error(&Value::Null, -32700, "Parse error")];
        };
        let Value::Object(o) = value else {
            return vec![error(
                &Value::Null,
                -32600,
                "Invalid Request: not an object",
            )];
        };
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let id = o.get("id").cloned().unwrap_or(Value::Null);
            return vec![error(
                &id,
                -32600,
                "Invalid Request: jsonrpc is not \"2.0\"",
            )];
        }
        let params = o.get("params").cloned().unwrap_or(Value::Null);
        match (o.get("method"), o.get("id")) {
            (Some(Value::String(m)), Some(id)) => self.request(m, id, params, now),
            (Some(Value::String(m)), None) => self.notification(m, &params, now),
            (None, Some(id)) if o.contains_key("result") || o.contains_key("error") => {
                let outcome = match o.get("error").filter(|e| !e.is_null()) {
                    Some(e) => Err(e.clone()),
                    None => Ok(o.get("result").cloned().unwrap_or(Value::Null)),
                };
                self.response(id, outcome, now)
            }
            _ => {
                let id = o.get("id").cloned().unwrap_or(Value::Null);
                vec![error(&id, -32600, "Invalid Request")]
            }
        }
    }

    fn request(&mut self, method: &str, id: &Value, params: Value, now: Instant) -> Vec<Value> {
        // Params are checked against the schema first: -32602 for anything off.
        if let Some(m) = schema::schema().method(method)
            && m.side == schema::Side::Agent
            && !m.is_notification()
        {
            let errors = schema::schema().violations(&m.params, &params);
            if !errors.is_empty() {
                return vec![error(
                    id,
                    -32602,
                    format!("Invalid params: {}", errors.join("; ")),
                )];
            }
        } else {
            return vec![error(id, -32601, format!("Method not found: {method}"))];
        }
        let session = params
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let known = session
            .as_ref()
            .is_some_and(|s| self.sessions.contains_key(s));
        let needs_session = !matches!(
            method,
            "initialize"
                | "authenticate"
                | "logout"
                | "session/new"
                | "session/list"
                | "session/delete"
        );
        if needs_session && !known {
            return vec![error(
                id,
                -32602,
                format!("Invalid params: unknown session {session:?}"),
            )];
        }
        let s = session.unwrap_or_default();
        match method {
            "initialize" => {
                self.client_capabilities = params
                    .get("clientCapabilities")
                    .cloned()
                    .unwrap_or(json!({}));
                // "If the Agent supports the requested version, it MUST respond
                // with the same version. Otherwise, the Agent MUST respond with
                // the latest version it supports." It supports 1 only.
                vec![message(
                    id,
                    json!({
                        "protocolVersion": super::table::PROTOCOL_VERSION,
                        "agentCapabilities": {
                            "loadSession": true,
                            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                            "mcpCapabilities": {"http": false, "sse": false},
                            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
                        },
                        "authMethods": [],
                        "agentInfo": {"name": "conform-reference-agent", "version": env!("CARGO_PKG_VERSION")},
                    }),
                )]
            }
            "authenticate" | "logout" => vec![message(id, json!({}))],
            "session/new" => {
                let cwd = params["cwd"].as_str().unwrap_or_default().to_owned();
                if !cwd.starts_with('/') {
                    return vec![error(
                        id,
                        -32602,
                        "Invalid params: cwd must be an absolute path",
                    )];
                }
                self.next_session += 1;
                let sid = format!("ref-{}-{}", std::process::id(), self.next_session);
                self.sessions.insert(
                    sid.clone(),
                    SessionData {
                        cwd,
                        history: vec![],
                        mode: "ask".into(),
                        model: "fast".into(),
                    },
                );
                vec![message(
                    id,
                    json!({"sessionId": sid, "modes": modes("ask"),
                    "configOptions": config_options("fast")}),
                )]
            }
            "session/load" => {
                let data = self.sessions[&s].clone();
                // "The Agent MUST replay the entire conversation to the Client
                // in the form of session/update notifications" and respond
                // only when all of it has been streamed.
                let mut out: Vec<Value> = data
                    .history
                    .iter()
                    .map(|(user, text)| chunk(&s, *user, text))
                    .collect();
                out.push(message(
                    id,
                    json!({"modes": modes(&data.mode),
                    "configOptions": config_options(&data.model)}),
                ));
                out
            }
            "session/resume" => {
                let data = &self.sessions[&s];
                vec![message(
                    id,
                    json!({"modes": modes(&data.mode),
                    "configOptions": config_options(&data.model)}),
                )]
            }
            "session/close" => {
                // "The Agent MUST cancel any ongoing work for that session as
                // if session/cancel had been called."
                let mut out = self.cancel(&s, now);
                out.push(message(id, json!({})));
                out
            }
            "session/delete" => {
                let mut out = self.cancel(&s, now);
                self.sessions.remove(&s);
                out.push(message(id, json!({})));
                out
            }
            "session/list" => {
                let cwd = params.get("cwd").and_then(Value::as_str);
                let sessions: Vec<Value> = self
                    .sessions
                    .iter()
                    .filter(|(_, d)| cwd.is_none_or(|c| c == d.cwd))
                    .map(|(sid, d)| json!({"sessionId": sid, "cwd": d.cwd}))
                    .collect();
                vec![message(id, json!({"sessions": sessions}))]
            }
            "session/set_mode" => {
                let mode = params["modeId"].as_str().unwrap_or_default();
                if mode != "ask" && mode != "code" {
                    return vec![error(
                        id,
                        -32602,
                        format!("Invalid params: no mode {mode:?}"),
                    )];
                }
                if let Some(d) = self.sessions.get_mut(&s) {
                    d.mode = mode.to_owned();
                }
                vec![
                    message(id, json!({})),
                    update(
                        &s,
                        json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}),
                    ),
                ]
            }
            "session/set_config_option" => {
                let value = params["value"].as_str().unwrap_or_default();
                if params["configId"] != "model" || !matches!(value, "fast" | "careful") {
                    return vec![error(id, -32602, "Invalid params: unknown option or value")];
                }
                if let Some(d) = self.sessions.get_mut(&s) {
                    d.model = value.to_owned();
                }
                vec![message(id, json!({"configOptions": config_options(value)}))]
            }
            "session/prompt" => self.prompt(id, &s, &params, now),
            _ => vec![error(id, -32601, format!("Method not found: {method}"))],
        }
    }

    fn notification(&mut self, method: &str, params: &Value, now: Instant) -> Vec<Value> {
        match method {
            "session/cancel" => match params.get("sessionId").and_then(Value::as_str) {
                Some(s) => self.cancel(&s.to_owned(), now),
                None => vec![],
            },
            // "MUST send one of these responses for the original request":
            // a cancelled turn answers with the `cancelled` stop reason.
            "$/cancel_request" => {
                let Some(target) = params.get("requestId") else {
                    return vec![];
                };
                let session = self
                    .turns
                    .iter()
                    .find(|(_, t)| &t.prompt_id == target)
                    .map(|(s, _)| s.clone());
                match session {
                    Some(s) => self.cancel(&s, now),
                    None => vec![],
                }
            }
            // Unknown notifications, extension ones included, are ignored.
            _ => vec![],
        }
    }

    /// Cancels the session's turn: at once when nothing is pending, else
    /// when the pending request is answered.
    fn cancel(&mut self, session: &String, now: Instant) -> Vec<Value> {
        let Some(turn) = self.turns.get_mut(session) else {
            return vec![];
        };
        turn.cancelled = true;
        if turn.stage == Stage::Waiting {
            return self.end(session, now);
        }
        vec![]
    }

    fn send_request(&mut self, session: &str, method: &str, params: Value) -> Value {
        self.next_request += 1;
        let id = json!(self.next_request);
        let key = super::monitor::id_key(&id);
        self.requests.insert(key.clone(), session.to_owned());
        if let Some(t) = self.turns.get_mut(session) {
            t.waiting_on = Some(key);
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    fn say(&mut self, session: &str, text: &str) -> Value {
        if let Some(t) = self.turns.get_mut(session) {
            t.said.push(text.to_owned());
        }
        chunk(session, false, text)
    }

    fn prompt(&mut self, id: &Value, s: &str, params: &Value, now: Instant) -> Vec<Value> {
        if self.turns.contains_key(s) {
            return vec![error(
                id,
                -32602,
                "Invalid params: a turn is already running on this session",
            )];
        }
        let blocks = params["prompt"].as_array().cloned().unwrap_or_default();
        for b in &blocks {
            let kind = b["type"].as_str().unwrap_or_default();
            if matches!(kind, "image" | "audio") {
                return vec![error(
                    id,
                    -32602,
                    format!("Invalid params: {kind} content is not supported"),
                )];
            }
        }
        let text: String = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        if let Some(d) = self.sessions.get_mut(s) {
            d.history.push((true, text.clone()));
        }
        self.turns.insert(
            s.to_owned(),
            Turn {
                prompt_id: id.clone(),
                stage: Stage::Waiting,
                waiting_on: None,
                cancelled: false,
                deadline: now + WAIT_LIMIT,
                said: vec![],
            },
        );
        let first = text.lines().next().unwrap_or_default();
        let (directive, rest) = match first.strip_prefix("conform: ") {
            Some(d) => d.split_once(' ').unwrap_or((d, "")),
            None => ("", ""),
        };
        let mut out = Vec::new();
        let stage = match directive {
            "echo" => {
                out.push(self.say(s, rest));
                None
            }
            "read" if self.can("/fs/readTextFile") => {
                out.push(self.send_request(
                    s,
                    "fs/read_text_file",
                    json!({"sessionId": s, "path": rest}),
                ));
                Some(Stage::Read)
            }
            "write" if self.can("/fs/writeTextFile") => {
                let (path, content) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push(self.send_request(
                    s,
                    "fs/write_text_file",
                    json!({"sessionId": s, "path": path, "content": content}),
                ));
                Some(Stage::Write)
            }
            "terminal" if self.can("/terminal") => {
                let mut words = rest.split(' ').filter(|w| !w.is_empty());
                let command = words.next().unwrap_or("true");
                let args: Vec<&str> = words.collect();
                out.push(self.send_request(
                    s,
                    "terminal/create",
                    json!({"sessionId": s, "command": command, "args": args}),
                ));
                Some(Stage::TerminalCreate)
            }
            "read" | "write" | "terminal" => {
                out.push(self.say(
                    s,
                    &format!("the client does not offer what `{directive}` needs"),
                ));
                None
            }
            "permission" => {
                self.next_tool_call += 1;
                let call = format!("call-{}", self.next_tool_call);
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call", "toolCallId": call,
                    "title": "Edit notes.txt", "kind": "edit", "status": "pending"}),
                ));
                out.push(self.send_request(
                    s,
                    "session/request_permission",
                    json!({
                    "sessionId": s, "toolCall": {"toolCallId": call},
                    "options": [
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
                ));
                Some(Stage::Permission)
            }
            "tool" => {
                self.next_tool_call += 1;
                let call = format!("call-{}", self.next_tool_call);
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call", "toolCallId": call,
                    "title": "Look at the workspace", "kind": "read", "status": "pending"}),
                ));
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                    "status": "in_progress"}),
                ));
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                    "status": "completed", "content": [{"type": "content",
                        "content": {"type": "text", "text": "looked"}}]}),
                ));
                None
            }
            "plan" => {
                out.push(update(
                    s,
                    json!({"sessionUpdate": "plan", "entries": [
                    {"content": "Read the notes", "priority": "high", "status": "in_progress"},
                    {"content": "Answer", "priority": "medium", "status": "pending"}]}),
                ));
                None
            }
            "wait" => Some(Stage::Waiting),
            _ => {
                out.push(self.say(s, "conform reference agent: nothing to do"));
                None
            }
        };
        match stage {
            Some(st) => {
                if let Some(t) = self.turns.get_mut(s) {
                    t.stage = st;
                }
            }
            None => out.extend(self.end(s, now)),
        }
        out
    }

    /// Ends the session's turn with its stop reason.
    fn end(&mut self, session: &str, _now: Instant) -> Vec<Value> {
        let Some(turn) = self.turns.remove(session) else {
            return vec![];
        };
        if let Some(d) = self.sessions.get_mut(session) {
            for said in turn.said {
                d.history.push((false, said));
            }
        }
        let reason = if turn.cancelled {
            "cancelled"
        } else {
            "end_turn"
        };
        vec![message(&turn.prompt_id, json!({"stopReason": reason}))]
    }

    fn response(&mut self, id: &Value, outcome: Result<Value, Value>, now: Instant) -> Vec<Value> {
        let key = super::monitor::id_key(id);
        let Some(s) = self.requests.remove(&key) else {
            return vec![];
        };
        let Some(turn) = self.turns.get_mut(&s) else {
            return vec![];
        };
        if turn.waiting_on.as_deref() != Some(key.as_str()) {
            return vec![];
        }
        turn.waiting_on = None;
        let cancelled = turn.cancelled;
        let stage = turn.stage.clone();
        let text_of = |o: &Result<Value, Value>, field: &str| match o {
            Ok(r) => r
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Err(e) => format!("the client answered an error: {e}"),
        };
        let mut out = Vec::new();
        match stage {
            Stage::Read => {
                if !cancelled {
                    let text = text_of(&outcome, "content");
                    out.push(self.say(&s, &text));
                }
            }
            Stage::Write => {
                if !cancelled {
                    out.push(self.say(&s, "written"));
                }
            }
            Stage::TerminalCreate => {
                if let Ok(r) = &outcome
                    && let Some(t) = r.get("terminalId").and_then(Value::as_str)
                {
                    let t = t.to_owned();
                    let (method, next) = if cancelled {
                        ("terminal/release", Stage::TerminalRelease(String::new()))
                    } else {
                        ("terminal/wait_for_exit", Stage::TerminalWait(t.clone()))
                    };
                    out.push(self.send_request(
                        &s,
                        method,
                        json!({"sessionId": s, "terminalId": t}),
                    ));
                    self.set_stage(&s, next, &t);
                    return out;
                }
                out.push(self.say(&s, &text_of(&outcome, "terminalId")));
            }
            Stage::TerminalWait(t) => {
                let (method, next) = if cancelled {
                    ("terminal/release", Stage::TerminalRelease(String::new()))
                } else {
                    ("terminal/output", Stage::TerminalOutput(t.clone()))
                };
                out.push(self.send_request(&s, method, json!({"sessionId": s, "terminalId": t})));
                self.set_stage(&s, next, &t);
                return out;
            }
            Stage::TerminalOutput(t) => {
                let text = text_of(&outcome, "output");
                out.push(self.send_request(
                    &s,
                    "terminal/release",
                    json!({"sessionId": s, "terminalId": t}),
                ));
                self.set_stage(&s, Stage::TerminalRelease(text), &t);
                return out;
            }
            Stage::TerminalRelease(text) => {
                if !cancelled {
                    out.push(self.say(&s, &text));
                }
            }
            Stage::Permission => {
                let chosen = outcome
                    .as_ref()
                    .ok()
                    .and_then(|r| r.pointer("/outcome/optionId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let call = format!("call-{}", self.next_tool_call);
                match chosen.as_deref() {
                    _ if cancelled => {}
                    Some("allow") => out.push(update(
                        &s,
                        json!({"sessionUpdate": "tool_call_update",
                        "toolCallId": call, "status": "completed"}),
                    )),
                    _ => out.push(update(
                        &s,
                        json!({"sessionUpdate": "tool_call_update",
                        "toolCallId": call, "status": "failed"}),
                    )),
                }
            }
            Stage::Waiting => {}
        }
        out.extend(self.end(&s, now));
        out
    }

    fn set_stage(&mut self, session: &str, stage: Stage, _terminal: &str) {
        if let Some(t) = self.turns.get_mut(session) {
            t.stage = stage;
        }
    }

    /// Ends turns whose time ran out; returns the messages to write.
    pub fn tick(&mut self, now: Instant) -> Vec<Value> {
        let due: Vec<String> = self
            .turns
            .iter()
            .filter(|(_, t)| now >= t.deadline)
            .map(|(s, _)| s.clone())
            .collect();
        let mut out = Vec::new();
        for s in due {
            out.extend(self.end(&s, now));
        }
        out
    }

    /// The earliest turn deadline, for the loop's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.turns.values().map(|t| t.deadline).min()
    }
}

/// The most of one line the reference reads; a longer one is answered as a
/// parse error and skipped.
const LINE_LIMIT: usize = 64 * 1024 * 1024;

/// The reference agent as a served peer.
impl Served for Agent {
    fn codec(&self) -> Codec {
        Codec::Lines { limit: LINE_LIMIT }
    }

    fn handle(&mut self, line: &[u8], now: Instant) -> Vec<Out> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return vec![];
        }
        Agent::handle(self, line, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }

    fn refused(&mut self, _: &Refused, _: Instant) -> (Vec<Out>, AfterRefusal) {
        let parse_error = error(&Value::Null, -32700, "Parse error: line too long");
        (vec![Out::Message(parse_error)], AfterRefusal::Go)
    }

    fn next_deadline(&self) -> Option<Instant> {
        Agent::next_deadline(self)
    }

    fn tick(&mut self, now: Instant) -> Vec<Out> {
        Agent::tick(self, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }
}

/// Serves the reference agent on `input` and `output` until the input ends.
pub async fn serve_on(
    input: impl tokio::io::AsyncRead + Unpin,
    output: impl tokio::io::AsyncWrite + Unpin,
) -> std::io::Result<()> {
    crate::transport::serve::serve(&mut Agent::new(), input, output).await
}

/// Serves the reference agent on this process's stdin and stdout until
/// stdin ends.
pub async fn serve() -> std::io::Result<()> {
    serve_on(tokio::io::stdin(), tokio::io::stdout()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(agent: &mut Agent, v: Value) -> Vec<Value> {
        agent.handle(v.to_string().as_bytes(), Instant::now())
    }

    fn started(caps: Value) -> (Agent, String) {
        let mut a = Agent::new();
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":caps}}),
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":1,"method":"session/new",
            "params":{"cwd":"/w","mcpServers":[]}}),
        );
        let s = out[0]["result"]["sessionId"].as_str().unwrap().to_owned();
        (a, s)
    }

    #[test]
    fn echo_answers_with_one_chunk_and_end_turn() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: echo hi"}]}}),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["params"]["update"]["content"]["text"], "hi");
        assert_eq!(out[1]["result"]["stopReason"], "end_turn");
    }

    #[test]
    fn read_without_the_capability_makes_no_request() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: read /w/notes.txt"}]}}),
        );
        assert!(
            out.iter()
                .all(|m| m.get("method") != Some(&json!("fs/read_text_file")))
        );
        assert_eq!(out.last().unwrap()["result"]["stopReason"], "end_turn");
    }

    #[test]
    fn cancel_during_a_pending_permission_ends_cancelled_after_the_answer() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: permission"}]}}),
        );
        let req = out
            .iter()
            .find(|m| m["method"] == "session/request_permission")
            .unwrap();
        assert!(
            send(
                &mut a,
                json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":s}})
            )
            .is_empty()
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":req["id"],"result":{"outcome":{"outcome":"cancelled"}}}),
        );
        assert_eq!(
            out,
            vec![json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}})]
        );
    }

    #[test]
    fn load_replays_the_history_before_its_response() {
        let (mut a, s) = started(json!({}));
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: echo one"}]}}),
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":3,"method":"session/load",
            "params":{"sessionId":s,"cwd":"/w","mcpServers":[]}}),
        );
        let kinds: Vec<&str> = out
            .iter()
            .map(|m| {
                m.pointer("/params/update/sessionUpdate")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
            })
            .collect();
        assert_eq!(
            kinds,
            vec!["user_message_chunk", "agent_message_chunk", "response"]
        );
    }

    #[test]
    fn malformed_input_gets_json_rpc_errors() {
        let mut a = Agent::new();
        assert_eq!(
            a.handle(b"{not json", Instant::now())[0]["error"]["code"],
            -32700
        );
        assert_eq!(
            send(&mut a, json!({"jsonrpc":"2.0","id":5,"method":"nope"}))[0]["error"]["code"],
            -32601
        );
        assert_eq!(
            send(
                &mut a,
                json!({"jsonrpc":"2.0","id":6,"method":"session/new","params":{}})
            )[0]["error"]["code"],
            -32602
        );
        assert!(send(&mut a, json!({"jsonrpc":"2.0","method":"_x/note"})).is_empty());
    }

    #[test]
    fn a_wait_turn_ends_when_its_time_runs_out() {
        let (mut a, s) = started(json!({}));
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: wait"}]}}),
        );
        assert!(a.tick(Instant::now()).is_empty());
        let out = a.tick(Instant::now() + WAIT_LIMIT);
        assert_eq!(out[0]["result"]["stopReason"], "end_turn");
    }
}
