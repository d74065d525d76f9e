//! conform as the agent-socket server (`--role client`), sans-IO: the
//! language of client cases (what the scripted server answers, what the
//! client must then do), the record of what a client did, and its grading.
//!
//! A client case is data in `corpus/agent-socket/client/cases/`: its
//! `config.serve` overrides, method by method, the answers of
//! `corpus/agent-socket/client/serve.json`, and its steps are checks on what
//! the client did with them. Every case also checks every request the client
//! sent against the rules of [`rules::EVERY_MESSAGE`].

use super::table;
use super::validate::{self, DeclaredSandbox};
use crate::case::Case;
use crate::evidence::{Evidence, Kind};
use crate::jsonrpc;
use crate::matcher::{self, Vars};
use crate::peer::{Check, ExitWant};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Where the default answers live in the corpus.
pub const SERVE_DEFAULTS: &str = "agent-socket/client/serve.json";
/// Where the client cases live in the corpus.
pub const CASES_DIR: &str = "agent-socket/client/cases";

/// How late past its limit a client may close a connection it gave up on:
/// scheduling on a shared machine, not leniency about the limit.
pub const GIVE_UP_MARGIN_SECONDS: f64 = 3.0;
/// How long conform waits, after its reply, for the client to close the connection.
pub const CLOSE_WINDOW_SECONDS: f64 = 5.0;
/// The longest request line conform reads; Vibe's requests are small.
pub const REQUEST_LIMIT_BYTES: usize = 1024 * 1024;

/// The requirements every case checks on every request.
pub mod rules {
    pub const INITIALIZE_FIRST: &str = "as.client.initialize-first";
    pub const ONE_REQUEST: &str = "as.client.one-request-per-connection";
    pub const COMPACT: &str = "as.client.compact-request";
    pub const ENVELOPE: &str = "as.client.jsonrpc-envelope";
    pub const EXECUTE_PARAMS: &str = "as.client.execute-params";
    pub const READ_FILE_PARAMS: &str = "as.client.read-file-params";
    pub const TOOLS_CALL_PARAMS: &str = "as.client.tools-call-params";
    pub const CALLBACK_ID: &str = "as.client.callback-id";
    pub const TOOL_NAME: &str = "as.client.tool-name";
    pub const DEFAULT_NAMESPACE: &str = "as.client.default-namespace";
    pub const NO_SANDBOX: &str = "as.client.no-sandbox";
    pub const NO_TOOLS: &str = "as.client.no-tools";
    pub const CALLER: &str = "as.client.caller";
    pub const SANDBOX_PATHS: &str = "as.client.sandbox-paths";

    /// Checked on every message of every case, whichever case cites them.
    pub const EVERY_MESSAGE: &[&str] = &[INITIALIZE_FIRST, ONE_REQUEST, COMPACT, ENVELOPE];
}

/// One check of a case.
pub type ClientStep = crate::peer::PeerStep<ClientCheck>;

/// What a client case checks the client did.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientCheck {
    /// The client sent a request of this method, whose params contain
    /// `params` (the matcher's subset rules), after conform answered the
    /// first request of `after`.
    Sends {
        method: String,
        params: Option<Value>,
        after: Option<String>,
    },
    /// The client sent no request of this method.
    NeverSends(String),
    /// Once conform answered the first request of this method, the client
    /// opened no connection and sent nothing more.
    NothingAfter(String),
    /// The client's exit status.
    Exit(ExitWant),
    /// The client did not exit with this status.
    ExitNot(i32),
    /// The client closed every unanswered request of this method within
    /// `within` seconds, plus its own param `plus_param` when named.
    GivesUp {
        method: String,
        within: f64,
        plus_param: Option<String>,
    },
}

/// A client step as the case file writes it: exactly one of `sends`,
/// `neverSends`, `nothingAfter`, `exit`, `exitNot`, `givesUp`.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RawClientStep {
    sends: Option<String>,
    params: Option<Value>,
    after: Option<String>,
    never_sends: Option<String>,
    nothing_after: Option<String>,
    exit: Option<ExitWant>,
    exit_not: Option<i32>,
    gives_up: Option<String>,
    within: Option<f64>,
    plus_param: Option<String>,
    info: bool,
}

impl crate::peer::CheckKeys for ClientCheck {
    type Raw = RawClientStep;
    const ONE_OF: &'static str = "sends, neverSends, nothingAfter, exit, exitNot, givesUp";

    fn read(r: RawClientStep) -> Result<(Vec<ClientCheck>, bool), String> {
        let mut checks = Vec::new();
        if let Some(method) = r.sends {
            checks.push(ClientCheck::Sends {
                method,
                params: r.params.clone(),
                after: r.after.clone(),
            });
        } else if r.params.is_some() || r.after.is_some() {
            return Err("params and after go with sends".into());
        }
        checks.extend(r.never_sends.map(ClientCheck::NeverSends));
        checks.extend(r.nothing_after.map(ClientCheck::NothingAfter));
        checks.extend(r.exit.map(ClientCheck::Exit));
        checks.extend(r.exit_not.map(ClientCheck::ExitNot));
        match (r.gives_up, r.within) {
            (Some(method), Some(within)) => {
                if !(0.0..=3600.0).contains(&within) {
                    return Err("within is between 0 and 3600 seconds".into());
                }
                checks.push(ClientCheck::GivesUp {
                    method,
                    within,
                    plus_param: r.plus_param,
                });
            }
            (None, None) if r.plus_param.is_none() => {}
            _ => return Err("givesUp takes within (and plusParam), and only it does".into()),
        }
        Ok((checks, r.info))
    }
}

/// How conform answers one method. Exactly one of `result`, `patch`,
/// `error`, `line`, `raw`, `silent`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rule {
    /// A result, in a JSON-RPC response to the request's id.
    pub result: Option<Value>,
    /// A JSON merge patch (RFC 7386) on the default answer's result.
    pub patch: Option<Value>,
    /// An error object, in a JSON-RPC response to the request's id.
    pub error: Option<Value>,
    /// The whole message, written as one compact line (`${id}` is the request's id).
    pub line: Option<Value>,
    /// These exact bytes (`${id}` replaced by the id's JSON).
    pub raw: Option<String>,
    /// No answer at all: conform holds the connection open.
    pub silent: bool,
    /// Close conform's side of the connection after answering.
    pub close: bool,
}

impl Rule {
    fn check(&self) -> Result<(), String> {
        let n = [
            self.result.is_some(),
            self.patch.is_some(),
            self.error.is_some(),
            self.line.is_some(),
            self.raw.is_some(),
            self.silent,
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if n != 1 {
            return Err(
                "an answer is exactly one of result, patch, error, line, raw, silent".into(),
            );
        }
        Ok(())
    }
}

/// A client case's `config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    pub serve: BTreeMap<String, Rule>,
    /// Seconds the client has for its whole workload before conform stops it.
    pub deadline: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
struct ServeFile {
    serve: BTreeMap<String, Rule>,
}

impl crate::peer::PeerScript for ClientConfig {
    const MAX_DEADLINE: f64 = 3600.0;

    fn deadline(&self) -> Option<f64> {
        self.deadline
    }

    fn check_more(&self) -> Result<(), String> {
        for (method, rule) in &self.serve {
            rule.check()
                .map_err(|e| format!("config: serve {method}: {e}"))?;
        }
        Ok(())
    }
}

/// The answers of one case: the defaults with the case's overrides.
#[derive(Debug, Clone)]
pub struct Script {
    rules: BTreeMap<String, Rule>,
    vars: Vars,
}

/// What conform writes for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The bytes, or None to stay silent.
    pub bytes: Option<Vec<u8>>,
    pub close: bool,
}

impl Script {
    /// The script of a case whose workspace is `workspace` and python `python`.
    pub fn new(config: &ClientConfig, workspace: &str, python: &str) -> Result<Script, String> {
        let defaults: ServeFile = serde_json::from_str(
            crate::corpus::file(SERVE_DEFAULTS).ok_or("the serve defaults are missing")?,
        )
        .map_err(|e| format!("{SERVE_DEFAULTS}: {e}"))?;
        let mut rules = defaults.serve.clone();
        for (method, rule) in &config.serve {
            let rule = match &rule.patch {
                Some(patch) => {
                    let mut base = defaults
                        .serve
                        .get(method)
                        .and_then(|r| r.result.clone())
                        .ok_or_else(|| format!("serve {method}: no default result to patch"))?;
                    merge_patch(&mut base, patch);
                    Rule {
                        result: Some(base),
                        close: rule.close,
                        ..Rule::default()
                    }
                }
                None => rule.clone(),
            };
            rules.insert(method.clone(), rule);
        }
        let mut vars = Vars::default();
        vars.set("workspace", Value::String(workspace.into()));
        vars.set("python", Value::String(python.into()));
        Ok(Script { rules, vars })
    }

    /// The answer to a request line; `None` id when it had none.
    pub fn answer(&self, method: Option<&str>, id: &Value) -> Answer {
        let Some(rule) = method.and_then(|m| self.rules.get(m)) else {
            let line = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}});
            return Answer {
                bytes: Some(encode(&line)),
                close: false,
            };
        };
        let mut vars = self.vars.clone();
        vars.set("id", id.clone());
        let expand = |v: &Value| matcher::expand(v, &vars).unwrap_or_else(|_| v.clone());
        let bytes = if rule.silent {
            None
        } else if let Some(raw) = &rule.raw {
            Some(raw.replace("${id}", &id.to_string()).into_bytes())
        } else if let Some(line) = &rule.line {
            Some(encode(&expand(line)))
        } else if let Some(error) = &rule.error {
            Some(encode(
                &json!({"jsonrpc": "2.0", "id": id, "error": expand(error)}),
            ))
        } else {
            let result = rule.result.as_ref().map(expand).unwrap_or(Value::Null);
            Some(encode(
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
            ))
        };
        Answer {
            bytes,
            close: rule.close,
        }
    }

    /// What the handshake conform answers declares, read as Vibe reads it;
    /// `None` when Vibe would refuse it.
    pub fn declaration(&self) -> Option<Declaration> {
        let reply = self.answer(Some("agent/initialize"), &json!(1)).bytes?;
        let reply = jsonrpc::parse_json(reply.strip_suffix(b"\n")?).ok()?;
        if reply.get("id") != Some(&json!(1)) {
            return None;
        }
        let result = reply.get("result").filter(|r| r.is_object())?;
        if !validate::shape_violations(result, table::INITIALIZE_RESULT, "result").is_empty()
            || result.get("protocolVersion") != Some(&json!(table::PROTOCOL_VERSION))
        {
            return None;
        }
        let sandbox = match validate::declared_sandbox(result) {
            DeclaredSandbox::None => false,
            DeclaredSandbox::Pair { workspace, .. } if validate::is_absolute(&workspace) => true,
            _ => return None,
        };
        let tools = validate::declared_tools(result);
        if !validate::declaration_violations(&tools).is_empty() {
            return None;
        }
        Some(Declaration {
            sandbox,
            tools: tools.iter().map(|t| t.full_name.clone()).collect(),
            bare_defaults: tools
                .iter()
                .filter(|t| t.namespace == table::DEFAULT_NAMESPACE)
                .map(|t| t.name.clone())
                .collect(),
        })
    }
}

/// What a handshake Vibe accepts declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub sandbox: bool,
    /// `namespace.name` of every tool.
    pub tools: BTreeSet<String>,
    /// Names of tools in the default namespace, as declared (without it).
    pub bare_defaults: BTreeSet<String>,
}

/// One compact line.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(v).expect("a Value serializes");
    bytes.push(b'\n');
    bytes
}

/// RFC 7386 JSON merge patch: `null` removes a member.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// One connection the client opened, as conform saw it. Times are
/// milliseconds since the client was started.
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    pub opened_ms: u64,
    /// The order of events across the case's connections: when the
    /// connection opened, its request arrived, and conform answered.
    pub opened_seq: u64,
    pub request_seq: u64,
    pub reply_seq: Option<u64>,
    /// The first line, with its `\n`, or what came before the client closed.
    pub line: Vec<u8>,
    /// When the line (or the close that ended it) arrived.
    pub request_ms: Option<u64>,
    /// The line outgrew [`REQUEST_LIMIT_BYTES`].
    pub overlong: bool,
    /// What conform answered, and when.
    pub reply: Option<Vec<u8>>,
    pub reply_ms: Option<u64>,
    /// Bytes after the first line.
    pub extra: Vec<u8>,
    /// When the client closed the connection, if conform saw it.
    pub closed_ms: Option<u64>,
}

impl Exchange {
    /// The request, when the line is JSON.
    pub fn request(&self) -> Option<Value> {
        let body = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        jsonrpc::parse_json(body).ok()
    }

    pub fn method(&self) -> Option<String> {
        self.request()?.get("method")?.as_str().map(str::to_owned)
    }

    fn label(&self) -> String {
        self.method().unwrap_or_else(|| {
            if self.line.is_empty() {
                "(nothing)".into()
            } else {
                "(not a request)".into()
            }
        })
    }
}

/// How the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEnd {
    /// It exited with `code`, or was ended by `signal`.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        ms: u64,
    },
    /// It was still running at the deadline and conform stopped it.
    Stopped { ms: u64 },
}

/// Everything conform saw of one client run.
#[derive(Debug, Clone)]
pub struct Observation {
    pub exchanges: Vec<Exchange>,
    pub end: ClientEnd,
}

/// What the client did in `case`, as evidence for the grader.
pub fn evidence(case: &Case<super::ClientCases>, script: &Script, obs: &Observation) -> Evidence {
    crate::peer::evidence(
        every_message(script, obs),
        &case.steps,
        |s| s.info,
        |s| check_step(&s.check, obs),
        "client",
        describe(obs),
    )
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

fn check_step(check: &ClientCheck, obs: &Observation) -> Check {
    let by_method = |m: &str| -> Vec<&Exchange> {
        obs.exchanges
            .iter()
            .filter(|e| e.method().as_deref() == Some(m))
            .collect()
    };
    // When conform answered the first request of `m` (or, silent, got it).
    let answered_at = |m: &str| {
        by_method(m).first().map(|e| {
            (
                e.reply_seq.unwrap_or(e.request_seq),
                e.reply_ms.or(e.request_ms).unwrap_or(e.opened_ms),
            )
        })
    };
    match check {
        ClientCheck::Sends {
            method: m,
            params,
            after,
        } => {
            let since = match after {
                Some(a) => match answered_at(a) {
                    Some(t) => Some(t),
                    None => return Check::Unseen(format!("the client never sent {a}")),
                },
                None => None,
            };
            let found = by_method(m).into_iter().any(|e| {
                since.is_none_or(|(seq, _)| e.request_seq > seq)
                    && params.as_ref().is_none_or(|want| {
                        let params = e.request().and_then(|r| r.get("params").cloned());
                        let mut errors = Vec::new();
                        matcher::match_value(
                            want,
                            params.as_ref(),
                            "params",
                            &mut Vars::default(),
                            &mut errors,
                        );
                        errors.is_empty()
                    })
            });
            let what = match params {
                Some(p) => format!("{m} with params {}", matcher::brief(p)),
                None => m.clone(),
            };
            match (found, after) {
                (true, _) => Check::Holds,
                (false, Some(a)) => Check::Broken(
                    Kind::Missing,
                    format!(
                        "the client sent no {what} after conform answered {a}: the run did not go on"
                    ),
                ),
                (false, None) => {
                    Check::Broken(Kind::Missing, format!("the client never sent {what}"))
                }
            }
        }
        ClientCheck::NeverSends(m) => {
            let n = by_method(m).len();
            if n == 0 {
                Check::Holds
            } else {
                let times = if n == 1 {
                    "once".into()
                } else {
                    format!("{n} times")
                };
                Check::Broken(Kind::Unexpected, format!("the client sent {m} ({times})"))
            }
        }
        ClientCheck::NothingAfter(m) => {
            let Some((seq, t)) = answered_at(m) else {
                return Check::Unseen(format!("the client never sent {m}"));
            };
            let later: Vec<String> = obs
                .exchanges
                .iter()
                .filter(|e| e.opened_seq > seq && !e.line.is_empty())
                .map(|e| format!("{} at {}", e.label(), secs(e.opened_ms)))
                .collect();
            if later.is_empty() {
                Check::Holds
            } else {
                Check::Broken(
                    Kind::Unexpected,
                    format!(
                        "after conform answered {m} at {}, the client sent {}",
                        secs(t),
                        later.join(", ")
                    ),
                )
            }
        }
        ClientCheck::Exit(want) => {
            let ClientEnd::Exited { code, .. } = obs.end else {
                return Check::Broken(
                    Kind::Process,
                    format!("the client did not exit (expected {want})"),
                );
            };
            if want.holds(code) {
                Check::Holds
            } else {
                Check::Broken(
                    Kind::Process,
                    format!(
                        "expected exit status {want}, the client {}",
                        end_text(obs.end)
                    ),
                )
            }
        }
        ClientCheck::ExitNot(not) => match obs.end {
            ClientEnd::Exited { code: Some(c), .. } if c == *not => {
                Check::Broken(Kind::Process, format!("the client exited with status {c}"))
            }
            _ => Check::Holds,
        },
        ClientCheck::GivesUp {
            method: m,
            within,
            plus_param,
        } => gives_up(m, *within, plus_param.as_deref(), &by_method(m)),
    }
}

/// Whether the client closed every unanswered request of `m` within its limit.
fn gives_up(m: &str, within: f64, plus_param: Option<&str>, sent: &[&Exchange]) -> Check {
    let silent: Vec<&&Exchange> = sent.iter().filter(|e| e.reply.is_none()).collect();
    if silent.is_empty() {
        return Check::Unseen(format!("the client never sent {m}"));
    }
    let mut broken = Vec::new();
    let mut notes = Vec::new();
    for e in silent {
        let own = match plus_param {
            None => 0.0,
            Some(p) => match e.request().and_then(|r| r.get("params")?.get(p)?.as_f64()) {
                Some(x) => x,
                None => {
                    return Check::Unseen(format!(
                        "the client's {m} has no numeric {p}: without one there is no limit to check"
                    ));
                }
            },
        };
        let limit = own + within;
        let sent = e.request_ms.unwrap_or(e.opened_ms);
        match e.closed_ms {
            Some(c) => {
                let waited = c.saturating_sub(sent) as f64 / 1000.0;
                if waited > limit + GIVE_UP_MARGIN_SECONDS {
                    broken.push(format!(
                        "the client waited {waited:.1} s for {m}, past its limit of {limit:.1} s (and conform's {GIVE_UP_MARGIN_SECONDS:.0} s margin)"
                    ));
                } else if waited < own {
                    notes.push(format!(
                        "the client gave up on {m} after {waited:.1} s, before its own {own:.1} s"
                    ));
                }
            }
            None => broken.push(format!(
                "the client was still waiting for {m} when conform stopped it, past its limit of {limit:.1} s"
            )),
        }
    }
    if !broken.is_empty() {
        Check::Broken(Kind::Rule, broken.join("; "))
    } else if !notes.is_empty() {
        Check::Note(notes.join("; "))
    } else {
        Check::Holds
    }
}

fn end_text(end: ClientEnd) -> String {
    match end {
        ClientEnd::Exited {
            code: Some(c), ms, ..
        } => format!("exited with status {c} after {}", secs(ms)),
        ClientEnd::Exited {
            signal: Some(s),
            ms,
            ..
        } => format!("was ended by signal {s} after {}", secs(ms)),
        ClientEnd::Exited { ms, .. } => format!("ended after {}", secs(ms)),
        ClientEnd::Stopped { ms } => format!(
            "was still running after {} and conform stopped it",
            secs(ms)
        ),
    }
}

/// What the client did, in one line.
pub fn describe(obs: &Observation) -> String {
    let mut parts = Vec::new();
    for e in &obs.exchanges {
        let answer = match &e.reply {
            None => match e.closed_ms {
                Some(c) => format!(
                    "no answer; it closed after {}",
                    secs(c.saturating_sub(e.request_ms.unwrap_or(e.opened_ms)))
                ),
                None => "no answer".into(),
            },
            Some(r) => {
                let text = String::from_utf8_lossy(r);
                match jsonrpc::parse_json(text.trim_end().as_bytes()) {
                    Ok(v) => match v.get("error").and_then(|e| e.get("code")) {
                        Some(code) => format!("error {code}"),
                        None => "result".into(),
                    },
                    Err(_) => "bytes that are not a JSON line".into(),
                }
            }
        };
        parts.push(format!("{} ({answer})", e.label()));
    }
    let sent = if parts.is_empty() {
        "sent nothing".into()
    } else {
        format!("sent {}", parts.join(", "))
    };
    format!("it {sent}; it {}", end_text(obs.end))
}

/// What kind of deviation breaking each rule is.
fn kind_of(rule: &str) -> Kind {
    match rule {
        rules::COMPACT | rules::ONE_REQUEST => Kind::Framing,
        rules::ENVELOPE => Kind::Envelope,
        rules::EXECUTE_PARAMS | rules::READ_FILE_PARAMS | rules::TOOLS_CALL_PARAMS => Kind::Shape,
        rules::NO_SANDBOX | rules::NO_TOOLS => Kind::Unexpected,
        _ => Kind::Rule,
    }
}

/// Why a sandbox path is not written as Vibe writes one ("A path in a
/// Sandbox Environment, normalized as written": absolute, or starting with
/// `~`, with `.` and `..` collapsed), or None.
fn unnormalized(path: &str) -> Option<&'static str> {
    if !(path.starts_with('/') || path.starts_with('~')) {
        return Some("is relative");
    }
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    let last = parts.len().saturating_sub(1);
    if parts.iter().any(|p| *p == "." || *p == "..") {
        Some("has a . or .. component")
    } else if parts
        .iter()
        .enumerate()
        .any(|(i, p)| p.is_empty() && i != last)
    {
        Some("has an empty component (//)")
    } else {
        None
    }
}

/// How a caller breaks "The run's own session is the root, with no parent,
/// name or agent; a subagent names its parent, its own name and the agent
/// it runs as", or None (for null, or a caller whose shape is wrong: the
/// params rule says so).
fn caller_inconsistency(caller: &Value) -> Option<String> {
    let Value::Object(c) = caller else {
        return None;
    };
    let set = |k: &str| c.get(k).is_some_and(|v| !v.is_null());
    let session = c.get("sessionId")?;
    let root = c.get("rootSessionId")?;
    if !set("parentSessionId") {
        if set("name") || set("agentType") {
            return Some(format!(
                "is a root session (no parentSessionId) with a name or agentType: {}",
                matcher::brief(caller)
            ));
        }
        if session != root {
            return Some(format!(
                "is a root session (no parentSessionId) whose sessionId is not its rootSessionId: {}",
                matcher::brief(caller)
            ));
        }
    } else {
        if !(set("name") && set("agentType")) {
            return Some(format!(
                "is a subagent (it has a parentSessionId) without its name and agentType: {}",
                matcher::brief(caller)
            ));
        }
        if session == root {
            return Some(format!(
                "is a subagent (it has a parentSessionId) that is its own root session: {}",
                matcher::brief(caller)
            ));
        }
    }
    None
}

/// The rules every request of every case is held to, as (requirement, kind, why).
fn every_message(script: &Script, obs: &Observation) -> Vec<(String, Kind, String)> {
    let mut out = Vec::new();
    let mut push = |r: &str, why: String| out.push((r.to_owned(), kind_of(r), why));
    let mut ordered: Vec<&Exchange> = obs
        .exchanges
        .iter()
        .filter(|e| !e.line.is_empty())
        .collect();
    ordered.sort_by_key(|e| e.request_ms.unwrap_or(e.opened_ms));
    let declaration = script.declaration();
    let mut initializes = 0;
    let mut callback_ids = BTreeSet::new();
    for (i, e) in ordered.iter().enumerate() {
        let n = i + 1;
        if e.overlong {
            push(
                rules::COMPACT,
                format!("request {n} is a line longer than {REQUEST_LIMIT_BYTES} bytes"),
            );
            continue;
        }
        let Some(body) = e.line.strip_suffix(b"\n") else {
            push(
                rules::COMPACT,
                format!("request {n} ended without its newline"),
            );
            continue;
        };
        if !e.extra.is_empty() {
            push(
                rules::ONE_REQUEST,
                format!(
                    "after request {n} the client sent more on the same connection: {}",
                    matcher::truncate(&String::from_utf8_lossy(&e.extra), 120)
                ),
            );
        }
        if e.reply.is_some() && e.closed_ms.is_none() {
            push(
                rules::ONE_REQUEST,
                format!(
                    "the client kept the connection of request {n} open {CLOSE_WINDOW_SECONDS:.0} s past conform's reply"
                ),
            );
        }
        let Ok(request) = jsonrpc::parse_json(body) else {
            push(rules::ENVELOPE, format!("request {n} is not JSON"));
            continue;
        };
        if !jsonrpc::is_compact_json(body) || body.ends_with(b"\r") {
            push(
                rules::COMPACT,
                format!("request {n} is not compact JSON followed by \\n"),
            );
        }
        let method = request.get("method").and_then(Value::as_str);
        let envelope_ok = request.get("jsonrpc") == Some(&json!("2.0"))
            && request
                .get("id")
                .is_some_and(|id| id.is_string() || id.is_i64() || id.is_u64())
            && method.is_some()
            && request.get("params").is_some_and(Value::is_object);
        if !envelope_ok {
            push(
                rules::ENVELOPE,
                format!(
                    "request {n} is not a JSON-RPC 2.0 request with jsonrpc \"2.0\", an id, a method and params: {}",
                    matcher::truncate(&String::from_utf8_lossy(body), 160)
                ),
            );
        }
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let method = method.unwrap_or("");
        if i == 0 && method != "agent/initialize" {
            push(
                rules::INITIALIZE_FIRST,
                format!("the first request is {method:?}, not agent/initialize"),
            );
        }
        let shape = |fields, path: &str| validate::shape_violations(&params, fields, path);
        match method {
            "agent/initialize" => {
                initializes += 1;
                if initializes == 2 {
                    push(
                        rules::INITIALIZE_FIRST,
                        "the client sent agent/initialize more than once".into(),
                    );
                }
                let mut v = shape(table::INITIALIZE_PARAMS, "params");
                if params.get("protocolVersion").is_some_and(|p| p.is_i64())
                    && params.get("protocolVersion") != Some(&json!(table::PROTOCOL_VERSION))
                {
                    v.push(format!(
                        "params.protocolVersion is {}, not 2",
                        params["protocolVersion"]
                    ));
                }
                if !v.is_empty() {
                    push(rules::INITIALIZE_FIRST, v.join("; "));
                }
            }
            "sandbox/execute" | "sandbox/readFile" => {
                let (rule, fields) = if method == "sandbox/execute" {
                    (rules::EXECUTE_PARAMS, table::EXECUTE_PARAMS)
                } else {
                    (rules::READ_FILE_PARAMS, table::READ_FILE_PARAMS)
                };
                let v = shape(fields, "params");
                if !v.is_empty() {
                    push(rule, v.join("; "));
                }
                let key = if method == "sandbox/execute" {
                    "cwd"
                } else {
                    "path"
                };
                if let Some(path) = params.get(key).and_then(Value::as_str)
                    && let Some(why) = unnormalized(path)
                {
                    push(
                        rules::SANDBOX_PATHS,
                        format!("{method} names the {key} {path:?}, which {why}"),
                    );
                }
                if declaration.as_ref().is_some_and(|d| !d.sandbox) {
                    push(
                        rules::NO_SANDBOX,
                        format!("the server declared no sandbox, and the client sent {method}"),
                    );
                }
            }
            "tools/call" => {
                let v = shape(table::TOOL_CALL_PARAMS, "params");
                if !v.is_empty() {
                    push(rules::TOOLS_CALL_PARAMS, v.join("; "));
                }
                if let Some(why) = params.get("caller").and_then(caller_inconsistency) {
                    push(rules::CALLER, format!("the caller {why}"));
                }
                if let Some(id) = params.get("callbackId").and_then(Value::as_str)
                    && !callback_ids.insert(id.to_owned())
                {
                    push(
                        rules::CALLBACK_ID,
                        format!("callbackId {id:?} was sent for more than one call"),
                    );
                }
                if let (Some(d), Some(name)) = (
                    declaration.as_ref(),
                    params.get("name").and_then(Value::as_str),
                ) {
                    if d.tools.is_empty() {
                        push(
                            rules::NO_TOOLS,
                            format!("the server declared no tools, and the client called {name:?}"),
                        );
                    } else if d.bare_defaults.contains(name) {
                        push(
                            rules::DEFAULT_NAMESPACE,
                            format!(
                                "the client called {name:?}; a tool declared without a namespace is {}.{name}",
                                table::DEFAULT_NAMESPACE
                            ),
                        );
                    } else if !d.tools.contains(name) {
                        push(
                            rules::TOOL_NAME,
                            format!(
                                "the client called {name:?}; the server declared {}",
                                d.tools.iter().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    out
}
