//! conform as an ACP agent (`--role client`), sans-IO: the scripted agent
//! the client under test spawns (through `{agent}`), the record of every
//! line it exchanged, and the grading of the client from that record.
//!
//! A client case is data in `corpus/acp/client/cases/`: `config.turn` is
//! what the agent does during the prompt turn (requests to the client,
//! notifications, files it prepares or checks), and the steps are checks on
//! the client's answers. Every line of every case is also held to
//! [`rules::EVERY_MESSAGE`] and the capability rules.

use super::schema::{self, Side};
use crate::case::Case;
use crate::evidence::{Evidence, Kind};
use crate::matcher::{self, Vars};
use crate::outcome::SkipKind;
use crate::peer::{Check, ExitWant};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

pub const CASES_DIR: &str = "acp/client/cases";
/// The session id the scripted agent gives.
pub const SESSION_ID: &str = "conform-session-1";
/// The scripted agent's protocol version.
pub const PROTOCOL_VERSION: i64 = 1;

/// The requirements every case checks on every line.
pub mod rules {
    pub const STDIN_ONLY: &str = "acp.transport.stdin-only-messages";
    pub const UTF8: &str = "acp.transport.utf8-client";
    pub const NEWLINE: &str = "acp.transport.newline-delimited-client";
    pub const INITIALIZE_FIRST: &str = "acp.init.client-initializes-first";
    pub const SCHEMA: &str = "acp.schema.client-messages";
    pub const CWD_ABSOLUTE: &str = "acp.session.cwd-absolute";
    pub const SETUP_FIRST: &str = "acp.prompt.client-setup-first";
    pub const PROMPT_CAPABILITIES: &str = "acp.prompt.client-respect-prompt-capabilities";
    pub const NO_LOAD: &str = "acp.load.client-no-load-without-capability";
    pub const NO_RESUME: &str = "acp.session.resume-client-no-call-without-capability";
    pub const NO_CLOSE: &str = "acp.session.close-client-no-call-without-capability";
    pub const NO_LIST: &str = "acp.session.list-client-no-call-without-capability";
    pub const NO_DELETE: &str = "acp.session.delete-client-no-call-without-capability";
    pub const NO_LOGOUT: &str = "acp.auth.no-logout-without-capability";
    pub const OFFERED_OPTION: &str = "acp.tool.client-offered-option";

    /// Checked on every line of every case, whichever case cites them.
    pub const EVERY_MESSAGE: &[&str] = &[
        STDIN_ONLY,
        UTF8,
        NEWLINE,
        INITIALIZE_FIRST,
        SCHEMA,
        SETUP_FIRST,
    ];
}

/// Methods the scripted agent never advertises, and the rule a client breaks
/// by calling one.
const UNADVERTISED: &[(&str, &str)] = &[
    ("session/load", rules::NO_LOAD),
    ("session/resume", rules::NO_RESUME),
    ("session/close", rules::NO_CLOSE),
    ("session/list", rules::NO_LIST),
    ("session/delete", rules::NO_DELETE),
    ("logout", rules::NO_LOGOUT),
];

/// What the agent does during the turn, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawAction", into = "RawAction")]
pub enum Action {
    /// Send this request to the client and wait for its answer. The params
    /// are a template: `${session}`, `${cwd}`, `${terminal}` (the last
    /// terminal the client created).
    Request {
        method: String,
        params: Option<Value>,
    },
    /// Send this notification.
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// Write a file under the session's cwd before going on (the agent's own setup).
    WriteFile { name: String, content: String },
    /// Check that a file under the session's cwd holds `content`.
    CheckFile { name: String, content: String },
}

/// A turn action as the case file writes it: exactly one of `request`,
/// `notify`, `writeFile`, `checkFile`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    notify: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    params: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    write_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

impl TryFrom<RawAction> for Action {
    type Error = String;

    fn try_from(r: RawAction) -> Result<Action, String> {
        let file = |name: String, content: Option<String>| -> Result<(String, String), String> {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(format!("{name:?}: a file name in the session's cwd"));
            }
            content
                .map(|c| (name, c))
                .ok_or_else(|| "writeFile and checkFile take content, and only they do".into())
        };
        let files = r.write_file.is_some() || r.check_file.is_some();
        if r.content.is_some() && !files {
            return Err("writeFile and checkFile take content, and only they do".into());
        }
        if r.params.is_some() && files {
            return Err("params go with request and notify".into());
        }
        match (r.request, r.notify, r.write_file, r.check_file) {
            (Some(method), None, None, None) => Ok(Action::Request {
                method,
                params: r.params,
            }),
            (None, Some(method), None, None) => Ok(Action::Notify {
                method,
                params: r.params,
            }),
            (None, None, Some(name), None) => {
                let (name, content) = file(name, r.content)?;
                Ok(Action::WriteFile { name, content })
            }
            (None, None, None, Some(name)) => {
                let (name, content) = file(name, r.content)?;
                Ok(Action::CheckFile { name, content })
            }
            _ => Err("a turn action is one of request, notify, writeFile, checkFile".into()),
        }
    }
}

impl From<Action> for RawAction {
    fn from(a: Action) -> RawAction {
        match a {
            Action::Request { method, params } => RawAction {
                request: Some(method),
                params,
                ..RawAction::default()
            },
            Action::Notify { method, params } => RawAction {
                notify: Some(method),
                params,
                ..RawAction::default()
            },
            Action::WriteFile { name, content } => RawAction {
                write_file: Some(name),
                content: Some(content),
                ..RawAction::default()
            },
            Action::CheckFile { name, content } => RawAction {
                check_file: Some(name),
                content: Some(content),
                ..RawAction::default()
            },
        }
    }
}

/// A client case's `config`: the scripted agent's script.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub turn: Vec<Action>,
    /// Seconds the client has for its whole workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<f64>,
}

impl crate::peer::PeerScript for Script {
    const MAX_DEADLINE: f64 = 600.0;

    fn deadline(&self) -> Option<f64> {
        self.deadline
    }
}

/// One check of a case.
pub type ClientStep = crate::peer::PeerStep<ClientCheck>;

/// What a client case checks the client did.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientCheck {
    /// The client answered the agent's `nth` (from 1) request of `method`
    /// as `want` says, within `within_ms` of the request when given.
    Answered {
        method: String,
        nth: usize,
        want: AnswerWant,
        within_ms: Option<u64>,
    },
    /// The client sent this method (a precondition of the scenario).
    Sends(String),
    /// The agent's `checkFile` of this name held.
    File(String),
    /// The client's exit status.
    Exit(ExitWant),
}

/// The answer an `answered` check wants.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerWant {
    /// A result matching `pattern`, whose `output` is, when `truncation` is
    /// given, the last bytes of its text that fit in its limit, cut at a
    /// character boundary, with `truncated` true.
    Result {
        pattern: Option<Value>,
        truncation: Option<(String, usize)>,
    },
    /// An error.
    Error,
    /// Anything: a result or an error, with the request's id.
    Any,
}

/// A client step as the case file writes it: exactly one of `answered`,
/// `sends`, `file`, `exit` (`exitZero` is `exit: "zero"`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawClientStep {
    #[serde(default)]
    answered: Option<String>,
    #[serde(default = "one")]
    nth: usize,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: bool,
    #[serde(default)]
    any_answer: bool,
    #[serde(default)]
    truncation_of: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    within_ms: Option<u64>,
    #[serde(default)]
    sends: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    exit: Option<ExitWant>,
    #[serde(default)]
    exit_zero: bool,
    #[serde(default)]
    info: bool,
}

fn one() -> usize {
    1
}

impl crate::peer::CheckKeys for ClientCheck {
    type Raw = RawClientStep;
    const ONE_OF: &'static str = "answered, sends, file, exit";

    fn read(r: RawClientStep) -> Result<(Vec<ClientCheck>, bool), String> {
        let exit = match (r.exit, r.exit_zero) {
            (Some(_), true) => return Err("exit and exitZero say the same: give one".into()),
            (Some(w), false) => Some(w),
            (None, true) => Some(ExitWant::Named(crate::peer::ExitClass::Zero)),
            (None, false) => None,
        };
        let answer_parts = r.result.is_some()
            || r.error
            || r.any_answer
            || r.truncation_of.is_some()
            || r.within_ms.is_some();
        if answer_parts && r.answered.is_none() {
            return Err("result, error and truncationOf go with answered".into());
        }
        if r.truncation_of.is_some() != r.limit.is_some() {
            return Err("truncationOf takes limit".into());
        }
        if r.nth == 0 {
            return Err("nth counts from 1".into());
        }
        let mut checks = Vec::new();
        if let Some(method) = r.answered {
            let want = match (r.error, r.any_answer) {
                (true, false) if r.result.is_none() && r.truncation_of.is_none() => {
                    AnswerWant::Error
                }
                (false, true) if r.result.is_none() && r.truncation_of.is_none() => AnswerWant::Any,
                (false, false) => AnswerWant::Result {
                    pattern: r.result,
                    truncation: r.truncation_of.zip(r.limit),
                },
                _ => {
                    return Err("an answer is a result (with its pattern), an error, or any".into());
                }
            };
            checks.push(ClientCheck::Answered {
                method,
                nth: r.nth,
                want,
                within_ms: r.within_ms,
            });
        }
        checks.extend(r.sends.map(ClientCheck::Sends));
        checks.extend(r.file.map(ClientCheck::File));
        checks.extend(exit.map(ClientCheck::Exit));
        Ok((checks, r.info))
    }
}

/// One event of the scripted agent's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Event {
    /// A line from the client (lossy text, and whether it was UTF-8).
    In { t_ms: u64, line: String, utf8: bool },
    /// A message the agent wrote.
    Out { t_ms: u64, line: String },
    /// Bytes the client wrote with no newline after them before it closed
    /// its output: how many, and the first of them (lossy text).
    Cut {
        t_ms: u64,
        bytes: usize,
        head: String,
    },
    /// A `checkFile` and how it went.
    File {
        t_ms: u64,
        name: String,
        ok: bool,
        detail: String,
    },
}

/// The scripted agent: answers the client's requests, runs the turn.
pub struct ScriptedAgent {
    script: Script,
    next_id: i64,
    cwd: Option<String>,
    /// The prompt request being served, and the next turn action.
    prompt: Option<Value>,
    next_action: usize,
    /// The agent's request awaiting the client's answer, by id.
    waiting: Option<(i64, String)>,
    cancelled: bool,
    terminal: Option<String>,
}

impl ScriptedAgent {
    pub fn new(script: Script) -> ScriptedAgent {
        ScriptedAgent {
            script,
            next_id: 0,
            cwd: None,
            prompt: None,
            next_action: 0,
            waiting: None,
            cancelled: false,
            terminal: None,
        }
    }

    /// Handles one line from the client; returns the messages to write and
    /// any file checks made.
    pub fn handle(&mut self, line: &[u8]) -> (Vec<Value>, Vec<(String, bool, String)>) {
        let mut out = Vec::new();
        let mut files = Vec::new();
        let Ok(msg) = crate::jsonrpc::parse_json(line) else {
            return (out, files);
        };
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").cloned();
        match (method, id) {
            (Some(m), Some(id)) => match m {
                "initialize" => out.push(respond(
                    &id,
                    json!({
                        "protocolVersion": PROTOCOL_VERSION,
                        "agentCapabilities": {"loadSession": false, "promptCapabilities": {}},
                        "authMethods": [],
                        "agentInfo": {"name": "conform-scripted-agent", "version": env!("CARGO_PKG_VERSION")}
                    }),
                )),
                "session/new" => {
                    self.cwd = msg
                        .pointer("/params/cwd")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    out.push(respond(&id, json!({"sessionId": SESSION_ID})));
                }
                "session/prompt" if self.prompt.is_none() => {
                    self.prompt = Some(id);
                    self.next_action = 0;
                    self.cancelled = false;
                    self.advance(&mut out, &mut files);
                }
                _ => out.push(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("Method not found: {m}")}})),
            },
            (Some("session/cancel"), None) => {
                self.cancelled = true;
                if self.waiting.is_none() {
                    self.finish(&mut out);
                }
            }
            (None, Some(id)) => {
                if let Some((want, _)) = &self.waiting
                    && id == json!(want)
                {
                    let method = self.waiting.take().map(|w| w.1).unwrap_or_default();
                    if method == "terminal/create"
                        && let Some(t) = msg.pointer("/result/terminalId").and_then(Value::as_str)
                    {
                        self.terminal = Some(t.to_owned());
                    }
                    if self.cancelled {
                        self.finish(&mut out);
                    } else {
                        self.advance(&mut out, &mut files);
                    }
                }
            }
            _ => {}
        }
        (out, files)
    }

    fn vars(&self) -> Vars {
        let mut v = Vars::default();
        v.set("session", json!(SESSION_ID));
        v.set("cwd", json!(self.cwd.clone().unwrap_or_default()));
        v.set("terminal", json!(self.terminal.clone().unwrap_or_default()));
        v
    }

    /// Runs turn actions until one waits for the client, or the turn ends.
    fn advance(&mut self, out: &mut Vec<Value>, files: &mut Vec<(String, bool, String)>) {
        while let Some(action) = self.script.turn.get(self.next_action).cloned() {
            self.next_action += 1;
            let expand = |p: Option<&Value>| {
                p.map(|p| matcher::expand(p, &self.vars()).unwrap_or_else(|_| p.clone()))
                    .unwrap_or_else(|| json!({}))
            };
            let cwd = self.cwd.clone().unwrap_or_default();
            match &action {
                Action::Request { method, params } => {
                    let params = expand(params.as_ref());
                    self.next_id += 1;
                    out.push(json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}));
                    self.waiting = Some((self.next_id, method.clone()));
                    return;
                }
                Action::Notify { method, params } => {
                    let params = expand(params.as_ref());
                    out.push(json!({"jsonrpc": "2.0", "method": method, "params": params}));
                }
                Action::WriteFile { name, content } => {
                    let _ = std::fs::write(Path::new(&cwd).join(name), content);
                }
                Action::CheckFile { name, content } => {
                    let (ok, detail) = match std::fs::read(Path::new(&cwd).join(name)) {
                        Ok(b) if b == content.as_bytes() => (true, "holds what was written".into()),
                        Ok(b) => (
                            false,
                            format!(
                                "holds {:?}, not {content:?}",
                                matcher::truncate(&String::from_utf8_lossy(&b), 200)
                            ),
                        ),
                        Err(e) => (false, format!("cannot be read: {e}")),
                    };
                    files.push((name.clone(), ok, detail));
                }
            }
        }
        self.finish(out);
    }

    /// Ends the turn: the prompt's response.
    fn finish(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.prompt.take() {
            let reason = if self.cancelled {
                "cancelled"
            } else {
                "end_turn"
            };
            out.push(respond(&id, json!({"stopReason": reason})));
        }
    }
}

fn respond(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// How the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEnd {
    Exited { code: Option<i32>, ms: u64 },
    Stopped { ms: u64 },
}

/// What the record says, read once.
struct Read {
    /// Client messages in order (None for a line that is not JSON).
    from_client: Vec<Option<Value>>,
    /// The agent's requests: (id, method, params).
    agent_requests: Vec<(Value, String, Value)>,
    /// The client's answers by the agent's request id key.
    answers: BTreeMap<String, Value>,
    /// When the agent asked (by id key) and the client answered.
    asked_at: BTreeMap<String, u64>,
    answered_at: BTreeMap<String, u64>,
    capabilities: Value,
}

fn read(events: &[Event]) -> Read {
    let mut r = Read {
        from_client: vec![],
        agent_requests: vec![],
        answers: BTreeMap::new(),
        asked_at: BTreeMap::new(),
        answered_at: BTreeMap::new(),
        capabilities: Value::Null,
    };
    for e in events {
        match e {
            Event::In { line, t_ms, .. } => {
                let v = crate::jsonrpc::parse_json(line.as_bytes()).ok();
                if let Some(v) = &v {
                    if v.get("method") == Some(&json!("initialize")) && r.capabilities.is_null() {
                        r.capabilities = v
                            .pointer("/params/clientCapabilities")
                            .cloned()
                            .unwrap_or(json!({}));
                    }
                    if v.get("method").is_none()
                        && let Some(id) = v.get("id")
                    {
                        r.answers.insert(id.to_string(), v.clone());
                        r.answered_at.entry(id.to_string()).or_insert(*t_ms);
                    }
                }
                r.from_client.push(v);
            }
            Event::Out { line, t_ms } => {
                if let Ok(v) = crate::jsonrpc::parse_json(line.as_bytes())
                    && let (Some(id), Some(m)) =
                        (v.get("id"), v.get("method").and_then(Value::as_str))
                {
                    r.asked_at.insert(id.to_string(), *t_ms);
                    r.agent_requests.push((
                        id.clone(),
                        m.to_owned(),
                        v.get("params").cloned().unwrap_or(Value::Null),
                    ));
                }
            }
            Event::File { .. } | Event::Cut { .. } => {}
        }
    }
    r
}

/// The capability a turn method needs of the client, as a JSON pointer
/// into `clientCapabilities`.
pub fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "fs/read_text_file" => Some("/fs/readTextFile"),
        "fs/write_text_file" => Some("/fs/writeTextFile"),
        m if m.starts_with("terminal/") => Some("/terminal"),
        _ => None,
    }
}

/// What the client did in `case`, as evidence for the grader.
pub fn evidence(case: &Case<super::ClientCases>, events: &[Event], end: ClientEnd) -> Evidence {
    let r = read(events);
    // A turn needing a capability the client did not advertise is not applicable.
    for a in &case.config.turn {
        if let Action::Request { method, .. } = a
            && let Some(cap) = capability_of(method)
            && r.capabilities.pointer(cap) != Some(&json!(true))
            && !r.capabilities.is_null()
        {
            let mut ev = Evidence::default();
            ev.skip(
                format!(
                    "the client did not advertise clientCapabilities{} (true), which {method} needs",
                    cap.replace('/', ".")
                ),
                SkipKind::Declared,
            );
            return ev;
        }
    }
    let (broken, notes) = every_message(events, &r);
    let broken = broken
        .into_iter()
        .map(|(rule, why)| {
            let kind = kind_of(&rule);
            (rule, kind, why)
        })
        .collect();
    let mut ev = crate::peer::evidence(
        broken,
        &case.steps,
        |s| s.info,
        |s| check_step(&s.check, events, &r, end),
        "client",
        describe(&r, end),
    );
    ev.notes.extend(notes);
    ev
}

fn check_step(check: &ClientCheck, events: &[Event], r: &Read, end: ClientEnd) -> Check {
    match check {
        ClientCheck::Sends(m) => {
            let sent = r
                .from_client
                .iter()
                .flatten()
                .any(|v| v.get("method") == Some(&json!(m)));
            if sent {
                Check::Holds
            } else {
                Check::Unseen(format!("the client never sent {m}"))
            }
        }
        ClientCheck::File(name) => match events.iter().find_map(|e| match e {
            Event::File {
                name: n,
                ok,
                detail,
                ..
            } if n == name => Some((*ok, detail.clone())),
            _ => None,
        }) {
            Some((true, _)) => Check::Holds,
            Some((false, d)) => {
                Check::Broken(Kind::Rule, format!("{name} in the session's cwd {d}"))
            }
            None => Check::Unseen(format!("the turn never reached the check of {name}")),
        },
        ClientCheck::Exit(want) => match end {
            ClientEnd::Exited { code, .. } if want.holds(code) => Check::Holds,
            other => Check::Broken(
                Kind::Process,
                format!(
                    "expected exit status {want}, the client {}",
                    end_text(other)
                ),
            ),
        },
        ClientCheck::Answered {
            method,
            nth,
            want,
            within_ms,
        } => answered(method, *nth, want, *within_ms, r),
    }
}

/// Whether the client answered the agent's `nth` request of `m` as `want` says.
fn answered(m: &str, nth: usize, want: &AnswerWant, within_ms: Option<u64>, r: &Read) -> Check {
    let Some((id, _, _)) = r
        .agent_requests
        .iter()
        .filter(|(_, method, _)| method == m)
        .nth(nth - 1)
    else {
        return Check::Unseen(format!("the turn never sent {m} (number {nth})"));
    };
    let Some(answer) = r.answers.get(&id.to_string()) else {
        return Check::Broken(
            Kind::Missing,
            format!("the client never answered {m} (id {id})"),
        );
    };
    if let Some(within) = within_ms {
        let asked = r.asked_at.get(&id.to_string()).copied().unwrap_or(0);
        let answered = r
            .answered_at
            .get(&id.to_string())
            .copied()
            .unwrap_or(u64::MAX);
        if answered.saturating_sub(asked) > within {
            return Check::Broken(
                Kind::Rule,
                format!(
                    "the client answered {m} {} ms after the request, not within {within} ms",
                    answered.saturating_sub(asked)
                ),
            );
        }
    }
    let (pattern, truncation) = match want {
        AnswerWant::Any => return Check::Holds,
        AnswerWant::Error => {
            return match answer.get("error") {
                Some(e) if e.is_object() => Check::Holds,
                _ => Check::Broken(
                    Kind::WrongKind,
                    format!(
                        "{m} was answered with {}, not an error",
                        matcher::brief(answer)
                    ),
                ),
            };
        }
        AnswerWant::Result {
            pattern,
            truncation,
        } => (pattern, truncation),
    };
    let Some(result) = answer.get("result") else {
        return Check::Broken(
            Kind::WrongKind,
            format!(
                "{m} was answered with an error: {}",
                matcher::brief(answer.get("error").unwrap_or(&Value::Null))
            ),
        );
    };
    if let Some(want) = pattern {
        let mut errors = Vec::new();
        matcher::match_value(
            want,
            Some(result),
            "result",
            &mut Vars::default(),
            &mut errors,
        );
        if !errors.is_empty() {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Check::Broken(Kind::Mismatch, format!("{m}: {}", errors.join("; ")));
        }
    }
    if let Some((full, limit)) = truncation {
        let limit = *limit;
        let output = result.get("output").and_then(Value::as_str).unwrap_or("");
        let mut problems = Vec::new();
        if output.len() > limit {
            problems.push(format!(
                "output is {} bytes, over the limit of {limit}",
                output.len()
            ));
        }
        if !full.ends_with(output) {
            problems.push(format!(
                "output {output:?} is not the end of the command's output: truncation is from the beginning"
            ));
        }
        let best = best_suffix(full, limit);
        if full.ends_with(output) && output.len() < best.len() {
            problems.push(format!(
                "output {output:?} keeps less than it may: {best:?} fits the limit at a character boundary"
            ));
        }
        if full.len() > limit && result.get("truncated") != Some(&json!(true)) {
            problems.push("truncated is not true".into());
        }
        if !problems.is_empty() {
            return Check::Broken(Kind::Rule, format!("{m}: {}", problems.join("; ")));
        }
    }
    Check::Holds
}

/// The longest end of `full` that fits in `limit` bytes and starts on a character.
pub fn best_suffix(full: &str, limit: usize) -> &str {
    let mut start = full.len().saturating_sub(limit);
    while !full.is_char_boundary(start) {
        start += 1;
    }
    &full[start..]
}

fn end_text(end: ClientEnd) -> String {
    match end {
        ClientEnd::Exited { code: Some(c), ms } => {
            format!("exited with status {c} after {:.1} s", ms as f64 / 1000.0)
        }
        ClientEnd::Exited { ms, .. } => format!("was killed after {:.1} s", ms as f64 / 1000.0),
        ClientEnd::Stopped { ms } => format!(
            "was still running after {:.1} s and conform stopped it",
            ms as f64 / 1000.0
        ),
    }
}

fn describe(r: &Read, end: ClientEnd) -> String {
    let sent: Vec<String> = r
        .from_client
        .iter()
        .map(|m| match m {
            None => "(a line that is not JSON)".to_owned(),
            Some(v) => match v.get("method").and_then(Value::as_str) {
                Some(m) => m.to_owned(),
                None if v.get("error").is_some() => format!("an error for {}", v["id"]),
                None => format!("a result for {}", v["id"]),
            },
        })
        .collect();
    format!(
        "it sent {}; it {}",
        if sent.is_empty() {
            "nothing".into()
        } else {
            sent.join(", ")
        },
        end_text(end)
    )
}

/// The rules every line of every case is held to, as (requirement, why).
/// What kind of deviation breaking each every-message rule is.
fn kind_of(rule: &str) -> Kind {
    match rule {
        rules::UTF8 | rules::STDIN_ONLY => Kind::Malformed,
        rules::SCHEMA => Kind::Shape,
        rules::NEWLINE => Kind::Framing,
        rules::NO_LOAD
        | rules::NO_RESUME
        | rules::NO_CLOSE
        | rules::NO_LIST
        | rules::NO_DELETE
        | rules::NO_LOGOUT
        | rules::PROMPT_CAPABILITIES => Kind::Unexpected,
        _ => Kind::Rule,
    }
}

/// The rules every message broke, and notes on readings where the sources
/// disagree (information, never a failure).
fn every_message(
    events: &[Event],
    r: &Read,
) -> (Vec<(String, String)>, std::collections::BTreeSet<String>) {
    let mut out = Vec::new();
    let mut notes = std::collections::BTreeSet::new();
    let schema = schema::schema();
    let mut initialized = false;
    let mut session_ready = false;
    let agent_ids: BTreeMap<String, String> = r
        .agent_requests
        .iter()
        .map(|(id, m, _)| (id.to_string(), m.clone()))
        .collect();
    let mut n = 0;
    for e in events {
        match e {
            Event::Out { line, .. } => {
                if let Ok(v) = crate::jsonrpc::parse_json(line.as_bytes())
                    && v.get("id").is_some()
                    && v.get("result")
                        .is_some_and(|res| res.get("sessionId").is_some())
                {
                    session_ready = true;
                }
            }
            Event::Cut { bytes, head, .. } => out.push((
                rules::NEWLINE.into(),
                format!(
                    "the client wrote {bytes} bytes with no newline after them, then closed its output: no message ends there ({})",
                    matcher::truncate(head, 120)
                ),
            )),
            Event::In { line, utf8, .. } => {
                n += 1;
                if !utf8 {
                    out.push((rules::UTF8.into(), format!("line {n} is not UTF-8")));
                }
                let Ok(v) = crate::jsonrpc::parse_json(line.as_bytes()) else {
                    out.push((
                        rules::STDIN_ONLY.into(),
                        format!(
                            "line {n} is not a JSON-RPC message: {}",
                            matcher::truncate(line, 120)
                        ),
                    ));
                    continue;
                };
                if v.get("jsonrpc") != Some(&json!("2.0")) {
                    out.push((
                        rules::STDIN_ONLY.into(),
                        format!("line {n} has no jsonrpc \"2.0\""),
                    ));
                }
                match v.get("method").and_then(Value::as_str) {
                    Some(m) => {
                        if !initialized && m != "initialize" {
                            out.push((
                                rules::INITIALIZE_FIRST.into(),
                                format!("the client sent {m} before initialize"),
                            ));
                        }
                        if m == "initialize" {
                            initialized = true;
                        }
                        if m == "session/prompt" && !session_ready {
                            out.push((
                                rules::SETUP_FIRST.into(),
                                "the client sent session/prompt before a session was set up".into(),
                            ));
                        }
                        if let Some((_, rule)) = UNADVERTISED.iter().find(|(x, _)| *x == m) {
                            out.push((
                                (*rule).into(),
                                format!("the client called {m}, which the agent did not advertise"),
                            ));
                        }
                        let params = v.get("params").cloned().unwrap_or(Value::Null);
                        if m == "session/new"
                            && let Some(cwd) = params.get("cwd").and_then(Value::as_str)
                            && !cwd.starts_with('/')
                        {
                            out.push((
                                rules::CWD_ABSOLUTE.into(),
                                format!("session/new's cwd {cwd:?} is not absolute"),
                            ));
                        }
                        if m == "session/prompt" {
                            for block in params
                                .get("prompt")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                            {
                                let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
                                if !matches!(kind, "text" | "resource_link") {
                                    out.push((
                                        rules::PROMPT_CAPABILITIES.into(),
                                        format!(
                                            "the prompt holds a {kind:?} block; the agent advertised no prompt capability"
                                        ),
                                    ));
                                }
                            }
                        }
                        if let Some(spec) = schema.method(m).filter(|s| s.side == Side::Agent) {
                            let v2 = schema.violations(&spec.params, &params);
                            if !v2.is_empty() {
                                out.push((
                                    rules::SCHEMA.into(),
                                    format!("{m} params: {}", v2.join("; ")),
                                ));
                            }
                        }
                    }
                    None => {
                        // An answer to one of the agent's requests.
                        let key = v.get("id").map(Value::to_string).unwrap_or_default();
                        if let (Some("session/request_permission"), Some(chosen)) = (
                            agent_ids.get(&key).map(String::as_str),
                            v.pointer("/result/outcome/optionId"),
                        ) && v.pointer("/result/outcome/outcome") == Some(&json!("selected"))
                        {
                            let offered = r
                                .agent_requests
                                .iter()
                                .find(|(id, _, _)| *id.to_string() == *key)
                                .and_then(|(_, _, p)| p.get("options"))
                                .and_then(Value::as_array)
                                .map(|o| {
                                    o.iter()
                                        .filter_map(|x| x.get("optionId"))
                                        .cloned()
                                        .collect::<Vec<_>>()
                                })
                                .unwrap_or_default();
                            if !offered.contains(chosen) {
                                out.push((
                                    rules::OFFERED_OPTION.into(),
                                    format!("the client selected {chosen}, which the request did not offer"),
                                ));
                            }
                        }
                        if let (Some(m), Some(result)) = (agent_ids.get(&key), v.get("result"))
                            && let Some(def) = schema
                                .method(m)
                                .filter(|s| s.side == Side::Client)
                                .and_then(|s| s.result.clone())
                        {
                            match schema.judge(&def, result) {
                                schema::Judged::Valid => {}
                                schema::Judged::Broken(v2) => out.push((
                                    rules::SCHEMA.into(),
                                    format!("the answer to {m}: {}", v2.join("; ")),
                                )),
                                schema::Judged::PageReading(note) => {
                                    notes.insert(format!("the answer to {m}: {note}"));
                                }
                            }
                        }
                    }
                }
            }
            Event::File { .. } => {}
        }
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 26 item 14: file-system.mdx shows `"result": null` as the
    /// answer to fs/write_text_file, the schema an object. Both pass; the
    /// disagreement is a note naming both. A result neither shows fails.
    #[test]
    fn a_write_answered_as_the_page_shows_passes_with_a_note() {
        let events = |answer: &str| {
            vec![
                Event::In {
                    t_ms: 0,
                    line: r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"writeTextFile":true}}}}"#.into(),
                    utf8: true,
                },
                Event::Out {
                    t_ms: 1,
                    line: r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{}}}"#.into(),
                },
                Event::Out {
                    t_ms: 2,
                    line: r#"{"jsonrpc":"2.0","id":7,"method":"fs/write_text_file","params":{"sessionId":"s","path":"/w/a","content":"x"}}"#.into(),
                },
                Event::In {
                    t_ms: 3,
                    line: format!(r#"{{"jsonrpc":"2.0","id":7,"result":{answer}}}"#),
                    utf8: true,
                },
            ]
        };
        let schema_rules = |answer: &str| {
            let ev = events(answer);
            let (broken, notes) = every_message(&ev, &read(&ev));
            let rules: Vec<String> = broken
                .into_iter()
                .filter(|(r, _)| r == rules::SCHEMA)
                .map(|(_, why)| why)
                .collect();
            (rules, notes)
        };
        let (broken, notes) = schema_rules("null");
        assert!(broken.is_empty(), "{broken:?}");
        let note = notes.iter().next().expect("a note");
        assert!(note.contains("file-system.mdx") && note.contains("WriteTextFileResponse"));
        let (broken, notes) = schema_rules("{}");
        assert!(
            broken.is_empty() && notes.is_empty(),
            "{broken:?} {notes:?}"
        );
        let (broken, _) = schema_rules("7");
        assert_eq!(broken.len(), 1, "{broken:?}");
    }

    #[test]
    fn the_best_suffix_starts_on_a_character() {
        assert_eq!(best_suffix("aé€", 4), "€");
        assert_eq!(best_suffix("aé€", 5), "é€");
        assert_eq!(best_suffix("abc", 10), "abc");
    }

    #[test]
    fn the_agent_answers_and_runs_its_turn_in_order() {
        let script = Script {
            turn: vec![Action::Request {
                method: "fs/read_text_file".into(),
                params: Some(json!({"sessionId": "${session}", "path": "${cwd}/x"})),
            }],
            deadline: None,
        };
        let mut a = ScriptedAgent::new(script);
        let (out, _) = a.handle(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#,
        );
        assert_eq!(out[0]["result"]["protocolVersion"], 1);
        a.handle(br#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}"#);
        let (out, _) = a.handle(br#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"conform-session-1","prompt":[]}}"#);
        assert_eq!(out[0]["method"], "fs/read_text_file");
        assert_eq!(out[0]["params"]["path"], "/w/x");
        let (out, _) = a.handle(br#"{"jsonrpc":"2.0","id":1,"result":{"content":""}}"#);
        assert_eq!(out[0]["id"], 2);
        assert_eq!(out[0]["result"]["stopReason"], "end_turn");
    }

    #[test]
    fn a_turn_action_round_trips_and_its_parts_must_fit() {
        let a: Action =
            serde_json::from_value(json!({"writeFile": "x.txt", "content": "hi"})).unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"writeFile": "x.txt", "content": "hi"})
        );
        for bad in [
            json!({"writeFile": "x.txt"}),
            json!({"request": "m", "notify": "n"}),
            json!({"request": "m", "content": "c"}),
            json!({"checkFile": "../x", "content": "c"}),
        ] {
            assert!(
                serde_json::from_value::<Action>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
