//! conform playing the editor over the shared stdio session
//! (`drive::stdio`): the monitor watching every line the agent writes, the
//! editor answering its requests, and the case's steps. The checks live in
//! `monitor` (every line), `checks` (named checks) and here (what a step
//! expects).
//!
//! Agent processes: a case that needs only a fresh session runs on an agent
//! process it shares, one case after another, with others of the same
//! client profile (`pool`); a case that disturbs the process (its own
//! handshake, raw bytes, stdin closed, a disruptive phase) and every case
//! under `--isolate` gets a fresh one. When a shared process dies or stops
//! answering during a case, the case is rerun on a fresh process before it
//! can fail, so one crash cannot cascade.

use super::editor::Editor;
use super::monitor::{Incoming, Monitor};
use super::prompts::{Book, Ladder, Optional, Rung, Trigger};
use super::steps::{Config, Expect, Need, Own, Permission, Profile, Prompt, Setup, Step};
use super::table;
use crate::case::{Case, Level, Phase};
use crate::drive::patience::{self, Liveness, Waited};
use crate::drive::stdio::{AnswerFuture, Answerer, ProbeRequest, Session};
use crate::evidence::{Evidence, Finding, Kind};
use crate::matcher;
use crate::outcome::{CaseResult, Direction, SkipKind};
use crate::step::{Action, ReplyRule, StdioExpect};
use crate::transport::process;
use crate::transport::stdio::{Launcher, LineStream, StreamEvent};
use crate::wire::Codec;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The id of conform's first request on a connection; the next count up
/// from it. Set-up traffic uses ordinary values, so an agent that mishandles
/// an edge id (0, negative, null, a string, past 2^53) fails the case about
/// that id (`acp/jsonrpc/id-*`), not the handshake every case needs.
pub const FIRST_ID: i64 = 1;
/// How long a request may take unless a step says otherwise.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The request that asks whether the agent still serves.
const PROBE: ProbeRequest = ProbeRequest {
    method: "_conform/probe",
    what: "a probe request (_conform/probe)",
    still: "the agent still answers requests",
    within: REQUEST_DEADLINE,
};
/// conform's bound on a prompt turn. The sources set none; a turn that
/// outlives it (and its grace) while the agent answers the liveness probe
/// is conform's limit, not the agent's breach.
pub const PROMPT_DEADLINE: Duration = Duration::from_secs(60);
/// conform's bound on the end of a turn after a cancel, from the cancel:
/// "the Agent MUST respond to the original session/prompt request with the
/// cancelled stop reason", and after `$/cancel_request` "MUST send one of
/// these responses for the original request". Extended by one bound at a
/// time, up to the step's turn bound, while the agent visibly works on
/// (updates or requests of its own); then a grace with the liveness probe.
pub const CANCEL_BOUND: Duration = Duration::from_secs(10);

/// conform's bounds at the run's scale (`drive::patience`).
fn request_bound() -> Duration {
    patience::scaled(REQUEST_DEADLINE)
}

pub fn turn_bound() -> Duration {
    patience::scaled(PROMPT_DEADLINE)
}

fn cancel_bound() -> Duration {
    patience::scaled(CANCEL_BOUND)
}
/// How long a step waits for the agent to make a request it expects.
const WAIT_FOR_DEADLINE: Duration = Duration::from_secs(30);

/// conform's bound on a prompt's provoking what the case waits for (a
/// request, an update); then a grace with the liveness probe.
fn provoke_bound() -> Duration {
    patience::scaled(WAIT_FOR_DEADLINE)
}
/// How long a turn must still run to count as a long one (`running`).
const SETTLE: Duration = Duration::from_millis(500);
/// How long the agent has to exit after its stdin closes, at the end of a case.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a shared process has to answer conform's sync at the end of a
/// case before it is given up (a request for an unknown method).
const SYNC_DEADLINE: Duration = Duration::from_secs(2);

/// The cases that report a failed handshake or session/new: the others
/// whose set-up fails for it name them and are not failed again.
const HANDSHAKE_CASE: &str = "acp/init/version-1";
const SESSION_CASE: &str = "acp/session/new";

/// What conform learned about the agent before the cases ran.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The `initialize` result, or why there is none.
    pub initialize: Result<Value, String>,
    /// `agentCapabilities` (empty object when absent).
    pub capabilities: Value,
    /// The `session/new` result, or why there is none.
    pub session: Result<Value, String>,
}

impl Probe {
    /// Why a case with `needs` does not apply to this agent, if it does not.
    pub fn skip_reason(&self, needs: &[Need]) -> Option<(String, SkipKind)> {
        let offers = |key: &str| {
            self.session
                .as_ref()
                .ok()
                .and_then(|s| s.get(key))
                .and_then(Value::as_array)
                .is_some_and(|m| !m.is_empty())
        };
        for need in needs {
            let met = match need {
                Need::Session => self.session.is_ok(),
                Need::Modes => self
                    .session
                    .as_ref()
                    .ok()
                    .and_then(|s| s.pointer("/modes/availableModes"))
                    .and_then(Value::as_array)
                    .is_some_and(|m| !m.is_empty()),
                Need::ConfigOptions => offers("configOptions"),
                Need::AuthMethods => offers_auth(self.initialize.as_ref().ok()),
                Need::Capability(path) => {
                    table::advertised(&self.capabilities, &format!("/{}", path.replace('.', "/")))
                }
            };
            if met {
                continue;
            }
            // A session the agent could not create (no credentials, no
            // model) is outside its declaration; the rest it declared.
            let of_session = matches!(need, Need::Session | Need::Modes | Need::ConfigOptions);
            return Some(match (&self.session, need) {
                (Err(why), _) if of_session => (why.clone(), SkipKind::Outside),
                (_, Need::Modes) => (
                    "the agent's session/new result offers no modes".into(),
                    SkipKind::Declared,
                ),
                (_, Need::ConfigOptions) => (
                    "the agent's session/new result offers no config options".into(),
                    SkipKind::Declared,
                ),
                (_, Need::AuthMethods) => (
                    "the agent advertises no authMethods".into(),
                    SkipKind::Declared,
                ),
                (_, other) => (
                    format!("the agent does not advertise agentCapabilities.{other}"),
                    SkipKind::Declared,
                ),
            });
        }
        None
    }

    /// Why a case whose set-up goes as far as `setup` cannot stand on it
    /// (the set-up failed before the run already), and the case that checks
    /// what failed, if a case does (an agent that cannot create a session
    /// for want of credentials is outside the protocol: none does).
    pub fn setup_blocked(&self, setup: Setup) -> Option<(String, Option<&'static str>)> {
        if setup == Setup::None {
            return None;
        }
        if let Err(why) = &self.initialize {
            return Some((format!("set-up: {why}"), Some(HANDSHAKE_CASE)));
        }
        match (&self.session, setup) {
            (Err(why), Setup::Session) => {
                let blamed = why.starts_with("set-up:").then_some(SESSION_CASE);
                Some((why.clone(), blamed))
            }
            _ => None,
        }
    }
}

/// An agent process kept for the cases that need only a fresh session.
pub struct Conn {
    stream: LineStream,
    profile: Profile,
    /// Its `initialize` result.
    initialize: Value,
    /// Which process of the run it is (1-based), and how many cases it served.
    number: usize,
    served: usize,
    /// The sessions the agent gave on it so far: an update naming one of
    /// them in a later case names a session it gave this client.
    sessions: Vec<String>,
}

/// The most session ids a shared process's cases hand on.
const SESSIONS_KEPT: usize = 1000;

impl Conn {
    /// Ends the process.
    pub async fn close(mut self) {
        self.stream.close_stdin();
        let _ = self.stream.process.wait_for_exit(EXIT_GRACE).await;
        let _ = self.stream.process.shutdown(process::TERM_GRACE).await;
    }
}

/// What every case of a run shares.
pub struct Context {
    /// How one agent is started.
    pub launcher: Launcher,
    pub strict: bool,
    pub probe: Probe,
    pub startup: Duration,
    /// The prompt book, with the user's `--prompts` in front.
    pub book: Book,
    /// A fresh process for every case (`--isolate`).
    pub isolate: bool,
    /// Idle shared processes.
    pub pool: Mutex<Vec<Conn>>,
    /// Agent processes started, the probe's included; and of them, those
    /// started to rerun a case a shared process failed.
    pub started: AtomicUsize,
    pub reruns: AtomicUsize,
    /// The case whose turn outlived conform's bound: no more prompts.
    stopped: Mutex<Option<String>>,
    /// Which phrasing of which directive worked: (directive, rung, user) -> cases.
    pub rungs: Mutex<BTreeMap<(String, usize, bool), usize>>,
    /// The ids of the cases the run selected.
    pub selected: std::collections::BTreeSet<String>,
    /// What the control runs came to, by directive line (as the case file
    /// writes it) and client profile: a control proven once serves every
    /// case that withholds the same.
    controls: Mutex<BTreeMap<(String, Profile), Control>>,
    /// The rung that provoked the action in a control run, by its case id.
    provoked: Mutex<BTreeMap<String, usize>>,
}

/// The id a control run of case `id` has.
const CONTROL_SUFFIX: &str = "#control";

/// What a control run came to: the phrasing that provoked the action when
/// the capability was offered, or why none did.
#[derive(Debug, Clone)]
enum Control {
    Provoked { rung: usize, note: String },
    Not(String),
}

impl Context {
    pub fn new(
        launcher: Launcher,
        strict: bool,
        probe: Probe,
        startup: Duration,
        book: Book,
        isolate: bool,
    ) -> Context {
        Context {
            launcher,
            strict,
            probe,
            startup,
            book,
            isolate,
            pool: Mutex::new(Vec::new()),
            // The probe's process.
            started: AtomicUsize::new(1),
            reruns: AtomicUsize::new(0),
            stopped: Mutex::new(None),
            rungs: Mutex::new(BTreeMap::new()),
            selected: Default::default(),
            controls: Mutex::new(BTreeMap::new()),
            provoked: Mutex::new(BTreeMap::new()),
        }
    }

    /// A context of fresh agents (`--isolate`, the builtin prompts) on the
    /// agents `launcher` starts, after the probe; the probe's own agent is
    /// closed, since no case shares it.
    pub async fn isolated(
        launcher: Launcher,
        startup: Duration,
    ) -> Result<Context, crate::error::RunError> {
        use crate::error::RunError;
        let (probe, first) = probe(&launcher, startup)
            .await
            .map_err(|e| RunError::Target(format!("the agent could not be initialized: {e}")))?;
        if let Some(c) = first {
            c.close().await;
        }
        let book = Book::builtin().map_err(RunError::Conform)?;
        Ok(Context::new(launcher, false, probe, startup, book, true))
    }

    fn stopped_by(&self) -> Option<String> {
        self.stopped.lock().ok().and_then(|s| s.clone())
    }

    fn stop_prompts(&self, case: &str) {
        if let Ok(mut s) = self.stopped.lock() {
            s.get_or_insert_with(|| case.to_owned());
        }
    }

    /// Ends every idle shared process.
    pub async fn close_pool(&self) {
        let conns: Vec<Conn> = self
            .pool
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        for c in conns {
            c.close().await;
        }
    }

    /// What the run's notes say about the agent processes and the prompts.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "the run started {} agent process(es){}",
            self.started.load(Ordering::Relaxed),
            match self.reruns.load(Ordering::Relaxed) {
                0 => String::new(),
                n => format!(
                    ", {n} of them to rerun a case on a fresh process after a shared one died or stopped answering"
                ),
            }
        )];
        let rungs = self.rungs.lock().map(|r| r.clone()).unwrap_or_default();
        if !rungs.is_empty() {
            let worked = rungs
                .iter()
                .map(|((d, i, user), n)| {
                    format!(
                        "`{d}` phrasing {i}{} in {n} case(s)",
                        if *user { " (--prompts)" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            notes.push(format!("the prompts that worked: {worked}"));
        }
        if let Some(case) = self.stopped_by() {
            notes.push(format!(
                "a turn in {case} outlived conform's bound of {} and its grace while the agent still answered the liveness probe, so conform sent no more prompts to this agent (the cases that needed one were skipped)",
                patience::secs(turn_bound())
            ));
        }
        notes
    }
}

/// The first `initialize` conform sends, for a profile's capabilities.
pub fn initialize_params(capabilities: Value) -> Value {
    json!({
        "protocolVersion": table::PROTOCOL_VERSION,
        "clientCapabilities": capabilities,
        "clientInfo": {"name": "conform", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Whether an `initialize` result offers authentication methods.
fn offers_auth(initialize: Option<&Value>) -> bool {
    initialize
        .and_then(|i| i.get("authMethods"))
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty())
}

/// Why an error answer to a prompt or session/new is outside the protocol
/// (authentication, the model), so the case is skipped, not failed.
/// `auth` says the agent offered authentication methods, which conform
/// never uses.
fn outside_protocol(method: &str, error: &Value, auth: bool) -> Option<String> {
    let code = error.get("code").and_then(Value::as_i64)?;
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    if code == table::AUTH_REQUIRED.0 {
        return Some(format!(
            "the agent requires authentication ({method} answered {code}: {message}); conform has no credentials"
        ));
    }
    // -32603 and the implementation-defined codes (outside JSON-RPC's
    // reserved range, or -32099..=-32001) carry the agent's own failures.
    let own = !(-32768..=-32000).contains(&code) || (-32099..=-32001).contains(&code);
    // An agent that offers authentication and was not authenticated may
    // refuse a session for want of it with its own error: the sources
    // define auth_required (-32000) for that but do not require it
    // (claude-code-acp answers -32603 "Query closed before response
    // received" when it has no login).
    if auth && method == "session/new" && (code == -32603 || own) {
        let data = error
            .get("data")
            .map(|d| format!(" {d}"))
            .unwrap_or_default();
        return Some(format!(
            "the agent offers authMethods and conform did not authenticate; {method} answered {code}: {message}{data}, read as authentication needed (the schema's code for that is {}, auth_required); conform has no credentials",
            table::AUTH_REQUIRED.0
        ));
    }
    if method == "session/prompt" && (code == -32603 || own) {
        return Some(format!(
            "the prompt failed outside the protocol ({method} answered {code}: {message})"
        ));
    }
    // A mode or option the agent offers but will not switch to for a
    // reason of its own (gemini-cli: "Cannot enable privileged approval
    // modes in an untrusted folder"): not the protocol's business.
    if matches!(method, "session/set_mode" | "session/set_config_option") && (code == -32603 || own)
    {
        let data = error
            .get("data")
            .map(|d| format!(" {d}"))
            .unwrap_or_default();
        return Some(format!(
            "the agent would not make the change, for a reason outside the protocol ({method} answered {code}: {message}{data})"
        ));
    }
    None
}

/// Starts one agent.
fn spawn(ctx: Option<&Context>, launcher: &Launcher) -> Result<LineStream, String> {
    if let Some(c) = ctx {
        c.started.fetch_add(1, Ordering::Relaxed);
    }
    launcher
        .start(
            &[],
            Codec::Lines {
                limit: table::LINE_LIMIT,
            },
        )
        .map_err(|e| format!("cannot start {launcher:?}: {e}"))
}

/// What the probe could not learn, and whether the agent wrote anything.
enum ProbeError {
    /// It wrote something (a case can report what): the reason.
    Wrote(String),
    /// It wrote nothing at all: the reason.
    Silent(String),
}

/// Learns what the agent advertises (see [`probe_timed`]).
pub async fn probe(
    launcher: &Launcher,
    startup: Duration,
) -> Result<(Probe, Option<Conn>), String> {
    probe_timed(launcher, startup)
        .await
        .map(|(probe, conn, _)| (probe, conn))
}

/// How long the probe's answers took: what the run's bounds adapt to.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    /// The latency of the agent's first answer (`initialize`), from its spawn.
    pub first_answer: Option<Duration>,
    /// Answers that came after conform's bound, for the run's notes.
    pub notes: Vec<String>,
}

impl Timing {
    /// The start-up bound for later processes: `floor` (`--startup-timeout`)
    /// adapted to the first answer's latency (`patience::startup_bound`).
    pub fn startup(&self, floor: Duration) -> Duration {
        self.first_answer
            .map_or(floor, |first| patience::startup_bound(floor, first))
    }
}

/// Learns what the agent advertises: `initialize` and `session/new` on one
/// process, which then serves the first cases that share one, and how long
/// its answers took. An agent that cannot be started, or writes nothing at
/// all, is the target's failure to start (exit 2); one that wrote anything
/// gets its cases run, which say what is wrong with it.
pub async fn probe_timed(
    launcher: &Launcher,
    startup: Duration,
) -> Result<(Probe, Option<Conn>, Timing), String> {
    let mut timing = Timing::default();
    let spawned = Instant::now();
    let mut stream = spawn(None, launcher)?;
    let workspace = super::workspace()?;
    let mut monitor = Monitor::new();
    let mut wrote = false;
    let mut probe = Probe {
        initialize: Err("not probed".into()),
        session: Err("not probed".into()),
        capabilities: json!({}),
    };
    let init = json!({"jsonrpc": "2.0", "id": FIRST_ID, "method": "initialize",
        "params": initialize_params(Profile::All.capabilities())});
    let answered = exchange(&mut stream, &mut monitor, &init, startup, &mut wrote).await;
    if answered.is_ok() {
        let took = spawned.elapsed();
        timing.first_answer = Some(took);
        if took > startup {
            timing
                .notes
                .push(patience::slow_note("the first initialize", took, startup));
        }
    }
    let result = match answered {
        Ok(Ok(init)) => {
            probe.capabilities = init.get("agentCapabilities").cloned().unwrap_or(json!({}));
            probe.initialize = Ok(init);
            let new = json!({"jsonrpc": "2.0", "id": FIRST_ID + 1, "method": "session/new",
                "params": {"cwd": workspace.path(), "mcpServers": []}});
            let asked = Instant::now();
            let answered =
                exchange(&mut stream, &mut monitor, &new, request_bound(), &mut wrote).await;
            if answered.is_ok() && asked.elapsed() > request_bound() {
                timing.notes.push(patience::slow_note(
                    "the first session/new",
                    asked.elapsed(),
                    request_bound(),
                ));
            }
            probe.session = match answered {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(outside_protocol(
                    "session/new",
                    &e,
                    offers_auth(probe.initialize.as_ref().ok()),
                )
                .unwrap_or_else(|| {
                    format!(
                        "set-up: session/new failed before the run ({})",
                        matcher::brief(&e)
                    )
                })),
                Err(ProbeError::Wrote(e) | ProbeError::Silent(e)) => {
                    Err(format!("set-up: session/new failed before the run ({e})"))
                }
            };
            Ok(())
        }
        Ok(Err(e)) => {
            probe.initialize = Err(format!(
                "the agent answered initialize (version 1) with an error: {}",
                matcher::brief(&e)
            ));
            Ok(())
        }
        Err(ProbeError::Wrote(why)) => {
            let first = monitor
                .violations
                .first()
                .map(|v| format!(": {}", v.message))
                .unwrap_or_default();
            probe.initialize = Err(format!(
                "conform could not read the agent's answer to initialize ({why}){first}"
            ));
            Ok(())
        }
        Err(ProbeError::Silent(why)) => Err(why),
    };
    if let Err(e) = result {
        stream.close_stdin();
        let _ = stream.process.wait_for_exit(EXIT_GRACE).await;
        let _ = stream.process.shutdown(process::TERM_GRACE).await;
        let stderr = stream.process.stderr_tail();
        return Err(if stderr.trim().is_empty() {
            e
        } else {
            format!("{e}; its stderr:\n{}", stderr.trim_end())
        });
    }
    // The probe's process serves the first shared cases of the default
    // profile, when it is in order.
    let reusable = probe.session.is_ok() && monitor.violations.is_empty();
    let conn = match (&probe.initialize, reusable) {
        (Ok(init), true) => Some(Conn {
            stream,
            profile: Profile::All,
            initialize: init.clone(),
            number: 1,
            served: 0,
            sessions: monitor.session_ids(),
        }),
        _ => {
            stream.close_stdin();
            let _ = stream.process.wait_for_exit(EXIT_GRACE).await;
            let _ = stream.process.shutdown(process::TERM_GRACE).await;
            None
        }
    };
    Ok((probe, conn, timing))
}

/// Sends one request and reads until its answer, answering nothing else
/// (the probe's agent has no reason to ask anything yet): for `bound`,
/// then a grace (`drive::patience`; no probe, since the agent may not be
/// serving yet). An answer in the grace is an answer.
async fn exchange(
    stream: &mut LineStream,
    monitor: &mut Monitor,
    message: &Value,
    bound: Duration,
    wrote: &mut bool,
) -> Result<Result<Value, Value>, ProbeError> {
    let grace = patience::grace(bound);
    let within = bound + grace;
    let key = monitor.sent(message).unwrap_or_default();
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let lost = |wrote: bool, why: String| {
        if wrote {
            ProbeError::Wrote(why)
        } else {
            ProbeError::Silent(why)
        }
    };
    stream
        .send(format!("{message}\n").as_bytes(), within)
        .await
        .map_err(|e| lost(*wrote, e))?;
    let until = Instant::now() + within;
    loop {
        match stream.next(until).await {
            None => {
                return Err(lost(
                    *wrote,
                    format!(
                        "the agent did not answer {method} within {}",
                        patience::waited(within, bound, grace)
                    ),
                ));
            }
            Some((_, StreamEvent::Line(line))) => {
                *wrote = true;
                if let Some(why) = crate::jsonrpc::too_many_values(&line) {
                    return Err(ProbeError::Wrote(format!("the agent wrote {why}")));
                }
                if let Incoming::Response {
                    key: k, outcome, ..
                } = monitor.received(&line)
                    && k == key
                {
                    return Ok(outcome);
                }
            }
            Some((_, StreamEvent::TooLong { limit })) => {
                return Err(ProbeError::Wrote(format!(
                    "the agent wrote a line over {limit} bytes"
                )));
            }
            Some((_, StreamEvent::Broken(why))) => return Err(lost(*wrote, why)),
            Some((_, StreamEvent::Closed { partial })) => {
                let status = stream
                    .process
                    .wait_for_exit(Duration::from_millis(300))
                    .await;
                let why = format!(
                    "the agent closed its stdout before answering {method} (it {})",
                    process::describe_status(status)
                );
                return Err(lost(*wrote || !partial.is_empty(), why));
            }
        }
    }
}

/// How conform answers the agent in a case: as the configured editor,
/// holding back the first request among the methods the case withholds
/// until a `cancel` or a `release`.
struct EditorRole {
    editor: Editor,
    withhold: Vec<String>,
    /// The agent's requests held back: (id, method, params).
    held: Vec<(Value, String, Value)>,
    /// Whether a request has been held in this case (only the first is).
    holding_done: bool,
}

/// Whether `method` is among the `withhold` patterns (`*` for any).
fn withheld(patterns: &[String], method: &str) -> bool {
    patterns.iter().any(|p| p == "*" || p == method)
}

impl Answerer for EditorRole {
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
        within: Duration,
    ) -> AnswerFuture<'a> {
        Box::pin(async move {
            if !self.holding_done && withheld(&self.withhold, method) {
                self.holding_done = true;
                self.held
                    .push((id.clone(), method.to_owned(), params.clone()));
                return None;
            }
            let answer = self.editor.answer(method, params, within).await;
            Some(answer.to_message(id))
        })
    }
}

/// What came of waiting for a prompt's turn to end.
enum TurnEnd {
    Answered(Result<Value, Value>),
    /// Nothing to stand on: a skip, or a missing answer, is recorded.
    Over,
}

/// What came of waiting for a prompt to provoke what it asks.
enum Provoked {
    Yes,
    /// The turn ended first.
    Ended(Result<Value, Value>),
    /// Neither, within the bound and its grace (the turn still runs, and
    /// the agent answered the liveness probe, or there was none): what the
    /// wait saw.
    No(Waited),
    /// Neither, and the agent did not answer the liveness probe either.
    Stuck(Waited),
    /// The agent is gone, or conform could not go on.
    Over,
}

/// Where a case runs: a fresh process, or a shared one.
enum Start {
    Fresh(LineStream),
    Shared(Conn),
}

struct CaseRun<'a> {
    ctx: &'a Context,
    case_id: String,
    config: Config,
    s: Session<Monitor>,
    role: EditorRole,
    workspace: PathBuf,
    /// The MCP stub's script and record, for `config.mcp`.
    mcp: Option<(tempfile::TempDir, PathBuf)>,
    /// The `protocolVersion` of the last initialize a step sent.
    asked_version: Option<Value>,
    /// The agent process, when it is a shared one.
    shared: Option<(Profile, Value, usize, usize)>,
    /// The last cancel conform sent, which bounds the end of what it cancelled.
    cancelled: Option<Cancelled>,
}

/// The requirements a turn that does not end after a cancel breaks.
const CANCEL_RULE: &str = "acp.cancel.stop-reason-cancelled";
const CANCEL_REQUEST_RULE: &str = "acp.cancel.request-must-respond-agent";

/// A cancel conform sent: when, what it was, and what it cancels.
#[derive(Debug, Clone)]
struct Cancelled {
    at: Instant,
    /// The requirement an answer that never comes breaks.
    rule: &'static str,
    /// The notification, as the reports name it.
    how: &'static str,
    /// Whether acting on it is optional (`$/cancel_request`: "Cancellation
    /// remains optional"), so a turn that visibly works on is no breach.
    optional: bool,
    /// The request it cancels (`$/cancel_request`), or every turn awaited
    /// after it (`session/cancel`).
    key: Option<String>,
}

impl Context {
    pub async fn run_case(&self, case: &Case<super::AgentCases>) -> CaseResult {
        let started = Instant::now();
        let mut early = Evidence::default();
        if let Some((why, kind)) = self.probe.skip_reason(&case.needs) {
            early.skip(why, kind);
            return CaseResult::graded(case, early, self.strict, started, vec![]);
        }
        if let Some((why, blamed)) = self.probe.setup_blocked(case.config.setup) {
            match blamed {
                // The case that reports it runs: this one is not failed for it again.
                Some(c) if self.selected.contains(c) && c != case.id => early.skip(
                    format!("{why}; {c} reports it, so this case is not failed for it again"),
                    SkipKind::Outside,
                ),
                Some(_) => {
                    early.fail(Kind::Missing, why);
                }
                None => early.skip(why, SkipKind::Outside),
            }
            return CaseResult::graded(case, early, self.strict, started, vec![]);
        }
        if !self.isolate && shareable(case) {
            let profile = case.config.client;
            let conn = self.take_conn(profile).await;
            if let Some(conn) = conn {
                let number = conn.number;
                let (result, back, why) = self.run_on(case, Start::Shared(conn), started).await;
                match why {
                    None => {
                        if let Some(c) = back {
                            self.give_back(c);
                        }
                        return result;
                    }
                    Some(why) => {
                        self.reruns.fetch_add(1, Ordering::Relaxed);
                        let note = format!(
                            "rerun on a fresh agent process: the shared process #{number} {why} during this case"
                        );
                        return self.run_fresh(case, Some(note)).await;
                    }
                }
            }
        }
        self.run_fresh(case, None).await
    }

    async fn run_fresh(&self, case: &Case<super::AgentCases>, note: Option<String>) -> CaseResult {
        let started = Instant::now();
        let stream = match spawn(Some(self), &self.launcher) {
            Ok(s) => s,
            Err(e) => {
                return CaseResult::graded(
                    case,
                    Evidence::failed_to_run(e),
                    self.strict,
                    started,
                    vec![],
                );
            }
        };
        let (mut result, _, _) = self.run_on(case, Start::Fresh(stream), started).await;
        if let Some(n) = note {
            result.message = if result.message.is_empty() {
                n
            } else {
                format!("{}\n{n}", result.message)
            };
        }
        result
    }

    /// An idle shared process of `profile`, or a new one initialized with it.
    async fn take_conn(&self, profile: Profile) -> Option<Conn> {
        let idle = self.pool.lock().ok().and_then(|mut p| {
            let i = p.iter().position(|c| c.profile == profile)?;
            Some(p.swap_remove(i))
        });
        if idle.is_some() {
            return idle;
        }
        let mut stream = spawn(Some(self), &self.launcher).ok()?;
        let number = self.started.load(Ordering::Relaxed);
        let mut monitor = Monitor::new();
        let init = json!({"jsonrpc": "2.0", "id": FIRST_ID, "method": "initialize",
            "params": initialize_params(profile.capabilities())});
        let mut wrote = false;
        match exchange(&mut stream, &mut monitor, &init, self.startup, &mut wrote).await {
            Ok(Ok(result)) if monitor.violations.is_empty() => Some(Conn {
                stream,
                profile,
                initialize: result,
                number,
                served: 0,
                sessions: vec![],
            }),
            // A handshake that did not go well on a shared process: the
            // case runs on a fresh one, where it is seen whole.
            _ => {
                let _ = stream.process.shutdown(process::TERM_GRACE).await;
                None
            }
        }
    }

    pub fn give_back(&self, conn: Conn) {
        if let Ok(mut p) = self.pool.lock() {
            p.push(conn);
        }
    }

    /// Runs `case` from `start`; returns its result, the shared process to
    /// keep, and why the case must be rerun on a fresh process, if it must.
    async fn run_on(
        &self,
        case: &Case<super::AgentCases>,
        start: Start,
        started: Instant,
    ) -> (CaseResult, Option<Conn>, Option<String>) {
        let workspace = match super::workspace() {
            Ok(w) => w,
            Err(e) => {
                let r = CaseResult::graded(
                    case,
                    Evidence::failed_to_run(e),
                    self.strict,
                    started,
                    vec![],
                );
                return (r, None, None);
            }
        };
        let config: Config = case.config.clone();
        let ws = workspace.path().to_path_buf();
        let (stream, shared, monitor) = match start {
            Start::Fresh(stream) => (stream, None, Monitor::new()),
            Start::Shared(conn) => {
                let monitor = Monitor::resumed(
                    conn.profile.capabilities(),
                    conn.initialize.get("agentCapabilities").cloned(),
                    &conn.sessions,
                );
                let shared = (conn.profile, conn.initialize, conn.number, conn.served + 1);
                (conn.stream, Some(shared), monitor)
            }
        };
        let mut run = CaseRun {
            ctx: self,
            case_id: case.id.clone(),
            role: EditorRole {
                editor: Editor::new(ws.clone(), config.permission),
                withhold: config.withhold.clone(),
                held: Vec::new(),
                holding_done: false,
            },
            config,
            s: Session::new(stream, "agent", monitor, started, FIRST_ID).with_liveness(PROBE),
            workspace: ws,
            mcp: None,
            asked_version: None,
            shared,
            cancelled: None,
        };
        run.s
            .vars
            .set("workspace", json!(run.workspace.display().to_string()));
        if let Some((_, _, number, served)) = &run.shared {
            let what = format!("on shared agent process #{number}, its case {served}");
            run.s.log(Direction::Event, what.as_bytes());
        }
        if run.config.mcp
            && let Err(e) = run.prepare_mcp()
        {
            run.s.ev.error(e);
        }
        run.setup().await;
        // A set-up that failed leaves the steps nothing to stand on.
        let mut stop = !run.s.ev.findings.is_empty();
        for (i, step) in case.steps.iter().enumerate() {
            if stop || !run.s.goes_on() {
                break;
            }
            let before = run.s.ev.findings.len();
            run.step(i, step).await;
            // A step that found something wrong leaves the next steps
            // nothing to stand on either.
            stop = run.s.ev.findings.len() > before;
        }
        if run.shared.is_some() {
            return run.end_shared(case, started).await;
        }
        let result = run
            .s
            .graded(&mut run.role, EXIT_GRACE, case, self.strict, started)
            .await;
        drop(workspace);
        (result, None, None)
    }
}

/// Whether a case needs only a fresh session on an agent process that has
/// shaken hands already: no handshake of its own, no raw bytes, no stdin
/// closed, not disruptive, no MCP server to leave behind.
fn shareable(case: &Case<super::AgentCases>) -> bool {
    case.phase == Phase::Main
        && case.config.setup == Setup::Session
        && !case.config.mcp
        && case.steps.iter().all(|s| {
            !matches!(
                s.action,
                Action::Write(_) | Action::CloseStdin | Action::ExitsWithin(_)
            )
        })
}

impl CaseRun<'_> {
    /// Ends a case on a shared process: syncs with the agent so what it
    /// wrote for this case is read in this case, grades it, and says
    /// whether the process can serve the next one, or the case must be
    /// rerun on a fresh process.
    async fn end_shared(
        mut self,
        case: &Case<super::AgentCases>,
        started: Instant,
    ) -> (CaseResult, Option<Conn>, Option<String>) {
        let rerun = if self.s.closed {
            Some("closed its stdout".to_owned())
        } else if self.s.stalled && self.s.ev.skip.is_none() {
            Some("stopped answering".to_owned())
        } else {
            None
        };
        let mut keep = rerun.is_none()
            && self.role.held.is_empty()
            && !self.s.watch.any_turn_running()
            && self.s.ev.error.is_none()
            && !self.s.stalled;
        if keep {
            keep = self.sync().await;
        }
        let (profile, initialize, number, served) = self.shared.take().expect("a shared case");
        let mut sessions = self.s.watch.session_ids();
        if sessions.len() > SESSIONS_KEPT {
            sessions.drain(..sessions.len() - SESSIONS_KEPT);
        }
        let (ev, transcript, mut stream) = self.s.into_parts();
        if rerun.is_some() || !keep {
            stream.close_stdin();
            let _ = stream.process.shutdown(process::TERM_GRACE).await;
        }
        if rerun.is_some() {
            let r = CaseResult::graded(case, Evidence::default(), self.ctx.strict, started, vec![]);
            return (r, None, rerun);
        }
        let result = CaseResult::graded(
            case,
            ev,
            self.ctx.strict,
            started,
            transcript.into_entries(),
        );
        let back = keep.then_some(Conn {
            stream,
            profile,
            initialize,
            number,
            served,
            sessions,
        });
        (result, back, None)
    }

    /// A request for a method no agent has (`conform/sync`): whatever the
    /// agent wrote for this case before it answers is read in this case.
    /// Its answer is not judged; no answer gives the process up.
    async fn sync(&mut self) -> bool {
        let Some(key) = self.s.request("conform/sync", json!({})).await else {
            return false;
        };
        let k = key.clone();
        self.s
            .pump(&mut self.role, Instant::now() + SYNC_DEADLINE, &|s| {
                s.answers.contains_key(&k)
            })
            .await;
        self.s.answers.remove(&key).is_some() && !self.s.closed
    }

    /// The MCP stub's script, record and `${mcpStub}`: a stdio server entry
    /// that starts `conform peer --protocol acp` on an MCP script.
    fn prepare_mcp(&mut self) -> Result<(), String> {
        let dir = tempfile::Builder::new()
            .prefix("conform-mcp-")
            .tempdir()
            .map_err(|e| format!("cannot create the MCP stub's directory: {e}"))?;
        let script = dir.path().join("script.json");
        let record = dir.path().join("record.jsonl");
        std::fs::write(&script, super::mcp_stub::SCRIPT)
            .map_err(|e| format!("cannot write the MCP stub's script: {e}"))?;
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find conform's own executable: {e}"))?;
        self.s.vars.set(
            "mcpStub",
            json!({
                "name": "conform-mcp-stub",
                "command": exe.display().to_string(),
                "args": ["peer", "--protocol", "acp", "--script", script.display().to_string(),
                    "--record", record.display().to_string()],
                "env": [],
            }),
        );
        self.mcp = Some((dir, record));
        Ok(())
    }

    async fn setup(&mut self) {
        if self.config.setup == Setup::None {
            return;
        }
        if let Some((_, initialize, _, _)) = &self.shared {
            // The shared process shook hands when it started.
            let init = initialize.clone();
            self.s.vars.set("initialize", init);
        } else {
            let params = initialize_params(self.config.client.capabilities());
            let Some(key) = self.s.request("initialize", params).await else {
                return;
            };
            let startup = self.ctx.startup;
            if !self.started_in_time(&key, startup).await {
                return;
            }
            match self
                .s
                .answer(&mut self.role, &key, "initialize", startup)
                .await
            {
                Some(Ok(result)) => self.s.vars.set("initialize", result),
                Some(Err(e)) => {
                    let why = format!(
                        "set-up: the agent answered initialize with an error ({})",
                        matcher::brief(&e)
                    );
                    self.setup_failed(why, HANDSHAKE_CASE);
                    return;
                }
                None => return,
            }
        }
        if self.config.setup != Setup::Session || !self.s.goes_on() {
            return;
        }
        let params = json!({"cwd": self.workspace.display().to_string(), "mcpServers": []});
        let Some(key) = self.s.request("session/new", params).await else {
            return;
        };
        match self
            .s
            .answer(&mut self.role, &key, "session/new", request_bound())
            .await
        {
            // A session the steps cannot name is a failed set-up, as an
            // error would be: the session case reports what the result
            // lacks, and no step sends a prompt for a session it was never
            // given.
            Some(Ok(result)) if result["sessionId"].as_str().is_none_or(str::is_empty) => {
                let why = format!(
                    "set-up: the session/new result gives no sessionId ({})",
                    matcher::brief(&result)
                );
                self.setup_failed(why, SESSION_CASE);
            }
            Some(Ok(result)) => self.set_session(result),
            Some(Err(e)) => match outside_protocol("session/new", &e, self.auth_offered()) {
                Some(why) => self.s.ev.skip(why, SkipKind::Outside),
                None => {
                    let why = format!("set-up: session/new failed ({})", matcher::brief(&e));
                    self.setup_failed(why, SESSION_CASE);
                }
            },
            None => {}
        }
    }

    /// Waits for the answer to a fresh process's `initialize`: the start-up
    /// bound (`--startup-timeout`, adapted to the agent's first answer),
    /// then a grace (no probe: an agent still starting answers nothing),
    /// then the liveness probe for a grace more. The agent answered the
    /// run's probe process: one that answers neither here is only slow to
    /// start this time (a loaded machine), conform's bound, not the agent's
    /// breach, so the case is skipped naming it. One that answers the probe
    /// and not this initialize fails the reply rule; an answer in a grace
    /// is noted as slow. One that dies, or whose answer comes, goes on to
    /// be judged.
    async fn started_in_time(&mut self, key: &str, startup: Duration) -> bool {
        let start = Instant::now();
        let grace = patience::grace(startup);
        let k = key.to_owned();
        self.s
            .pump(&mut self.role, start + startup + grace, &|s| {
                s.answers.contains_key(&k) || s.closed
            })
            .await;
        if self.s.answers.contains_key(key) {
            if start.elapsed() > startup {
                let note = patience::slow_note("initialize", start.elapsed(), startup);
                self.s.ev.notes.push(note);
            }
            return true;
        }
        if self.s.closed || self.s.ev.error.is_some() {
            return true;
        }
        // Then the liveness probe on this connection, for one grace more:
        // an agent still starting answers nothing, one that serves answers
        // the probe, and its silence on this initialize is its own (an id it
        // takes for a notification's, a request it dropped).
        let (answer, live) = self.s.in_grace(&mut self.role, key, grace).await;
        if let Some(a) = answer {
            let note = patience::slow_note("initialize", start.elapsed(), startup);
            self.s.ev.notes.push(note);
            self.s.answers.insert(key.to_owned(), a);
            return true;
        }
        if matches!(live, Liveness::Alive(_) | Liveness::Gone) {
            let waited = patience::Waited {
                answer: None,
                after: start.elapsed(),
                bound: startup,
                grace: grace + grace,
                liveness: live,
            };
            self.s.missing("initialize", &waited);
            return false;
        }
        self.s.stalled = true;
        self.s.ev.skip(
            format!(
                "the agent did not answer initialize within {}, nor the probe on its connection, though another process answered the run's (the bound is --startup-timeout, adapted to its first answer)",
                patience::waited(start.elapsed(), startup, grace + grace)
            ),
            SkipKind::Outside,
        );
        false
    }

    /// A set-up step the agent answered with an error: the case that checks
    /// that step reports it, when the run has it; otherwise this case fails.
    fn setup_failed(&mut self, why: String, blamed: &str) {
        if self.ctx.selected.contains(blamed) && self.case_id != blamed {
            self.s.ev.skip(
                format!("{why}; {blamed} reports it, so this case is not failed for it again"),
                SkipKind::Outside,
            );
        } else if self.case_id == blamed {
            self.s.ev.fail(Kind::WrongKind, why);
        } else {
            // The case that checks this step was not selected: this case
            // fails, so the run does not pass, but the failure is charged
            // to none of the requirements this case is about.
            self.s.ev.setup_failed(Kind::WrongKind, why);
        }
    }

    /// The variables a `session/new` result gives the steps.
    fn set_session(&mut self, result: Value) {
        self.s.vars.set(
            "session",
            result.get("sessionId").cloned().unwrap_or(Value::Null),
        );
        // A mode to switch to: another than the current one, if any.
        let current = result.pointer("/modes/currentModeId").cloned();
        let modes = result
            .pointer("/modes/availableModes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let other = modes
            .iter()
            .filter_map(|m| m.get("id"))
            .find(|id| Some(*id) != current.as_ref())
            .or(current.as_ref())
            .cloned();
        if let Some(m) = other {
            self.s.vars.set("modeId", m);
        }
        if let Some(o) = result
            .get("configOptions")
            .and_then(Value::as_array)
            .and_then(|o| o.first())
        {
            self.s
                .vars
                .set("configId", o.get("id").cloned().unwrap_or(Value::Null));
            self.s.vars.set(
                "configValue",
                o.get("currentValue").cloned().unwrap_or(Value::Null),
            );
        }
        self.s.vars.set("new", result);
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.s.watch.agent_requests.len(),
            self.s.watch.updates.len(),
        )
    }

    async fn step(&mut self, index: usize, step: &Step) {
        let before = self.counts();
        match &step.action {
            Action::Write(bytes) => {
                let Some(bytes) = self.s.raw_bytes(bytes) else {
                    return;
                };
                if let Some(name) = &step.name {
                    // An answer to bytes that are no request has a null id.
                    self.s.named.insert(
                        name.clone(),
                        (super::monitor::id_key(&Value::Null), format!("`{name}`")),
                    );
                }
                self.s.write_raw(&bytes, &step.pauses).await;
            }
            Action::Send(send) => {
                let Some(params) = self.s.expand(&send.params) else {
                    return;
                };
                if send.notification {
                    self.s
                        .send(&json!({"jsonrpc": "2.0", "method": send.method, "params": params}))
                        .await;
                    if send.method == "$/cancel_request"
                        && let Some(id) = params.get("requestId")
                    {
                        self.cancelled = Some(Cancelled {
                            at: Instant::now(),
                            rule: CANCEL_REQUEST_RULE,
                            how: "$/cancel_request",
                            optional: true,
                            key: Some(super::monitor::id_key(id)),
                        });
                    }
                    return;
                }
                let id = match &send.id {
                    Some(id) => match self.s.expand(id) {
                        Some(v) => v,
                        None => return,
                    },
                    None => self.s.next_id(),
                };
                if send.method == "initialize" {
                    self.asked_version = params.get("protocolVersion").cloned();
                }
                let message =
                    json!({"jsonrpc": "2.0", "id": id, "method": send.method, "params": params});
                let Some(key) = self.s.send(&message).await else {
                    return;
                };
                // A first initialize may take as long as the agent's start-up.
                let default = if send.method == "initialize" {
                    self.ctx.startup.max(request_bound())
                } else {
                    request_bound()
                };
                self.after_request(step, key, &send.method, default, before)
                    .await;
            }
            Action::Own(Own::Prompt(prompt)) => self.prompt(step, prompt).await,
            Action::Await(name) => {
                let Some((key, method)) = self.s.named.get(name).cloned() else {
                    self.s
                        .ev
                        .error(format!("step {index}: no request named `{name}` to await"));
                    return;
                };
                let what = format!("`{name}`");
                let within = step.deadline_or(turn_bound());
                let answer = if method == "session/prompt" {
                    match self.await_turn(&key, &what, within).await {
                        TurnEnd::Answered(a) => Some(a),
                        TurnEnd::Over => None,
                    }
                } else if let Some(c) = self.cancel_of(&key, false) {
                    self.await_cancelled(&key, &what, within, c).await
                } else {
                    let a = self.s.answer(&mut self.role, &key, &what, within).await;
                    // Bytes that are no request (a `raw` step's) are no rpc
                    // call: silence breaks no rule of replying, only what
                    // the case expects.
                    if a.is_none() && key == super::monitor::id_key(&Value::Null) {
                        for f in &mut self.s.ev.findings {
                            if f.kind == Kind::Missing {
                                f.requirement = None;
                            }
                        }
                    }
                    a
                };
                if let Some(a) = answer {
                    self.judge(step.expect.as_ref(), &what, &a, before);
                }
            }
            Action::WaitFor(method) => {
                let within = step.deadline_or(WAIT_FOR_DEADLINE);
                let m = method.clone();
                // Done when the agent asks, or when no turn is left to ask in.
                let seen = self
                    .s
                    .pump(&mut self.role, Instant::now() + within, &|s| {
                        s.watch.agent_requests.iter().any(|q| q.method == m)
                            || !s.watch.any_turn_running()
                    })
                    .await;
                let asked = self
                    .s
                    .watch
                    .agent_requests
                    .iter()
                    .any(|q| q.method == *method);
                if (!seen || !asked) && self.s.ev.findings.is_empty() {
                    let why = self.why_no_turn().unwrap_or_else(|| {
                        format!(
                            "the agent did not call {method} in the turn (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                        )
                    });
                    self.s.ev.skip(why, SkipKind::Outside);
                }
            }
            Action::Own(Own::Cancel(session)) => self.cancel(session).await,
            Action::Own(Own::Release) => self.release().await,
            Action::Own(Own::McpConnected(secs)) => self.mcp_connected(*secs).await,
            Action::Quiet(_) | Action::Probe | Action::CloseStdin | Action::ExitsWithin(_) => {
                self.s.common(&mut self.role, step, &PROBE).await;
            }
        }
    }

    /// Answers every request held back.
    async fn release(&mut self) {
        let held = std::mem::take(&mut self.role.held);
        for (id, method, params) in held {
            let a = self
                .role
                .editor
                .answer(&method, &params, REQUEST_DEADLINE)
                .await;
            self.s.send(&a.to_message(&id)).await;
        }
    }

    /// `session/prompt` on the session the step names (`${session}` by
    /// default): one text, the given blocks, or a directive's ladder, each
    /// rung a turn, until the agent does what the directive asks.
    async fn prompt(&mut self, step: &Step, prompt: &Prompt) {
        if self.prompts_stopped() {
            return;
        }
        let ladder = match &prompt.directive {
            Some(d) => {
                let Some(Value::String(line)) = self.s.expand(&json!(d)) else {
                    return;
                };
                match self.ctx.book.ladder(&line, &self.workspace) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        self.s.ev.error(e);
                        return;
                    }
                }
            }
            None => None,
        };
        let mut until: Vec<Trigger> = match (&prompt.until, &ladder) {
            (Some(u), _) => u.iter().map(|t| Trigger::parse(t)).collect(),
            (None, Some(l)) => l.until.clone(),
            (None, None) => vec![],
        };
        // A case that holds a request back waits for the agent to make one.
        if !step.wait && !self.config.withhold.is_empty() {
            until = vec![];
        }
        let mut texts: Vec<(Value, Option<Rung>)> = match (&ladder, &prompt.text, &prompt.blocks) {
            (Some(l), _, _) => l
                .rungs
                .iter()
                .map(|r| (json!([{"type": "text", "text": r.text}]), Some(r.clone())))
                .collect(),
            (None, Some(t), _) => vec![(json!([{"type": "text", "text": t}]), None)],
            (None, _, Some(b)) => vec![(b.clone(), None)],
            _ => vec![],
        };
        // A case that withholds a capability: first the control proves the
        // directive provokes the action where the capability is offered.
        let mut controlled = false;
        if let (Some(profile), Some(l)) = (prompt.control, &ladder) {
            match self.control(prompt, profile, l).await {
                Control::Provoked { rung, note } => {
                    self.s.ev.notes.push(note);
                    if let Some(i) = texts
                        .iter()
                        .position(|(_, r)| r.as_ref().is_some_and(|r| r.index == rung))
                    {
                        texts = vec![texts.swap_remove(i)];
                    }
                    // The same phrasing, judged on its turn whatever it
                    // provokes: refraining is what the case asks for.
                    until = vec![];
                    controlled = true;
                }
                Control::Not(why) => {
                    self.s.ev.notes.push(why);
                    // Only the forbidden call itself makes the case apply.
                    until = step
                        .expect
                        .as_ref()
                        .map(|e| {
                            e.no_requests
                                .iter()
                                .cloned()
                                .map(Trigger::Request)
                                .collect()
                        })
                        .unwrap_or_default();
                }
            }
            if self.prompts_stopped() {
                return;
            }
        }
        // A step the source leaves optional (a permission request) that the
        // agent did without: counted per rung, what it did said.
        let optional = ladder
            .as_ref()
            .filter(|_| prompt.until.is_none() && !until.is_empty())
            .and_then(|l| l.optional.clone());
        let mut reached: Vec<String> = Vec::new();
        let session = prompt
            .session
            .clone()
            .unwrap_or_else(|| "${session}".into());
        let last = texts.len();
        for (i, (blocks, rung)) in texts.into_iter().enumerate() {
            // A later rung starts afresh, in a new session: a model is not
            // led by the turns that went before, and what a session's
            // several turns must obey is the business of the cases that
            // mean to give it several. A prompt that names its session
            // keeps it.
            if i > 0 && prompt.session.is_none() && !self.fresh_session().await {
                return;
            }
            let Some(params) = self
                .s
                .expand(&json!({"sessionId": session, "prompt": blocks}))
            else {
                return;
            };
            let before = self.counts();
            let sent_at = Instant::now();
            let Some(key) = self.s.request("session/prompt", params).await else {
                return;
            };
            if let Some(name) = &step.name {
                self.s
                    .named
                    .insert(name.clone(), (key.clone(), "session/prompt".into()));
            }
            let final_rung = i + 1 == last;
            if !step.wait && until.is_empty() && self.config.withhold.is_empty() {
                // Nothing to wait for: a later step awaits the turn.
                return;
            }
            if !step.wait {
                match self.until_provoked(&key, &until, before, sent_at).await {
                    Provoked::Yes => {
                        self.worked(ladder.as_ref(), rung.as_ref(), &until);
                        return;
                    }
                    Provoked::Ended(answer) => {
                        if let Err(e) = &answer
                            && let Some(why) = outside_protocol("session/prompt", e, false)
                        {
                            self.s.ev.skip(why, SkipKind::Outside);
                            return;
                        }
                        if answer.is_ok() {
                            self.reached_without(optional.as_ref(), before, &mut reached);
                        }
                        if final_rung {
                            self.unprovoked_or_optional(
                                ladder.as_ref(),
                                &until,
                                "the turn ended first",
                                optional.as_ref(),
                                &reached,
                            );
                            return;
                        }
                    }
                    Provoked::No(waited) => {
                        let why = match waited.liveness {
                            Liveness::Alive(_) => format!(
                                "nothing within {}; {}",
                                waited.waited(),
                                waited.liveness.describe(PROBE.what)
                            ),
                            _ => format!("nothing within {}", waited.waited()),
                        };
                        self.unprovoked(ladder.as_ref(), &until, &why);
                        return;
                    }
                    // "When a rpc call is made, the Server MUST reply with
                    // a Response": the probe went unanswered too.
                    Provoked::Stuck(waited) => {
                        self.s.missing("session/prompt", &waited);
                        return;
                    }
                    Provoked::Over => return,
                }
                continue;
            }
            let within = step.deadline_or(turn_bound());
            let answer = match self.await_turn(&key, "session/prompt", within).await {
                TurnEnd::Answered(a) => a,
                TurnEnd::Over => return,
            };
            let provoked = until.is_empty() || self.provoked(&until, before, false);
            if provoked || answer.is_err() {
                if provoked && answer.is_ok() && !controlled {
                    self.worked(ladder.as_ref(), rung.as_ref(), &until);
                }
                if let (Some(name), Ok(v)) = (&step.name, &answer) {
                    self.s.vars.set(name.clone(), v.clone());
                }
                self.judge(step.expect.as_ref(), "session/prompt", &answer, before);
                return;
            }
            self.reached_without(optional.as_ref(), before, &mut reached);
            if final_rung {
                self.unprovoked_or_optional(
                    ladder.as_ref(),
                    &until,
                    "every turn ended without it",
                    optional.as_ref(),
                    &reached,
                );
                return;
            }
        }
    }

    /// Whether conform sends no more prompts to this agent (an earlier turn
    /// outlived its bound); the case is then skipped, saying so.
    fn prompts_stopped(&mut self) -> bool {
        let Some(case) = self.ctx.stopped_by() else {
            return false;
        };
        self.s.ev.skip(
            format!(
                "an earlier turn (in {case}) outlived conform's bound of {}, so conform sends no more prompts to this agent",
                patience::secs(turn_bound())
            ),
            SkipKind::Outside,
        );
        true
    }

    /// The control of a prompt whose case withholds a capability: the same
    /// directive as a case of its own on an agent initialized with
    /// `profile` (which offers the capability), climbing the directive's
    /// ladder until the agent does what the directive asks (its own
    /// `until`). Proven once per directive and profile in a run, whichever
    /// case asks first; the others reuse the phrasing it found.
    /// (A case within a case: the future is boxed, since `run_case` is what
    /// runs this one.)
    fn control<'a>(
        &'a mut self,
        prompt: &'a Prompt,
        profile: Profile,
        ladder: &'a Ladder,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Control> + Send + 'a>> {
        Box::pin(async move { self.control_run(prompt, profile, ladder).await })
    }

    async fn control_run(&mut self, prompt: &Prompt, profile: Profile, ladder: &Ladder) -> Control {
        let key = (prompt.directive.clone().unwrap_or_default(), profile);
        if let Some(c) = self
            .ctx
            .controls
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return c;
        }
        let id = format!("{}{CONTROL_SUFFIX}", self.case_id);
        let step = Step {
            action: Action::Own(Own::Prompt(Prompt {
                directive: prompt.directive.clone(),
                ..Prompt::default()
            })),
            name: None,
            wait: true,
            pauses: vec![],
            expect: None,
            deadline: None,
            extra: Default::default(),
        };
        let case = Case::<super::AgentCases> {
            id: id.clone(),
            title: format!("the control run of {}", self.case_id),
            level: Level::Info,
            requirements: vec![],
            needs: vec![],
            phase: Phase::Main,
            config: Config {
                client: profile,
                ..Config::default()
            },
            for_each: None,
            steps: vec![step],
            finally: vec![],
            charges: Default::default(),
            note: None,
            origin: format!("the control of {}", self.case_id),
        };
        self.s.log(
            Direction::Event,
            format!("control run {id}: the same directive with the capability offered").as_bytes(),
        );
        let result = self.ctx.run_case(&case).await;
        let rung = self
            .ctx
            .provoked
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&id));
        let caps = profile.capabilities();
        let what = ladder
            .until
            .iter()
            .map(Trigger::to_string)
            .collect::<Vec<_>>()
            .join(" or ");
        let control = match rung {
            Some(rung) => Control::Provoked {
                rung,
                note: format!(
                    "control: with clientCapabilities {caps}, on another agent process, phrasing {rung} of {} of `{}` made the agent make {what}; withheld here, the same phrasing's turn is judged on what it did",
                    ladder.rungs.len(),
                    ladder.name
                ),
            },
            None => {
                // A skip says no more than that; anything else is worth saying.
                let how = match result.outcome {
                    crate::outcome::Outcome::Skip => String::new(),
                    other => format!(
                        " (the control run: {} {})",
                        other.as_str(),
                        result.message.lines().next().unwrap_or_default()
                    ),
                };
                Control::Not(format!(
                    "control: with clientCapabilities {caps}, on another agent process, no phrasing of `{}` made the agent make {what} either{how}: the prompt does not work on this agent, so refraining here would show nothing",
                    ladder.name,
                ))
            }
        };
        if let Ok(mut m) = self.ctx.controls.lock() {
            m.entry(key).or_insert_with(|| control.clone());
        }
        control
    }

    /// Records, for a rung whose turn ended without the optional step it
    /// asks for, what the agent did of the action the step is for.
    fn reached_without(
        &self,
        optional: Option<&Optional>,
        before: (usize, usize),
        reached: &mut Vec<String>,
    ) {
        for t in optional.map(|o| o.reached.as_slice()).unwrap_or_default() {
            let said = t.to_string();
            if self.provoked(std::slice::from_ref(t), before, false) && !reached.contains(&said) {
                reached.push(said);
            }
        }
    }

    /// Every rung ended without what the directive asks: when that is a
    /// step the source leaves optional and the agent reached the action
    /// without it, the case does not apply (the agent took a path the
    /// source allows); otherwise the prompt did not work.
    fn unprovoked_or_optional(
        &mut self,
        ladder: Option<&Ladder>,
        until: &[Trigger],
        how: &str,
        optional: Option<&Optional>,
        reached: &[String],
    ) {
        let (Some(o), false) = (optional, reached.is_empty()) else {
            self.unprovoked(ladder, until, how);
            return;
        };
        let step = until
            .iter()
            .map(Trigger::to_string)
            .collect::<Vec<_>>()
            .join(" or ");
        let quote = super::AGENT
            .catalogue()
            .get(&o.requirement)
            .map(|r| format!(": \"{}\" ({})", r.quote, r.source))
            .unwrap_or_default();
        let tried = ladder
            .map(|l| format!("every turn ({} phrasing(s) of `{}`)", l.rungs.len(), l.name))
            .unwrap_or_else(|| "the turn".into());
        self.s.ev.skip(
            format!(
                "not applicable: {tried} ended without {step}, a step the source leaves to the agent, and the agent reached the action without it ({}): [MAY {}]{quote}; so what this case checks about that step does not apply to this agent",
                reached.join(", "),
                o.requirement
            ),
            SkipKind::Optional,
        );
    }

    /// A new session in the workspace for the next rung of a ladder, as
    /// `${session}`; false (the case then stops, on what was recorded) when
    /// the agent does not give one.
    async fn fresh_session(&mut self) -> bool {
        let params = json!({"cwd": self.workspace.display().to_string(), "mcpServers": []});
        let Some(key) = self.s.request("session/new", params).await else {
            return false;
        };
        match self
            .s
            .answer(&mut self.role, &key, "session/new", request_bound())
            .await
        {
            Some(Ok(result)) => {
                let id = result.get("sessionId").cloned().unwrap_or(Value::Null);
                self.s.vars.set("session", id);
                true
            }
            Some(Err(e)) => {
                let why = format!(
                    "the agent answered session/new for the next phrasing with an error: {}",
                    matcher::brief(&e)
                );
                self.s.ev.skip(why, SkipKind::Outside);
                false
            }
            None => false,
        }
    }

    /// Records which phrasing made the agent do what was asked.
    fn worked(&mut self, ladder: Option<&Ladder>, rung: Option<&Rung>, until: &[Trigger]) {
        let (Some(l), Some(r)) = (ladder, rung) else {
            return;
        };
        if let Ok(mut m) = self.ctx.rungs.lock() {
            *m.entry((l.name.clone(), r.index, r.user)).or_default() += 1;
        }
        if self.case_id.ends_with(CONTROL_SUFFIX)
            && let Ok(mut m) = self.ctx.provoked.lock()
        {
            m.insert(self.case_id.clone(), r.index);
        }
        if r.index > 1 || r.user {
            let what = until
                .iter()
                .map(Trigger::to_string)
                .collect::<Vec<_>>()
                .join(" or ");
            self.s.ev.notes.push(format!(
                "prompt `{}`: phrasing {} of {}{} brought {}: {:?}",
                l.name,
                r.index,
                r.of,
                if r.user { " (from --prompts)" } else { "" },
                if what.is_empty() {
                    "the turn".into()
                } else {
                    what
                },
                r.phrasing
            ));
        }
    }

    /// The agent did none of what the directive asks, for any phrasing: the
    /// case cannot apply to it (outside its declaration: it may have a real
    /// model that chose otherwise, or a fake one that reads other words).
    fn unprovoked(&mut self, ladder: Option<&Ladder>, until: &[Trigger], how: &str) {
        let what = if until.is_empty() {
            "a request conform could hold back".to_owned()
        } else {
            until
                .iter()
                .map(Trigger::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        };
        let tried = match ladder {
            Some(l) => format!(
                "any of the {} phrasings of `{}` (corpus/acp/prompts.json, --prompts)",
                l.rungs.len(),
                l.name
            ),
            None => "the prompt".into(),
        };
        let why = self.why_no_turn().unwrap_or_else(|| {
            format!(
                "for {tried}, the agent did not do what the case needs, {what} ({how}), so the case cannot apply"
            )
        });
        self.s.ev.skip(why, SkipKind::Outside);
    }

    /// Whether the agent did any of `until` since `before`.
    fn provoked(&self, until: &[Trigger], before: (usize, usize), running: bool) -> bool {
        triggered(&self.s, until, &[], before, running)
    }

    /// Waits until a prompt that is not awaited provokes what it asks (or,
    /// in a case that holds a request back, until one is held), the turn
    /// ends, or the bound passes.
    async fn until_provoked(
        &mut self,
        key: &str,
        until: &[Trigger],
        before: (usize, usize),
        sent_at: Instant,
    ) -> Provoked {
        let bound = provoke_bound();
        let mut deadline = sent_at + bound;
        let settle = sent_at + SETTLE;
        let hold = self.config.withhold.clone();
        // The liveness probe sent when the bound passed, and when it was
        // answered (from its sending).
        let mut probe: Option<(String, Instant)> = None;
        let mut alive: Option<Duration> = None;
        let mut graced = false;
        let grace = patience::grace(bound);
        loop {
            let now = Instant::now();
            let running_due = now >= settle;
            let stop_at = if until.contains(&Trigger::Running) && !running_due {
                settle
            } else {
                deadline
            };
            let k = key.to_owned();
            let u = until.to_vec();
            let h = hold.clone();
            let pk = probe
                .as_ref()
                .filter(|_| alive.is_none())
                .map(|(p, _)| p.clone());
            self.s
                .pump(&mut self.role, stop_at, &|s| {
                    s.answers.contains_key(&k)
                        || triggered(s, &u, &h, before, running_due)
                        || pk.as_ref().is_some_and(|p| s.answers.contains_key(p))
                })
                .await;
            if let Some((p, at)) = &probe
                && alive.is_none()
                && self.s.answers.remove(p).is_some()
            {
                alive = Some(at.elapsed());
            }
            if let Some(answer) = self.s.answers.remove(key) {
                return Provoked::Ended(answer);
            }
            let running_due = Instant::now() >= settle;
            if triggered(&self.s, until, &hold, before, running_due) {
                if probe.is_some() {
                    self.s.ev.notes.push(patience::slow_note(
                        "the prompt's awaited request or update",
                        sent_at.elapsed(),
                        bound,
                    ));
                }
                return Provoked::Yes;
            }
            if !self.s.goes_on() || self.s.closed {
                if self.s.closed {
                    self.s
                        .answer(&mut self.role, key, "session/prompt", Duration::ZERO)
                        .await;
                }
                return Provoked::Over;
            }
            if Instant::now() >= deadline {
                // The bound passed: a grace more, with the liveness probe
                // sent now; an agent that answers it is working on the turn.
                if !graced {
                    graced = true;
                    probe = self
                        .s
                        .request(PROBE.method, json!({}))
                        .await
                        .map(|k| (k, Instant::now()));
                    deadline += grace;
                    continue;
                }
                let liveness = match (&probe, alive) {
                    (_, Some(after)) => Liveness::Alive(after),
                    (Some(_), None) => Liveness::Stuck,
                    (None, None) => Liveness::Unprobed,
                };
                let waited = Waited {
                    answer: None,
                    after: sent_at.elapsed(),
                    bound,
                    grace,
                    liveness,
                };
                return match waited.liveness {
                    Liveness::Stuck => Provoked::Stuck(waited),
                    _ => Provoked::No(waited),
                };
            }
        }
    }

    /// Waits for a turn's answer. A turn that outlives conform's bound gets
    /// a grace, during which conform sends its liveness probe: an agent that
    /// answers the probe is working, and a turn that outlives the grace too
    /// is conform's limit, not the agent's breach (the case is skipped,
    /// naming the bound, and the run sends no more prompts to this agent);
    /// an agent that answers neither is stuck ("When a rpc call is made,
    /// the Server MUST reply with a Response"). After a cancel, the bound is
    /// the cancel's ([`Self::await_cancelled`]).
    async fn await_turn(&mut self, key: &str, what: &str, within: Duration) -> TurnEnd {
        if let Some(c) = self.cancel_of(key, true) {
            return match self.await_cancelled(key, what, within, c).await {
                Some(a) => TurnEnd::Answered(a),
                None => TurnEnd::Over,
            };
        }
        let waited = self.s.wait_patiently(&mut self.role, key, within).await;
        if let Some(a) = waited.answer.clone() {
            self.s.ev.notes.extend(waited.slow_note(what));
            return TurnEnd::Answered(a);
        }
        match waited.liveness {
            Liveness::Alive(_) | Liveness::Unprobed => {
                self.ctx.stop_prompts(&self.case_id);
                self.s.stalled = true;
                self.s.ev.skip(
                    format!(
                        "the turn did not end within {}; {} (the sources set no deadline on a turn; a real model may need longer), so conform sends no more prompts to this agent",
                        waited.waited(),
                        waited.liveness.describe(PROBE.what)
                    ),
                    SkipKind::Outside,
                );
            }
            Liveness::Stuck | Liveness::Gone => self.s.missing(what, &waited),
        }
        TurnEnd::Over
    }

    /// The cancel that bounds the answer to request `key`: a
    /// `$/cancel_request` naming it, or for a turn (`turn`) a
    /// `session/cancel` sent before it is awaited.
    fn cancel_of(&self, key: &str, turn: bool) -> Option<Cancelled> {
        let c = self.cancelled.as_ref()?;
        match &c.key {
            Some(k) => (k == key).then(|| c.clone()),
            None => turn.then(|| c.clone()),
        }
    }

    /// Waits for the answer to `key` after the cancel `c`: within
    /// [`CANCEL_BOUND`] of the cancel, extended one bound at a time (up to
    /// `within` from the cancel) while the agent visibly works on, then a
    /// grace with the liveness probe. No answer breaks the cancel's
    /// requirement, whatever the probe shows; an agent that was still
    /// working on a request whose cancellation is optional is conform's
    /// limit instead.
    async fn await_cancelled(
        &mut self,
        key: &str,
        what: &str,
        within: Duration,
        mut c: Cancelled,
    ) -> Option<Result<Value, Value>> {
        let bound = cancel_bound();
        let late = |s: &mut Session<Monitor>, c: &Cancelled| {
            let took = c.at.elapsed();
            if took > bound {
                s.ev.notes.push(patience::slow_note(
                    &format!("{what} (after {})", c.how),
                    took,
                    bound,
                ));
            }
        };
        let mut working = false;
        loop {
            let ceiling = c.at + within.max(bound);
            let mut until = c.at + bound;
            let mut seen = self.counts();
            loop {
                if let Some(a) = self.s.until_answered(&mut self.role, key, until).await {
                    late(&mut self.s, &c);
                    return Some(a);
                }
                if self.s.closed || self.s.ev.error.is_some() {
                    break;
                }
                let now = self.counts();
                working = now != seen;
                if !working || until >= ceiling {
                    break;
                }
                seen = now;
                until = (until + bound).min(ceiling);
            }
            if self.s.closed || self.s.ev.error.is_some() || !c.optional {
                break;
            }
            // Acting on `$/cancel_request` is optional ("Cancellation
            // remains optional"), so an agent that ignores it answers when
            // its turn ends; `session/cancel` is not optional ("the Agent
            // MUST respond to the original session/prompt request with the
            // cancelled stop reason"). A turn still running is cancelled so,
            // and its answer is bounded from there.
            let Some(session) = self.s.watch.session_of_turn(key) else {
                break;
            };
            self.s.ev.notes.push(format!(
                "{what} was not answered within {} of $/cancel_request (acting on it is optional): conform sent session/cancel, which is not",
                patience::secs(c.at.elapsed())
            ));
            self.s
                .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
                .await;
            c = Cancelled {
                at: Instant::now(),
                rule: CANCEL_REQUEST_RULE,
                how: "$/cancel_request and then session/cancel",
                optional: false,
                key: Some(key.to_owned()),
            };
            self.cancelled = Some(c.clone());
            self.answer_held().await;
        }
        let grace = patience::grace(bound);
        let (answer, live) = self.s.in_grace(&mut self.role, key, grace).await;
        if let Some(a) = answer {
            late(&mut self.s, &c);
            return Some(a);
        }
        let waited = Waited {
            answer: None,
            after: c.at.elapsed(),
            bound,
            grace,
            liveness: live,
        };
        if matches!(live, Liveness::Gone) {
            self.s.missing(what, &waited);
            return None;
        }
        self.s.stalled = true;
        if c.optional && working && matches!(live, Liveness::Alive(_)) {
            self.ctx.stop_prompts(&self.case_id);
            self.s.ev.skip(
                format!(
                    "{what} was not answered within {} of {}, but the agent was still working on it (cancelling is optional, and it kept sending) and {}: conform's limit, so conform sends no more prompts to this agent",
                    patience::secs(waited.after),
                    c.how,
                    live.describe(PROBE.what)
                ),
                SkipKind::Outside,
            );
            return None;
        }
        let why = format!(
            "no answer within {} of {} (conform's bound on an answer after a cancel is {} from the cancel{}, then a grace of {}); {}",
            patience::secs(waited.after),
            c.how,
            patience::secs(bound),
            if working {
                format!(
                    ", extended while the agent kept working, to at most {}",
                    patience::secs(within.max(bound))
                )
            } else {
                String::new()
            },
            patience::secs(grace),
            live.describe(PROBE.what)
        );
        self.s
            .ev
            .broke(c.rule, Kind::Missing, format!("{what}: {why}"))
            .seen(format!("an answer to {what} after {}", c.how), why);
        if live == Liveness::Stuck {
            self.s.missing(what, &waited);
        }
        None
    }

    /// `session/cancel` for `session` while its turn runs, then the
    /// cancelled outcome for a permission request held back, and its answer
    /// for any other.
    async fn cancel(&mut self, session: &str) {
        let Some(session) = self.s.expand(&json!(session)) else {
            return;
        };
        if !self
            .s
            .watch
            .turn_running(session.as_str().unwrap_or_default())
        {
            let why = self.why_no_turn().unwrap_or_else(|| {
                "the turn had already ended when conform was to cancel it".into()
            });
            self.s.ev.skip(why, SkipKind::Outside);
            return;
        }
        self.s
            .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
            .await;
        // The bound on the turn's end starts here.
        self.cancelled = Some(Cancelled {
            at: Instant::now(),
            rule: CANCEL_RULE,
            how: "session/cancel",
            optional: false,
            key: None,
        });
        self.answer_held().await;
    }

    /// After a cancel, the agent's requests conform held back are answered:
    /// "The Client MUST respond to all pending session/request_permission
    /// requests with the cancelled outcome", and any other with its answer.
    async fn answer_held(&mut self) {
        let held = std::mem::take(&mut self.role.held);
        for (id, method, params) in held {
            let a = if method == "session/request_permission" {
                self.role.editor.permission(&params, Permission::Cancelled)
            } else {
                self.role
                    .editor
                    .answer(&method, &params, REQUEST_DEADLINE)
                    .await
            };
            self.s.send(&a.to_message(&id)).await;
        }
    }

    /// Waits for the agent to connect to the MCP stub: its `initialize` and
    /// `tools/list` in the stub's record.
    async fn mcp_connected(&mut self, secs: f64) {
        let Some((_, record)) = &self.mcp else {
            self.s
                .ev
                .error("mcpConnected needs `\"mcp\": true` in the case's config");
            return;
        };
        let record = record.clone();
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let seen = |record: &std::path::Path| -> Vec<String> {
            std::fs::read_to_string(record)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
                .collect()
        };
        loop {
            let methods = seen(&record);
            if methods.iter().any(|m| m == "tools/list") {
                self.s.ev.observe(format!(
                    "the agent connected to the stdio MCP server: {}",
                    methods.join(", ")
                ));
                return;
            }
            if Instant::now() >= until || self.s.closed {
                let got = if methods.is_empty() {
                    "nothing".to_owned()
                } else {
                    methods.join(", ")
                };
                self.s.ev.fail(
                    Kind::Missing,
                    format!(
                        "the agent did not connect to the stdio MCP server within {secs:.0}s (MCP initialize and tools/list); the server received {got}"
                    ),
                );
                return;
            }
            let slice = (Instant::now() + Duration::from_millis(100)).min(until);
            self.s.pump(&mut self.role, slice, &|_| false).await;
        }
    }

    async fn after_request(
        &mut self,
        step: &Step,
        key: String,
        method: &str,
        default: Duration,
        before: (usize, usize),
    ) {
        if let Some(name) = &step.name {
            self.s
                .named
                .insert(name.clone(), (key.clone(), method.to_owned()));
        }
        if !step.wait {
            return;
        }
        let within = step.deadline_or(default);
        if method == "initialize"
            && self.shared.is_none()
            && !self.started_in_time(&key, within).await
        {
            return;
        }
        let answer = if method == "session/prompt" {
            match self.await_turn(&key, method, within).await {
                TurnEnd::Answered(a) => Some(a),
                TurnEnd::Over => None,
            }
        } else {
            self.s.answer(&mut self.role, &key, method, within).await
        };
        if let Some(a) = answer {
            if let (Some(name), Ok(v)) = (&step.name, &a) {
                self.s.vars.set(name.clone(), v.clone());
            }
            self.judge(step.expect.as_ref(), method, &a, before);
        }
    }

    /// Grades an answer against a step's expectation.
    fn judge(
        &mut self,
        expect: Option<&Expect>,
        method: &str,
        answer: &Result<Value, Value>,
        (requests_before, updates_before): (usize, usize),
    ) {
        let Some(expect) = expect else {
            self.s.conclude(method, answer, vec![]);
            return;
        };
        let rule = expect.rule();
        // A prompt or session that failed for want of credentials or a model
        // says nothing about the protocol.
        if let Err(e) = answer
            && rule == ReplyRule::Result
            && let Some(why) = outside_protocol(method, e, self.auth_offered())
        {
            self.s.ev.skip(why, SkipKind::Outside);
            return;
        }
        let requested: Vec<String> = self
            .s
            .watch
            .agent_requests
            .get(requests_before..)
            .unwrap_or_default()
            .iter()
            .map(|r| r.method.clone())
            .collect();
        if let Some(m) = &expect.skip_unless
            && !requested.contains(m)
        {
            self.s.ev.skip(
                format!(
                    "the agent did not call {m} during {method} (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                ),
                SkipKind::Outside,
            );
            return;
        }
        let updates: Vec<Value> = self
            .s
            .watch
            .updates
            .get(updates_before..)
            .unwrap_or_default()
            .iter()
            .map(|(_, u, _)| u.clone())
            .collect();
        if let Some(pattern) = &expect.skip_unless_update {
            let Some(p) = self.s.expand(pattern) else {
                return;
            };
            if !updates.iter().any(|u| self.matches(&p, u)) {
                self.s.ev.skip(
                    format!(
                        "no update during {method} matched {} (the agent does not follow conform's prompt script, corpus/acp/SCRIPT.md)",
                        matcher::brief(&p)
                    ),
                    SkipKind::Outside,
                );
                return;
            }
        }
        let Some(mut found) = self.s.judge(answer, rule, &expect.result, &expect.error) else {
            return;
        };
        // An error to the case's own initialize or session/new, where the
        // set-up got one before the run: one cause, reported once.
        if let Err(e) = answer
            && !found.is_empty()
            && let Some(why) = self.failed_before(method, e)
        {
            self.s.ev.skip(why, SkipKind::Outside);
            return;
        }
        for pattern in &expect.updates {
            let Some(p) = self.s.expand(pattern) else {
                return;
            };
            if !updates.iter().any(|u| self.matches(&p, u)) {
                let got = if updates.is_empty() {
                    "none".to_owned()
                } else {
                    updates
                        .iter()
                        .filter_map(|u| u.get("sessionUpdate").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                found.push(
                    Finding::new(
                        None,
                        Kind::Missing,
                        format!(
                            "no session/update during {method} matched {} (got {got})",
                            matcher::brief(&p)
                        ),
                    )
                    .saw(matcher::brief(&p), got)
                    .by("updates"),
                );
            }
        }
        for m in &expect.requests {
            if !requested.contains(m) {
                found.push(
                    Finding::new(
                        None,
                        Kind::Missing,
                        format!("the agent did not call {m} during {method}"),
                    )
                    .by(format!("requests:{m}")),
                );
            }
        }
        for m in &expect.no_requests {
            if requested.contains(m) {
                found.push(
                    Finding::new(
                        None,
                        Kind::Unexpected,
                        format!("the agent called {m} during {method}"),
                    )
                    .by(format!("noRequests:{m}")),
                );
            }
        }
        let mut saw = false;
        for check in &expect.checks {
            let verdict = super::checks::run(
                *check,
                &super::checks::Seen {
                    answer,
                    updates: &updates,
                    vars: &self.s.vars,
                    monitor: &self.s.watch,
                    editor: &self.role.editor,
                    workspace: &self.workspace,
                    asked_version: self.asked_version.as_ref(),
                },
            );
            found.extend(
                verdict
                    .broken
                    .into_iter()
                    .map(|e| Finding::new(None, Kind::Rule, e).by(crate::step::serde_name(check))),
            );
            saw |= !verdict.seen.is_empty();
            self.s.ev.notes.extend(verdict.seen);
        }
        self.s.conclude(method, answer, found);
        // A check that says what it saw says it for the case: the answers
        // of its steps (which hold what varies, times and ids) are left out.
        if saw {
            self.s.ev.observations.clear();
        }
    }

    /// Why an error answer to this case's own `initialize` or `session/new`
    /// that the case finds wrong is not this case's to fail: the probe's
    /// set-up failed at the same step before the run, and the case that
    /// checks that step runs and reports it (as `setup_blocked` says for
    /// the cases that share the set-up).
    fn failed_before(&self, method: &str, error: &Value) -> Option<String> {
        let probe = &self.ctx.probe;
        let (before, blamed) = match method {
            "initialize" => (probe.initialize.as_ref().err()?, HANDSHAKE_CASE),
            "session/new" if probe.initialize.is_ok() => {
                let why = probe.session.as_ref().err()?;
                (why.starts_with("set-up:").then_some(why)?, SESSION_CASE)
            }
            _ => return None,
        };
        (self.ctx.selected.contains(blamed) && self.case_id != blamed).then(|| {
            format!(
                "{method} answered {} here too, as before the run ({}); {blamed} reports it, so this case is not failed for it again",
                matcher::brief(error),
                before.trim_start_matches("set-up: ")
            )
        })
    }

    /// Why a turn the case waits on is over already, when it ended with an
    /// error outside the protocol (authentication, the model).
    fn why_no_turn(&self) -> Option<String> {
        self.s
            .answers
            .values()
            .filter_map(|a| a.as_ref().err())
            .find_map(|e| outside_protocol("session/prompt", e, false))
    }

    /// Whether the agent offered authentication methods (the run's probe
    /// learnt it, or this case's own `initialize`).
    fn auth_offered(&self) -> bool {
        offers_auth(self.ctx.probe.initialize.as_ref().ok())
    }

    fn matches(&self, pattern: &Value, value: &Value) -> bool {
        let mut scratch = Vec::new();
        matcher::match_value(
            pattern,
            Some(value),
            "",
            &mut self.s.vars.clone(),
            &mut scratch,
        );
        scratch.is_empty()
    }
}

/// Whether the agent did any of `until` since `before` in the session `s`;
/// with `hold`, whether it made a request conform holds back (the first
/// among those methods); `running`: the settle time passed.
fn triggered(
    s: &Session<Monitor>,
    until: &[Trigger],
    hold: &[String],
    (requests_before, updates_before): (usize, usize),
    running: bool,
) -> bool {
    let requests = s
        .watch
        .agent_requests
        .get(requests_before..)
        .unwrap_or_default();
    if !hold.is_empty() {
        return requests.iter().any(|r| withheld(hold, &r.method));
    }
    let updates = s.watch.updates.get(updates_before..).unwrap_or_default();
    until.iter().any(|t| match t {
        Trigger::Request(m) => requests.iter().any(|r| &r.method == m),
        Trigger::Update(k) => updates
            .iter()
            .any(|(_, u, _)| u.get("sessionUpdate").and_then(Value::as_str) == Some(k)),
        Trigger::Running => running && s.watch.any_turn_running(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::transport::serve::testing::memory;

    const TURN: &str = r#"{"id":"t/turn","title":"a turn","level":"MUST","requirements":["acp.prompt.respond-stop-reason"],
        "steps":[{"prompt":{"text":"hello"},"expect":{"result":{"stopReason":"end_turn"}}}]}"#;

    /// The case `json` against the reference agent bent by `bend`, in memory.
    async fn run(bend: fn(&mut Value) -> bool, json: &str) -> CaseResult {
        let launcher = memory(super::super::reference::Agent::new, bend);
        let (probe, conn) = probe(&launcher, Duration::from_secs(10)).await.unwrap();
        let ctx = Context::new(
            launcher,
            false,
            probe,
            Duration::from_secs(10),
            Book::builtin().unwrap(),
            false,
        );
        if let Some(c) = conn {
            ctx.give_back(c);
        }
        let case = crate::case::parse_cases::<super::super::AgentCases>("test", json)
            .unwrap()
            .remove(0);
        let r = ctx.run_case(&case).await;
        ctx.close_pool().await;
        r
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_turn_passes_over_the_in_memory_channel() {
        let r = run(|_| true, TURN).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
        assert!(r.findings.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_reason_the_schema_lacks_is_a_typed_schema_finding() {
        let r = run(
            |m| {
                if let Some(reason) = m.pointer_mut("/result/stopReason") {
                    *reason = json!("done");
                }
                true
            },
            TURN,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let schema = r
            .findings
            .iter()
            .find(|f| f.requirement.as_deref() == Some(super::super::monitor::rules::SCHEMA))
            .expect("a schema finding");
        assert_eq!(schema.kind, Kind::Shape);
        let mismatch = r
            .findings
            .iter()
            .find(|f| f.kind == Kind::Mismatch)
            .unwrap();
        assert_eq!(mismatch.expected.as_deref(), Some("\"end_turn\""));
        assert_eq!(mismatch.actual.as_deref(), Some("\"done\""));
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_outlives_the_bound_is_skipped_as_conforms_limit() {
        let r = run(|m| m.pointer("/result/stopReason").is_none(), TURN).await;
        assert_eq!(r.outcome, Outcome::Skip, "{}", r.message);
        assert_eq!(r.skip_kind, Some(SkipKind::Outside));
        assert!(r.message.contains("bound of 60s"), "{}", r.message);
    }

    /// A turn conform cancels, then awaits.
    const CANCELLED: &str = r#"{"id":"t/cancel","title":"a cancel","level":"MUST","requirements":["acp.cancel.stop-reason-cancelled"],
        "steps":[{"prompt":{"text":"conform: wait"},"wait":false,"as":"turn"},{"cancel":"${session}"},
            {"await":"turn","expect":{"result":{"stopReason":"cancelled"}}}]}"#;

    #[tokio::test(start_paused = true)]
    async fn a_turn_the_agent_and_its_probe_leave_unanswered_is_stuck_not_skipped() {
        // No stop reason, and no answer to the liveness probe (an unknown
        // method): the agent is stuck, which breaks "the Server MUST reply".
        let r = run(
            |m| {
                m.pointer("/result/stopReason").is_none()
                    && m.pointer("/error/code") != Some(&json!(-32601))
            },
            TURN,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let stuck = r
            .findings
            .iter()
            .find(|f| f.requirement.as_deref() == Some(super::super::monitor::rules::REPLY))
            .expect("a finding of the reply rule");
        assert!(stuck.message.contains("it is stuck"), "{}", stuck.message);
        assert!(stuck.message.contains("bound of 60s"), "{}", stuck.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_never_ends_after_session_cancel_fails_its_requirement() {
        // The agent answers everything but the cancelled turn.
        let r = run(
            |m| m.pointer("/result/stopReason") != Some(&json!("cancelled")),
            CANCELLED,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let f = r
            .findings
            .iter()
            .find(|f| f.requirement.as_deref() == Some(CANCEL_RULE))
            .expect("a finding of the cancel rule");
        assert!(f.message.contains("of session/cancel"), "{}", f.message);
        assert!(
            f.message.contains("so it still serves requests"),
            "{}",
            f.message
        );
        // The bound started at the cancel: not the turn's 60 s.
        assert!(!f.message.contains("60s"), "{}", f.message);
        // The same agent, cancelled turns answered: a pass.
        let r = run(|_| true, CANCELLED).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    /// An agent whose fake model reads only the English of the read
    /// ladder's second phrasing ("... in the current directory ...").
    #[derive(Default)]
    struct Picky {
        sessions: usize,
        turn: Option<Value>,
    }

    impl crate::transport::serve::Served for Picky {
        fn codec(&self) -> Codec {
            Codec::Lines { limit: 1 << 20 }
        }

        fn handle(
            &mut self,
            line: &[u8],
            _: std::time::Instant,
        ) -> Vec<crate::transport::serve::Out> {
            let m: Value = serde_json::from_slice(line).unwrap_or_default();
            let id = m["id"].clone();
            let answer = |r: Value| json!({"jsonrpc": "2.0", "id": id, "result": r});
            let out = match m["method"].as_str() {
                Some("initialize") => vec![answer(json!({"protocolVersion": 1}))],
                Some("session/new") => {
                    self.sessions += 1;
                    vec![answer(json!({"sessionId": format!("s{}", self.sessions)}))]
                }
                Some("session/prompt") => {
                    let text = m.pointer("/params/prompt/0/text").and_then(Value::as_str);
                    if text.is_some_and(|t| t.contains("in the current directory")) {
                        self.turn = Some(id.clone());
                        let path = format!("{}/notes.txt", "/tmp");
                        vec![json!({"jsonrpc": "2.0", "id": 90, "method": "fs/read_text_file",
                            "params": {"sessionId": m["params"]["sessionId"], "path": path}})]
                    } else {
                        vec![answer(json!({"stopReason": "end_turn"}))]
                    }
                }
                None if m.get("result").is_some() || m.get("error").is_some() => self
                    .turn
                    .take()
                    .map(|t| json!({"jsonrpc": "2.0", "id": t, "result": {"stopReason": "end_turn"}}))
                    .into_iter()
                    .collect(),
                _ if !id.is_null() => vec![json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "no"}})],
                _ => vec![],
            };
            out.into_iter()
                .map(crate::transport::serve::Out::Message)
                .collect()
        }

        fn refused(
            &mut self,
            _: &crate::wire::Refused,
            _: std::time::Instant,
        ) -> (
            Vec<crate::transport::serve::Out>,
            crate::transport::serve::AfterRefusal,
        ) {
            (vec![], crate::transport::serve::AfterRefusal::Go)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_directive_climbs_its_ladder_and_says_which_phrasing_worked() {
        const READ: &str = r#"{"id":"t/read","title":"a read","level":"MUST","requirements":["acp.fs.check-capability"],
            "steps":[{"prompt":{"directive":"read ${workspace}/notes.txt"},"expect":{"reply":"result"}}]}"#;
        let launcher = memory(Picky::default, |_| true);
        let (probe, _) = probe(&launcher, Duration::from_secs(10)).await.unwrap();
        let ctx = Context::new(
            launcher,
            false,
            probe,
            Duration::from_secs(10),
            Book::builtin().unwrap(),
            true,
        );
        let case = crate::case::parse_cases::<super::super::AgentCases>("test", READ)
            .unwrap()
            .remove(0);
        let r = ctx.run_case(&case).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
        assert!(r.message.contains("phrasing 2 of 3"), "{}", r.message);
        let rungs = ctx.rungs.lock().unwrap().clone();
        assert_eq!(rungs.get(&("read".to_owned(), 2, false)), Some(&1));
        // An agent that reads no phrasing makes the case skip, never fail.
        const PLAN: &str = r#"{"id":"t/plan","title":"a plan","level":"MUST","requirements":["acp.plan.report"],
            "steps":[{"prompt":{"directive":"plan"},"expect":{"reply":"result"}}]}"#;
        let case = crate::case::parse_cases::<super::super::AgentCases>("test", PLAN)
            .unwrap()
            .remove(0);
        let r = ctx.run_case(&case).await;
        assert_eq!(r.outcome, Outcome::Skip, "{}", r.message);
        assert!(r.message.contains("3 phrasings of `plan`"), "{}", r.message);
    }

    #[test]
    fn auth_and_model_failures_are_outside_the_protocol() {
        let auth = json!({"code": -32000, "message": "Authentication required"});
        assert!(outside_protocol("session/new", &auth, false).is_some());
        let internal = json!({"code": -32603, "message": "no API key"});
        assert!(outside_protocol("session/prompt", &internal, false).is_some());
        assert!(outside_protocol("session/new", &internal, false).is_none());
        // An agent that offers authMethods may refuse an unauthenticated
        // session with an error of its own; a malformed request is still
        // the protocol's.
        assert!(outside_protocol("session/new", &internal, true).is_some());
        let invalid = json!({"code": -32602, "message": "bad"});
        assert!(outside_protocol("session/new", &invalid, true).is_none());
        assert!(outside_protocol("session/prompt", &invalid, false).is_none());
        assert!(outside_protocol("session/set_mode", &invalid, false).is_none());
        assert!(outside_protocol("session/set_mode", &internal, false).is_some());
    }

    #[test]
    fn needs_read_the_probe() {
        let probe = Probe {
            initialize: Ok(json!({"protocolVersion": 1})),
            capabilities: json!({"loadSession": true, "sessionCapabilities": {"list": {}}}),
            session: Ok(
                json!({"sessionId": "s", "modes": {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]}}),
            ),
        };
        let need = |n: &str| -> Need { serde_json::from_value(json!(n)).unwrap() };
        assert_eq!(
            probe.skip_reason(&[need("loadSession"), need("modes")]),
            None
        );
        assert_eq!(probe.skip_reason(&[need("sessionCapabilities.list")]), None);
        assert!(
            probe
                .skip_reason(&[need("sessionCapabilities.resume")])
                .is_some()
        );
        assert!(probe.skip_reason(&[need("configOptions")]).is_some());
        // A need the schema has no capability for is a bad case file.
        assert!(serde_json::from_value::<Need>(json!("sessionCapabilities.lst")).is_err());
    }

    #[test]
    fn a_failed_set_up_names_the_case_that_reports_it() {
        let probe = Probe {
            initialize: Ok(json!({"protocolVersion": 1})),
            capabilities: json!({}),
            session: Err(
                "set-up: session/new failed before the run (x); acp/session/new reports it".into(),
            ),
        };
        assert_eq!(probe.setup_blocked(Setup::Initialize), None);
        assert_eq!(
            probe.setup_blocked(Setup::Session).unwrap().1,
            Some(SESSION_CASE)
        );
        let auth = Probe {
            session: Err("the agent requires authentication".into()),
            ..probe.clone()
        };
        assert_eq!(auth.setup_blocked(Setup::Session).unwrap().1, None);
        let probe = Probe {
            initialize: Err("the agent answered initialize (version 1) with an error".into()),
            ..probe
        };
        assert_eq!(
            probe.setup_blocked(Setup::Initialize).unwrap().1,
            Some(HANDSHAKE_CASE)
        );
        assert_eq!(probe.setup_blocked(Setup::None), None);
    }
}
