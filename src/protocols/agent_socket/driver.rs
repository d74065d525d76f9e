//! Runs agent-socket cases against a server on a Unix socket, playing Vibe:
//! one connection per request, one request line, one reply line.

use super::steps::{Expect, NamedCheck, Need, Own, Step};
use super::table::{self, Deadline};
use super::validate::{self, DeclaredSandbox, DeclaredTool};
use crate::case::Pause;
use crate::case::{Case, ForEach};
use crate::evidence::{Evidence, Finding, Kind};
use crate::fuzz::readings::{self, How, Id, Readings};
use crate::jsonrpc::{self, Reply, ReplyKind};
use crate::matcher::{self, Vars, truncate};
use crate::outcome::{CaseResult, Direction, SkipKind, TRANSCRIPT_ENTRY_LIMIT, TranscriptEntry};
use crate::step::{Action, Bytes, Outgoing, ReplyRule};
use crate::transport::budget::Held;
use crate::transport::process::describe_status;
use crate::transport::unix::{self, Connector, ReadOutcome};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long conform waits to connect; the source sets no bound of its own.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);
/// The wait for a reply where the source sets none (raw bytes, unknown methods).
const DEFAULT_DEADLINE: f64 = 10.0;
/// The wait for a command run with `timeout: null`, which Vibe would wait on forever.
const UNBOUNDED_COMMAND_CAP: f64 = 120.0;
/// How long a failed connection waits to see whether the target died.
const EXIT_SETTLE: Duration = Duration::from_millis(300);
/// How much sooner than a command's timeout a -32001 must come for conform
/// to call it sooner: the server's clock starts after conform's.
const SOONER_MARGIN: f64 = 0.05;
/// The tool name conform calls as one no server declares.
const UNDECLARED_TOOL: &str = "conform-undeclared.tool";
/// How long `nothingAfter` listens past the reply line.
const AFTER_REPLY_WINDOW: Duration = Duration::from_millis(300);

/// What the handshake told conform about the server.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    /// Why the sandbox half cannot be used, or None when it can.
    pub sandbox_unusable: Option<String>,
    pub tools: Vec<DeclaredTool>,
    pub tool_timeout: f64,
    pub vars: Vars,
    /// Why the handshake gave no usable reply at all.
    pub handshake_failed: Option<String>,
    /// The server declared no sandbox (workspace and python null).
    pub sandbox_declared_none: bool,
    /// The declared sandbox cannot run a command in its workspace (the
    /// set-up probe's finding): every sandbox case stands on that, so one
    /// case ([`SANDBOX_CASE`]) reports it and the others are skipped.
    pub sandbox_broken: Option<String>,
    /// The set-up got nothing at all: no byte on the handshake's connection
    /// nor on the liveness probe's, within the set-up bound, or a connection
    /// closed without one. Every case
    /// that needs the server to answer stands on that, so one case
    /// ([`SETUP_CASE`]) reports it and the others end at once.
    pub silent: Option<String>,
    /// How long the handshake's answer took, when it came after the
    /// start-up bound (within the grace): the server is slow, not silent.
    pub slow: Option<Duration>,
}

/// The case that reports a set-up that got nothing: it checks the
/// handshake and its bound.
pub const SETUP_CASE: &str = "agent-socket/handshake/version";

/// The case that reports a declared sandbox that cannot run a command in
/// its workspace: it runs the set-up probe's command as a case.
pub const SANDBOX_CASE: &str = "agent-socket/handshake/workspace-is-directory";

/// A server under test, reached through `connector`.
pub struct Session {
    pub connector: Connector,
    /// The spawned target's exit status, when conform started it.
    pub exit: Option<watch::Receiver<Option<ExitStatus>>>,
    pub strict: bool,
    pub declared: Declared,
    /// conform's start-up bound: the handshake's answer is awaited this
    /// long, then as long again as a grace, while a second connection asks
    /// again (a liveness probe); never longer than Vibe's own bound.
    pub startup: Duration,
    /// The ids of the cases the run selected.
    pub selected: std::collections::BTreeSet<String>,
    next_id: AtomicI64,
    next_uniq: AtomicI64,
}

impl Session {
    pub fn new(
        connector: Connector,
        exit: Option<watch::Receiver<Option<ExitStatus>>>,
        strict: bool,
    ) -> Self {
        Session {
            connector,
            exit,
            strict,
            declared: Declared::default(),
            // Half of Vibe's own handshake bound: with the grace, the whole of it.
            startup: Duration::from_secs_f64(table::REQUEST_TIMEOUT_SECONDS / 2.0),
            selected: Default::default(),
            // Vibe's ids count from 1 for the life of the process.
            next_id: AtomicI64::new(1),
            next_uniq: AtomicI64::new(1),
        }
    }

    /// After a connection failed where a reply was due, gives a dying target
    /// a moment to be seen dead, so the report says why rather than racing
    /// its exit. Replies that may be missing (`optional`, `none`) wait for
    /// nothing.
    async fn settle(&self, outcome: &ReadOutcome, rule: ReplyRule) {
        let due = !matches!(
            rule,
            ReplyRule::Optional | ReplyRule::None | ReplyRule::IfAny
        );
        let failed = matches!(
            outcome,
            ReadOutcome::Failed { .. } | ReadOutcome::Closed { .. }
        );
        if let (true, true, Some(rx)) = (due, failed, &self.exit) {
            let mut rx = rx.clone();
            let _ = tokio::time::timeout(EXIT_SETTLE, rx.wait_for(|s| s.is_some())).await;
        }
    }

    fn target_note(&self) -> String {
        match self.exit.as_ref().and_then(|rx| *rx.borrow()) {
            Some(status) => format!(" (the target {})", describe_status(Some(status))),
            None => String::new(),
        }
    }

    /// The handshake that tells conform which halves the server serves. Its
    /// own grading is left to the handshake cases.
    pub async fn handshake(&mut self) {
        let mut d = Declared {
            tool_timeout: table::CLIENT_TOOL_TIMEOUT_SECONDS,
            ..Declared::default()
        };
        d.vars
            .set("vibeVersion", json!(table::MODELLED_VIBE_VERSION));
        d.vars
            .set("protocolVersion", json!(table::PROTOCOL_VERSION));
        // A run of the size of the argument chunk Vibe's tool helper sends.
        d.vars.set(
            "bulk64k",
            json!("x".repeat(table::HELPER_REQUEST_CHUNK_BYTES)),
        );
        let (outcome, waited, slow) = self.first_exchange().await;
        d.slow = slow;
        let bound = waited.as_secs_f64();
        let result = match &outcome {
            ReadOutcome::Line { line, .. } => match jsonrpc::too_many_values(line) {
                Some(why) => Err(format!("the reply is {why}")),
                None => match jsonrpc::classify_reply(line) {
                    Ok(Reply {
                        kind: ReplyKind::Result(r),
                        ..
                    }) if r.is_object() => Ok(r),
                    Ok(r) => Err(format!(
                        "the handshake was not answered with a result object: {}",
                        describe_kind(&r.kind)
                    )),
                    Err(e) => Err(e.to_string()),
                },
            },
            other => Err(describe_failed_read(other, bound)),
        };
        if let ReadOutcome::Closed { .. } = &outcome
            && silent(&outcome)
        {
            d.silent = Some(format!(
                "set-up: the server answered no agent/initialize: it closed the connection without a byte of reply (conform's start-up bound is {:.0}s){}",
                self.startup.as_secs_f64(),
                self.target_note()
            ));
        } else if silent(&outcome) {
            d.silent = Some(format!(
                "set-up: the server answered no agent/initialize within {bound:.0}s (conform's start-up bound of {:.0}s, then as long again while a second connection asked again): nothing came on either connection{}",
                self.startup.as_secs_f64(),
                self.target_note()
            ));
        }
        match result {
            Err(why) => {
                d.sandbox_unusable = Some(format!("the handshake failed: {why}"));
                d.handshake_failed = Some(format!("{why}{}", self.target_note()));
            }
            Ok(r) => {
                d.tools = validate::declared_tools(&r);
                if let Some(t) = r.get("toolTimeoutSeconds").and_then(Value::as_f64)
                    && t > 0.0
                {
                    d.tool_timeout = t;
                }
                let declared = validate::declared_sandbox(&r);
                d.sandbox_declared_none = matches!(declared, DeclaredSandbox::None);
                d.sandbox_unusable = match declared {
                    DeclaredSandbox::None => Some(
                        "the server declares no sandbox (workspace and python are null)".into(),
                    ),
                    DeclaredSandbox::Pair { workspace, python } => {
                        d.vars.set("workspace", json!(workspace));
                        d.vars.set("python", json!(python));
                        if validate::is_absolute(&workspace) {
                            None
                        } else {
                            Some(format!(
                                "the declared workspace {workspace:?} is not absolute, so Vibe cannot use the sandbox"
                            ))
                        }
                    }
                    DeclaredSandbox::Half => Some(
                        "workspace and python do not come together, so Vibe cannot use the sandbox"
                            .into(),
                    ),
                    DeclaredSandbox::Malformed => Some(
                        "workspace and python are not both strings, so Vibe cannot use the sandbox"
                            .into(),
                    ),
                };
                d.vars.set("init", r);
            }
        }
        if let (None, Some(Value::String(ws))) = (&d.sandbox_unusable, d.vars.get("workspace")) {
            d.sandbox_broken = self.sandbox_probe(ws).await;
        }
        self.declared = d;
    }

    /// Whether the declared sandbox runs a command in its workspace, as
    /// the session Vibe starts there does first: the instrument of every
    /// sandbox case. What went wrong, when it does not.
    async fn sandbox_probe(&self, workspace: &str) -> Option<String> {
        const TIMEOUT: f64 = 30.0;
        let ws = crate::matcher::shell_quote(workspace);
        let params =
            json!({"command": format!("test -d {ws}"), "cwd": workspace, "timeout": TIMEOUT});
        let bound = TIMEOUT + table::EXECUTE_GRACE_SECONDS;
        let deadline = Instant::now() + Duration::from_secs_f64(bound);
        let why = match &self.request(deadline, "sandbox/execute", &params).await {
            ReadOutcome::Line { line, .. } => match jsonrpc::classify_reply(line) {
                // Read as Vibe reads it ("0" is 0 to pydantic).
                Ok(Reply {
                    kind: ReplyKind::Result(r),
                    ..
                }) => match validate::vibe_read(&r, table::EXECUTE_RESULT, "result") {
                    Ok(read) if read.get("exitCode").and_then(Value::as_i64) == Some(0) => {
                        return None;
                    }
                    Ok(read) => format!("it exited with {}", read["exitCode"]),
                    Err(why) => format!("Vibe cannot read its result: {}", why.join("; ")),
                },
                Ok(r) => format!("it was answered with {}", describe_kind(&r.kind)),
                Err(e) => e.to_string(),
            },
            other => describe_failed_read(other, bound),
        };
        Some(format!(
            "set-up: `test -d` of the declared workspace, run in it with sandbox/execute on a connection of its own, did not succeed: {why}"
        ))
    }

    /// The handshake's exchange, with patience: its answer is awaited for
    /// the start-up bound; a server that has not answered by then gets as
    /// long again (never past Vibe's own handshake bound), while a second
    /// connection asks again, so a server that serves connections one at a
    /// time, or lost the first, still shows it is alive. The first outcome
    /// that is more than silence wins. Also how long conform waited in all.
    async fn first_exchange(&self) -> (ReadOutcome, Duration, Option<Duration>) {
        let start = Instant::now();
        let vibe = Duration::from_secs_f64(table::REQUEST_TIMEOUT_SECONDS);
        let bound = (self.startup * 2).min(vibe);
        let deadline = start + bound;
        let patience = start + self.startup.min(bound);
        let first = self.exchange(deadline);
        tokio::pin!(first);
        let early = tokio::select! {
            o = &mut first => Some(o),
            _ = tokio::time::sleep_until(patience) => None,
        };
        let mut slow = None;
        let outcome = match early {
            Some(o) => o,
            None => {
                let second = self.exchange(deadline);
                tokio::pin!(second);
                let (mut a, mut b) = (None, None);
                loop {
                    tokio::select! {
                        o = &mut first, if a.is_none() => a = Some(o),
                        o = &mut second, if b.is_none() => b = Some(o),
                    }
                    let heard = |o: &Option<ReadOutcome>| o.as_ref().is_some_and(|o| !silent(o));
                    if heard(&a) || heard(&b) || (a.is_some() && b.is_some()) {
                        break;
                    }
                }
                let outcome = match (a, b) {
                    (Some(a), _) if !silent(&a) => a,
                    (_, Some(b)) if !silent(&b) => b,
                    (Some(a), _) => a,
                    (None, Some(b)) => b,
                    (None, None) => unreachable!("the loop ends with an outcome"),
                };
                if !silent(&outcome) {
                    slow = Some(start.elapsed());
                }
                outcome
            }
        };
        (outcome, bound, slow)
    }

    /// One `agent/initialize` on a connection of its own, read until `deadline`.
    fn exchange(&self, deadline: Instant) -> impl std::future::Future<Output = ReadOutcome> + '_ {
        self.request(deadline, "agent/initialize", &initialize_params())
    }

    /// One request on a connection of its own, as Vibe sends each, read
    /// until `deadline`.
    fn request<'a>(
        &'a self,
        deadline: Instant,
        method: &str,
        params: &Value,
    ) -> impl std::future::Future<Output = ReadOutcome> + use<'a> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = request_line(&json!(id), method, params, false);
        async move {
            match self.connector.connect(CONNECT_WITHIN).await {
                Ok(mut stream) => match unix::write_all(&mut stream, &line, deadline).await {
                    Ok(()) => {
                        unix::read_line(&mut stream, table::REPLY_LIMIT_BYTES, deadline).await
                    }
                    Err(e) => ReadOutcome::Failed {
                        error: e.to_string(),
                        partial: Held::unmetered(Vec::new()),
                    },
                },
                Err(e) => ReadOutcome::Failed {
                    error: format!("cannot connect: {e}"),
                    partial: Held::unmetered(Vec::new()),
                },
            }
        }
    }

    /// Why a case does not apply to this server, if it does not: a sandbox
    /// or tools the server declares it has none of make the case not
    /// applicable; a failed handshake or an unusable declaration leaves it
    /// unexercised.
    pub fn skip_reason(&self, needs: &[Need]) -> Option<(String, SkipKind)> {
        let handshake = || {
            self.declared
                .handshake_failed
                .as_ref()
                .map(|_| ("the handshake failed".to_owned(), SkipKind::Outside))
        };
        for need in needs {
            let why = match need {
                Need::Sandbox => match &self.declared.sandbox_unusable {
                    Some(why) if self.declared.sandbox_declared_none => {
                        Some((why.clone(), SkipKind::Declared))
                    }
                    Some(why) => Some((why.clone(), SkipKind::Outside)),
                    None => None,
                },
                Need::Tools => handshake().or_else(|| {
                    self.declared.tools.is_empty().then(|| {
                        (
                            "the server declares no tools".to_owned(),
                            SkipKind::Declared,
                        )
                    })
                }),
                Need::Handshake => handshake(),
            };
            if why.is_some() {
                return why;
            }
        }
        None
    }

    /// Runs one case to its result.
    pub async fn run_case(&self, case: &Case<super::ServerCases>) -> CaseResult {
        let started = Instant::now();
        let mut run = CaseRun {
            session: self,
            started,
            transcript: Arc::new(Mutex::new(Vec::new())),
            ev: Evidence::default(),
            advice: Vec::new(),
            conns: HashMap::new(),
            vars: self.declared.vars.clone(),
        };
        let uniq = self.next_uniq.fetch_add(1, Ordering::Relaxed);
        let slug: String = case
            .id
            .rsplit('/')
            .next()
            .unwrap_or("case")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let uniq = format!("{slug}-{}-{uniq}", std::process::id());
        run.vars.set("uniq", json!(uniq));
        if let Some(Value::String(ws)) = run.vars.get("workspace").cloned() {
            run.vars
                .set("scratch", json!(format!("{ws}/.conform-{uniq}")));
        }
        if let Some(why) = self
            .declared
            .silent
            .as_ref()
            .filter(|_| needs_answers(case))
        {
            // The set-up got nothing: one case says so, the others stand on it.
            if case.id != SETUP_CASE && self.selected.contains(SETUP_CASE) {
                run.ev.skip(
                    format!(
                        "{why}; {SETUP_CASE} reports it, so this case is not failed for it again"
                    ),
                    SkipKind::Outside,
                );
            } else {
                run.ev.fail(Kind::Missing, why.clone());
            }
        } else if let Some((why, kind)) = self.skip_reason(&case.needs) {
            run.ev.skip(why, kind);
        } else if let Some(why) = self.declared.sandbox_broken.as_ref().filter(|_| {
            case.id != SANDBOX_CASE
                && self.selected.contains(SANDBOX_CASE)
                && case.needs.contains(&Need::Sandbox)
        }) {
            // The sandbox cannot run a command in its workspace: one case
            // says so, the others stand on it.
            run.ev.skip(
                format!("{why}; {SANDBOX_CASE} reports it, so this case is not run on it"),
                SkipKind::Outside,
            );
        } else {
            let rounds: Vec<Option<&DeclaredTool>> = match case.for_each {
                Some(ForEach::Tool) => self.declared.tools.iter().map(Some).collect(),
                None => vec![None],
            };
            for tool in rounds {
                if let Some(t) = tool {
                    run.vars.set(
                        "tool",
                        json!({"name": t.full_name, "bare": t.name, "input": validate::example_input(&t.input_schema, 0)}),
                    );
                }
                let before = run.ev.findings.len();
                let advised = run.advice.len();
                run.steps(&case.steps).await;
                if let Some(t) = tool {
                    for f in run.ev.findings[before..]
                        .iter_mut()
                        .chain(&mut run.advice[advised..])
                    {
                        f.message = format!("tool {}: {}", t.full_name, f.message);
                    }
                }
                if run.ev.error.is_some() {
                    break;
                }
            }
            let main_findings = run.ev.findings.len();
            run.steps(&case.finally).await;
            // Clean-up failures are worth knowing, not a verdict.
            let cleanup: Vec<Finding> = run.ev.findings.drain(main_findings..).collect();
            for f in cleanup {
                run.ev.observe(format!("clean-up: {}", f.message));
            }
            for (name, handle) in run.conns.drain() {
                handle.abort();
                run.ev
                    .observe(format!("connection `{name}` was never awaited"));
            }
        }
        // The same documented-shape finding once, however many replies broke it.
        let mut said = std::collections::HashSet::new();
        for f in std::mem::take(&mut run.advice) {
            if said.insert(f.message.clone()) {
                run.ev.push(f);
            }
        }
        let transcript =
            std::mem::take(&mut *run.transcript.lock().unwrap_or_else(|e| e.into_inner()));
        CaseResult::graded(case, run.ev, self.strict, started, transcript)
    }
}

/// Nothing at all came: not a byte before the deadline, or before the
/// server closed the connection.
fn silent(outcome: &ReadOutcome) -> bool {
    matches!(outcome, ReadOutcome::TimedOut { partial } | ReadOutcome::Closed { partial } if partial.is_empty())
}

/// Whether a case needs the server to answer: any step but the socket's
/// mode and the passing of time.
fn needs_answers(case: &Case<super::ServerCases>) -> bool {
    case.steps.iter().any(|s| {
        !matches!(
            s.action,
            Action::Own(super::steps::Own::SocketMode) | Action::Quiet(_)
        )
    })
}

/// The ids a reply to raw request bytes may carry besides null: one for
/// each legal reading of their first line (see `fuzz::readings`); `None`
/// for bytes too large to read.
fn raw_request_ids(bytes: &[u8]) -> Option<Vec<(Id, How)>> {
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    Readings::of(line).map(|r| r.ids())
}

/// Writes `bytes`, stopping at each pause for its time.
async fn write_paced(
    stream: &mut (impl tokio::io::AsyncWrite + Unpin + ?Sized),
    bytes: &[u8],
    pauses: &[Pause],
    deadline: Instant,
) -> std::io::Result<()> {
    for (piece, ms) in crate::case::paced(bytes.len(), pauses) {
        unix::write_all(stream, &bytes[piece], deadline).await?;
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
    Ok(())
}

fn initialize_params() -> Value {
    json!({"protocolVersion": table::PROTOCOL_VERSION, "vibeVersion": table::MODELLED_VIBE_VERSION})
}

/// A request as Vibe's `_encode` writes it: compact JSON and a newline.
fn request_line(id: &Value, method: &str, params: &Value, notification: bool) -> Vec<u8> {
    // Written straight from borrows, in the order Vibe writes them.
    #[derive(serde::Serialize)]
    struct Request<'a> {
        jsonrpc: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a Value>,
        method: &'a str,
        params: &'a Value,
    }
    let request = Request {
        jsonrpc: "2.0",
        id: (!notification).then_some(id),
        method,
        params,
    };
    let mut line = serde_json::to_vec(&request).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A reply read on a connection, with when it came and what asked for it.
struct Pending {
    method: Option<String>,
    request_id: Option<Value>,
    deadline_s: f64,
    deadline_why: String,
    outcome: ReadOutcome,
    rest: Option<Vec<u8>>,
    /// The ids a reply may echo besides null, each with the reading of the
    /// request that gives it (see `IfAny`); `None` when conform cannot read
    /// the request's bytes.
    raw_ids: Option<Vec<(Id, How)>>,
    /// conform reached the socket (a failure after this was in the exchange).
    connected: bool,
    /// The request's params, for checks that read them.
    params: Value,
    /// From before the connection to the end of the read: at least as long
    /// as the server took.
    elapsed: Duration,
}

struct CaseRun<'a> {
    session: &'a Session,
    started: Instant,
    transcript: Arc<Mutex<Vec<TranscriptEntry>>>,
    ev: Evidence,
    /// SHOULD findings that do not stop the case's steps: the documented
    /// shape's, added to the evidence when the case ends.
    advice: Vec<Finding>,
    conns: HashMap<String, JoinHandle<Pending>>,
    vars: Vars,
}

fn log(
    transcript: &Mutex<Vec<TranscriptEntry>>,
    started: Instant,
    conn: &str,
    dir: Direction,
    data: &[u8],
) {
    let entry = TranscriptEntry {
        t_ms: started.elapsed().as_millis() as u64,
        conn: conn.to_owned(),
        dir,
        data: crate::outcome::transcript_text(data),
    };
    if let Ok(mut t) = transcript.lock() {
        // A case's transcript is bounded too.
        if t.len() < crate::outcome::TRANSCRIPT_ENTRIES {
            t.push(entry);
        }
    }
}

impl CaseRun<'_> {
    async fn steps(&mut self, steps: &[Step]) {
        for (i, step) in steps.iter().enumerate() {
            let before = self.ev.findings.len();
            let advised = self.advice.len();
            self.step(i, step).await;
            if step.extra.setup && self.ev.findings.len() > before {
                // The sandbox could not be prepared: nothing was tested.
                self.advice.truncate(advised);
                let why: Vec<String> = self
                    .ev
                    .findings
                    .drain(before..)
                    .map(|f| f.message)
                    .collect();
                self.ev.skip(
                    format!("the sandbox could not prepare the case: {}", why.join("; ")),
                    SkipKind::Outside,
                );
                break;
            }
            // A step that broke leaves later steps nothing sound to build on.
            if self.ev.findings.len() > before || self.ev.error.is_some() {
                break;
            }
        }
    }

    async fn step(&mut self, index: usize, step: &Step) {
        let probe_send;
        let send = match &step.action {
            Action::Quiet(secs) => {
                tokio::time::sleep(Duration::from_secs_f64(*secs)).await;
                return;
            }
            Action::Own(Own::SocketMode) => {
                self.check_socket_mode();
                return;
            }
            Action::Own(Own::Pending(name)) => {
                match self.conns.get(name) {
                    Some(h) if !h.is_finished() => {}
                    Some(_) => {
                        self.ev.fail(Kind::Rule, format!(
                            "the reply on connection `{name}` had already arrived: the server did not answer the other request while it ran"
                        ));
                    }
                    None => self
                        .ev
                        .error(format!("step {index}: no connection `{name}` to check")),
                }
                return;
            }
            Action::Await(name) => {
                let Some(handle) = self.conns.remove(name) else {
                    self.ev
                        .error(format!("step {index}: no connection `{name}` to await"));
                    return;
                };
                match handle.await {
                    Ok(p) => {
                        let rule = step
                            .expect
                            .as_ref()
                            .map(Expect::rule)
                            .unwrap_or(ReplyRule::Any);
                        self.session.settle(&p.outcome, rule).await;
                        self.judge(step.expect.as_ref(), &p, name)
                    }
                    Err(e) => self.ev.error(format!("connection `{name}`: {e}")),
                }
                return;
            }
            // A request: build its bytes.
            Action::Probe => {
                probe_send = Outgoing {
                    method: "agent/initialize".into(),
                    params: initialize_params(),
                    id: None,
                    notification: false,
                };
                Some(&probe_send)
            }
            Action::Send(send) => Some(send),
            Action::Write(_) => None,
            // Not steps of this dialect (refused at load).
            Action::WaitFor(_) | Action::CloseStdin | Action::ExitsWithin(_) => {
                self.ev
                    .error(format!("step {index}: not an agent-socket step"));
                return;
            }
        };
        let (bytes, method, request_id, params) = match (send, &step.action) {
            (Some(send), _) => {
                let params = match matcher::expand(&send.params, &self.vars) {
                    Ok(p) => p,
                    Err(e) => {
                        self.ev.error(format!("step {index}: {e}"));
                        return;
                    }
                };
                let id = match &send.id {
                    Some(id) => match matcher::expand(id, &self.vars) {
                        Ok(v) => v,
                        Err(e) => {
                            self.ev.error(format!("step {index}: {e}"));
                            return;
                        }
                    },
                    None => json!(self.session.next_id.fetch_add(1, Ordering::Relaxed)),
                };
                let line = request_line(&id, &send.method, &params, send.notification);
                let rid = (!send.notification).then_some(id);
                (line, Some(send.method.clone()), rid, params)
            }
            (None, Action::Write(Bytes::Text(t))) => match matcher::expand(&json!(t), &self.vars) {
                Ok(Value::String(s)) => (s.into_bytes(), None, None, Value::Null),
                Ok(other) => (other.to_string().into_bytes(), None, None, Value::Null),
                Err(e) => {
                    self.ev.error(format!("step {index}: {e}"));
                    return;
                }
            },
            (None, Action::Write(bytes)) => match bytes.generated() {
                Some(b) => (b, None, None, Value::Null),
                None => {
                    self.ev.error(format!("step {index}: nothing to send"));
                    return;
                }
            },
            (None, _) => {
                self.ev.error(format!("step {index}: nothing to send"));
                return;
            }
        };
        // The id a reply to raw bytes may echo besides null: None when conform
        // cannot read the bytes itself, so it cannot say which id they carry.
        let raw_ids = if send.is_some() {
            Some(
                request_id
                    .iter()
                    .map(|id| (Id::from_value(id), How::AsWritten))
                    .collect(),
            )
        } else {
            raw_request_ids(&bytes)
        };
        let (deadline_s, deadline_why) = self.deadline_for(step, method.as_deref(), &params);
        let conn_name = step.name.clone().unwrap_or_else(|| format!("c{index}"));
        let expect = step.expect.clone();
        let want_rest = expect.as_ref().is_some_and(|e| e.nothing_after);
        let connector = self.session.connector.clone();
        let transcript = self.transcript.clone();
        let started = self.started;
        let close = step.extra.close;
        let half_close = step.extra.half_close;
        let pauses = step.pauses.clone();
        let name = conn_name.clone();
        let task = async move {
            let begun = Instant::now();
            let deadline = begun + Duration::from_secs_f64(deadline_s);
            let mut stream = match connector.connect(CONNECT_WITHIN).await {
                Ok(s) => s,
                Err(e) => {
                    return Pending {
                        method,
                        request_id,
                        deadline_s,
                        deadline_why,
                        outcome: ReadOutcome::Failed {
                            error: format!("cannot connect to {connector}: {e}"),
                            partial: Held::unmetered(Vec::new()),
                        },
                        rest: None,
                        raw_ids,
                        connected: false,
                        params,
                        elapsed: begun.elapsed(),
                    };
                }
            };
            log(&transcript, started, &name, Direction::Sent, &bytes);
            let written = write_paced(&mut stream, &bytes, &pauses, deadline).await;
            let written = match written {
                Ok(()) if half_close => {
                    use tokio::io::AsyncWriteExt;
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        b"conform shut down its writing half",
                    );
                    stream.shutdown().await
                }
                other => other,
            };
            let outcome = match written {
                Err(e) => ReadOutcome::Failed {
                    error: format!("writing the request failed: {e}"),
                    partial: Held::unmetered(Vec::new()),
                },
                Ok(()) if close => {
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        b"conform closed the connection",
                    );
                    ReadOutcome::Closed {
                        partial: Held::unmetered(Vec::new()),
                    }
                }
                Ok(()) => unix::read_line(&mut stream, table::REPLY_LIMIT_BYTES, deadline).await,
            };
            let elapsed = begun.elapsed();
            let mut rest = None;
            match &outcome {
                ReadOutcome::Line { line, after } => {
                    // The newline shows where a line is short enough to
                    // be shown whole; a long one is not copied.
                    if line.len() <= TRANSCRIPT_ENTRY_LIMIT {
                        let shown = [&line[..], b"\n"].concat();
                        log(&transcript, started, &name, Direction::Received, &shown);
                    } else {
                        log(&transcript, started, &name, Direction::Received, line);
                    }
                    if want_rest {
                        let mut r = after.clone();
                        r.extend(unix::read_rest(&mut stream, AFTER_REPLY_WINDOW, 64 * 1024).await);
                        rest = Some(r);
                    }
                }
                ReadOutcome::Closed { partial } if !close => {
                    if !partial.is_empty() {
                        log(&transcript, started, &name, Direction::Received, partial);
                    }
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        b"the target closed the connection",
                    );
                }
                ReadOutcome::TimedOut { .. } => {
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        format!("no reply within {deadline_s}s").as_bytes(),
                    );
                }
                ReadOutcome::TooLong { limit } => {
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        format!("reply over {limit} bytes").as_bytes(),
                    );
                }
                ReadOutcome::Failed { error, .. } => {
                    log(
                        &transcript,
                        started,
                        &name,
                        Direction::Event,
                        error.as_bytes(),
                    );
                }
                _ => {}
            }
            Pending {
                method,
                request_id,
                deadline_s,
                deadline_why,
                outcome,
                rest,
                raw_ids,
                connected: true,
                params,
                elapsed,
            }
        };
        if step.wait {
            let p = task.await;
            if step.extra.close {
                // The close was conform's own; only a failure to connect or write counts.
                if matches!(p.outcome, ReadOutcome::Failed { .. }) {
                    self.session.settle(&p.outcome, ReplyRule::Any).await;
                }
                if let ReadOutcome::Failed { error, .. } = &p.outcome {
                    // Raw bytes are not a request Vibe sends: a server may
                    // close on them before it has read them all.
                    if matches!(step.action, Action::Send(_)) || !p.connected {
                        self.ev.fail(
                            Kind::Transport,
                            format!("{error}{}", self.session.target_note()),
                        );
                    } else {
                        self.ev.observe(error.clone());
                    }
                }
                return;
            }
            // Still serving means answering with a reply line at all; the
            // handshake's content is graded by the handshake cases.
            let probe = matches!(step.action, Action::Probe);
            let expect = if probe {
                Some(Expect::any_reply())
            } else {
                expect
            };
            let rule = expect.as_ref().map(Expect::rule).unwrap_or(ReplyRule::Any);
            self.session.settle(&p.outcome, rule).await;
            let before = self.ev.findings.len();
            self.judge(expect.as_ref(), &p, &conn_name);
            if probe && self.ev.findings.len() > before {
                let broken = self.ev.findings.split_off(before);
                let detail: Vec<&str> = broken.iter().map(|f| f.message.as_str()).collect();
                self.ev
                    .fail(
                        Kind::Stopped,
                        format!(
                            "the server no longer serves a handshake afterwards: {}",
                            detail.join("; ")
                        ),
                    )
                    .found_by("probe");
            }
        } else {
            self.conns.insert(conn_name, tokio::spawn(task));
        }
    }

    fn deadline_for(&self, step: &Step, method: Option<&str>, params: &Value) -> (f64, String) {
        if let Some(d) = step.deadline {
            return (d, format!("the case allows {d}s"));
        }
        let Some(spec) = method.and_then(table::method) else {
            return (
                DEFAULT_DEADLINE,
                format!("conform waits {DEFAULT_DEADLINE}s where the source sets no bound"),
            );
        };
        match spec.deadline {
            Deadline::Fixed(s) => (s, format!("Vibe waits {s}s for {}", spec.name)),
            Deadline::CommandTimeoutPlusGrace => {
                match params.get("timeout").and_then(Value::as_f64) {
                    Some(t) => (
                        t + table::EXECUTE_GRACE_SECONDS,
                        format!(
                            "Vibe waits the command's timeout, {t}s, plus {}s",
                            table::EXECUTE_GRACE_SECONDS
                        ),
                    ),
                    None => (
                        UNBOUNDED_COMMAND_CAP,
                        format!(
                            "Vibe would wait without bound; conform stops at {UNBOUNDED_COMMAND_CAP}s"
                        ),
                    ),
                }
            }
            Deadline::ToolTimeout => {
                let t = self.session.declared.tool_timeout;
                (
                    t,
                    format!("the server's toolTimeoutSeconds (or Vibe's default) is {t}s"),
                )
            }
        }
    }

    fn check_socket_mode(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        // "The caller runs a server on a Unix socket it created with mode 0600 inside a 0700 directory."
        let Some(path) = self.session.connector.path() else {
            self.ev.skip(
                "the server is in conform's own process: no socket file to check",
                SkipKind::Outside,
            );
            return;
        };
        match std::fs::symlink_metadata(path) {
            Ok(m) => {
                let mode = m.permissions().mode() & 0o777;
                if mode & 0o177 != 0 {
                    self.ev
                        .fail(
                            Kind::Rule,
                            format!(
                                "the socket file has mode {mode:04o}; 0600 or stricter is required"
                            ),
                        )
                        .seen("0600", format!("{mode:04o}"));
                } else {
                    self.ev.observe(format!("socket mode {mode:04o}"));
                }
            }
            Err(e) => {
                self.ev.fail(
                    Kind::Rule,
                    format!("cannot stat the socket {}: {e}", path.display()),
                );
            }
        }
        if let Some(dir) = path.parent()
            && let Ok(m) = std::fs::metadata(dir)
        {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                self.ev
                    .fail(
                        Kind::Rule,
                        format!(
                            "the socket's directory has mode {mode:04o}; 0700 or stricter is required"
                        ),
                    )
                    .seen("0700", format!("{mode:04o}"));
            }
        }
    }

    /// Grades one reply against a step's expectation.
    fn judge(&mut self, expect: Option<&Expect>, p: &Pending, conn: &str) {
        let rule = expect.map(Expect::rule).unwrap_or(ReplyRule::Any);
        if let Some(name) = expect.and_then(|e| e.keep.as_deref()) {
            // Replaced by what came, once a reply is read.
            self.vars.set(name, json!({"kind": "none"}));
        }
        let what = p
            .method
            .as_deref()
            .map(|m| format!("{m} on `{conn}`"))
            .unwrap_or_else(|| format!("`{conn}`"));
        let line = match &p.outcome {
            ReadOutcome::Line { line, .. } => line,
            other => {
                let seen = describe_failed_read(other, p.deadline_s);
                let cut = match other {
                    ReadOutcome::Closed { partial } | ReadOutcome::TimedOut { partial } => {
                        !partial.is_empty()
                    }
                    ReadOutcome::TooLong { .. } => true,
                    _ => false,
                };
                match rule {
                    // "Lines are JSON-RPC 2.0 messages ... compact JSON followed by ``\\n``":
                    // a reply that starts is a whole line.
                    ReplyRule::IfAny | ReplyRule::Due if cut => {
                        self.ev
                            .broke(
                                validate::rules::FRAMING_LINE,
                                Kind::Framing,
                                format!(
                                    "{what}: the reply is not a whole line: {seen}{}",
                                    self.session.target_note()
                                ),
                            )
                            .found_by("reply");
                    }
                    ReplyRule::Optional | ReplyRule::None | ReplyRule::IfAny => {
                        self.ev.observe(format!("{what}: {seen}"));
                    }
                    _ => {
                        let why = if matches!(other, ReadOutcome::TimedOut { .. }) {
                            format!(" ({})", p.deadline_why)
                        } else {
                            String::new()
                        };
                        self.ev
                            .fail(
                                Kind::Missing,
                                format!(
                                    "{what}: expected a reply line, {seen}{why}{}",
                                    self.session.target_note()
                                ),
                            )
                            .found_by("reply")
                            .expected = Some("a reply line".into());
                    }
                }
                return;
            }
        };
        if rule == ReplyRule::None {
            let got = truncate(&String::from_utf8_lossy(line), 200);
            self.ev
                .fail(
                    Kind::Unexpected,
                    format!("{what}: expected no reply, got {got}"),
                )
                .seen("no reply", got)
                .found_by("reply");
            return;
        }
        if let Some(why) = jsonrpc::too_many_values(line) {
            self.ev.error(format!("{what}: the reply is {why}"));
            return;
        }
        let reply = match jsonrpc::classify_reply(line) {
            Ok(r) => r,
            Err(e) => {
                let got = truncate(&String::from_utf8_lossy(line), 200);
                if rule == ReplyRule::Optional {
                    self.ev.observe(format!("{what}: {e}"));
                } else if matches!(rule, ReplyRule::IfAny | ReplyRule::Due) {
                    self.ev
                        .broke(
                            validate::rules::FRAMING_LINE,
                            Kind::Malformed,
                            format!("{what}: {e} (a reply is one line of JSON): {got}"),
                        )
                        .found_by("reply");
                } else {
                    self.ev
                        .broke(
                            validate::rules::FRAMING_LINE,
                            Kind::Malformed,
                            format!("{what}: {e} (a reply is one line of compact JSON): {got}"),
                        )
                        .found_by("reply");
                }
                return;
            }
        };
        if let Some(name) = expect.and_then(|e| e.keep.as_deref()) {
            self.vars.set(name, kept(&reply));
        }
        let context = CheckContext {
            params: &p.params,
            elapsed: p.elapsed,
            vars: &self.vars,
            declared: &self.session.declared,
        };
        let checks: Vec<(String, CheckFindings)> = expect
            .map(|e| {
                e.checks
                    .iter()
                    .map(|c| {
                        (
                            crate::step::serde_name(c),
                            named_check(*c, &reply, &context),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        // A check that says what it saw speaks instead of the raw reply.
        let seen: Vec<String> = checks
            .iter()
            .filter_map(|(_, c)| c.observation.clone())
            .collect();
        if seen.is_empty() {
            self.ev
                .observe(format!("{what}: {}", describe_kind(&reply.kind)));
        } else {
            self.ev.observations.extend(seen);
        }
        let Some(expect) = expect else { return };
        if rule == ReplyRule::Optional {
            return;
        }
        let mut found: Vec<Finding> = Vec::new();
        let envelope = |found: &mut Vec<Finding>, expected: Option<&Value>| {
            found.extend(
                validate::envelope(&reply, expected)
                    .into_iter()
                    .map(|(rule, e)| Finding::new(rule, Kind::Envelope, e).by("envelope")),
            );
        };
        if matches!(rule, ReplyRule::IfAny | ReplyRule::Due) {
            // The id is null, or the id of a legal reading of the request's
            // bytes (a byte-order mark ignored, a duplicate's first or last,
            // a number however spelled: `fuzz::readings`), or anything when
            // conform could not read them itself.
            let echoed = reply.object.get("id").cloned();
            let spelled = readings::ids_in(line).pop();
            let expected = match (&p.raw_ids, &echoed) {
                (None, Some(e)) | (_, Some(e @ Value::Null)) => Some(e.clone()),
                (Some(ids), _) => {
                    let read = spelled.and_then(|s| ids.iter().find(|(i, _)| *i == s));
                    match (read, &echoed) {
                        (Some((_, how)), Some(e)) => {
                            if *how != How::AsWritten {
                                self.ev.observe(format!(
                                    "{what}: the reply's id {e} is the request's read {}",
                                    how.describe()
                                ));
                            }
                            Some(e.clone())
                        }
                        _ => ids.first().map(|(i, _)| i.to_value()),
                    }
                }
                (None, None) => None,
            };
            envelope(&mut found, expected.as_ref());
            self.record(&what, found);
            return;
        }
        match (&reply.kind, rule) {
            (ReplyKind::Result(_), ReplyRule::Error) | (ReplyKind::Empty, ReplyRule::Error) => {
                let got = describe_kind(&reply.kind);
                found.push(
                    Finding::new(
                        None,
                        Kind::WrongKind,
                        format!("expected an error, got {got}"),
                    )
                    .saw("an error", got)
                    .by("reply"),
                )
            }
            (ReplyKind::Error { .. }, ReplyRule::Result)
            | (ReplyKind::Empty, ReplyRule::Result) => {
                let got = describe_kind(&reply.kind);
                found.push(
                    Finding::new(
                        None,
                        Kind::WrongKind,
                        format!("expected a result, got {got}"),
                    )
                    .saw("a result", got)
                    .by("reply"),
                )
            }
            (ReplyKind::Empty, ReplyRule::Any) => found.push(
                Finding::new(
                    None,
                    Kind::Envelope,
                    "the reply has neither a result nor an error",
                )
                .by("reply"),
            ),
            _ => {}
        }
        if found.is_empty() {
            // Two layers: what Vibe refuses fails the case at its level;
            // where Vibe copes but the documented shape is broken, a SHOULD
            // (`as.shape.documented`) shows the documented shape beside
            // what came. Patterns match the values as Vibe reads them.
            // Each violation begins with the path it is about
            // (`result.tools[0].name: missing`): named by its field, for a
            // case to charge each field to its own rule.
            // A result of the wrong shape breaks its type's rule, where
            // one covers the whole type (`as.exec.result`); the fields it
            // names broken are not mismatched again by the pattern.
            let mut broken: Vec<String> = Vec::new();
            let mut shape = |found: &mut Vec<Finding>, v: Vec<String>, root: &str, rule| {
                found.extend(v.into_iter().map(|e| {
                    let at = e.split_once(": ").map_or("", |(at, _)| at);
                    broken.push(at.to_owned());
                    let check = Finding::check_of_field("shape", at, root);
                    Finding::new(rule, Kind::Shape, e).by(check)
                }));
            };
            let spec = p.method.as_deref().and_then(table::method);
            let (body, fields, rule, pattern, path) = match &reply.kind {
                ReplyKind::Result(result) => (
                    result.clone(),
                    spec.map(|m| m.result),
                    spec.and_then(|m| m.result_rule),
                    &expect.result,
                    "result",
                ),
                ReplyKind::Error { .. } => (
                    reply.object.get("error").cloned().unwrap_or(Value::Null),
                    Some(table::ERROR_BODY),
                    None,
                    &expect.error,
                    "error",
                ),
                ReplyKind::Empty => (Value::Null, None, None, &None, ""),
            };
            let mut read = body.clone();
            if let Some(fields) = fields {
                match validate::vibe_read(&body, fields, path) {
                    Ok(v) => read = v,
                    Err(v) if expect.shape => shape(&mut found, v, path, rule),
                    Err(_) => {}
                }
                // An error body's one type Vibe converts is its code's.
                if expect.shape && path == "error" {
                    self.advice.extend(
                        validate::envelope(&reply, None)
                            .into_iter()
                            .filter(|(rule, _)| *rule == Some(validate::rules::ERROR_CODE))
                            .map(|(rule, e)| {
                                Finding::new(rule, Kind::Envelope, format!("{what}: {e}"))
                            }),
                    );
                }
                if expect.shape && path == "result" {
                    for u in validate::undocumented(&body, fields, path) {
                        self.advice.push(
                            Finding::new(
                                Some(validate::rules::DOCUMENTED),
                                Kind::Shape,
                                format!("{what}: {}", u.describe()),
                            )
                            .saw(u.documented, matcher::brief(&u.came)),
                        );
                    }
                }
            }
            if let Some(pattern) = pattern {
                self.match_pattern(pattern, &read, path, &broken, &mut found);
            }
        }
        if expect.envelope {
            envelope(&mut found, p.request_id.as_ref());
        }
        if expect.compact && !jsonrpc::is_compact_json(line) {
            found.push(
                Finding::new(
                    None,
                    Kind::Framing,
                    "the reply is not compact JSON (it has whitespace between tokens)",
                )
                .by("compact"),
            );
        }
        if expect.nothing_after
            && let Some(rest) = &p.rest
            && !rest.is_empty()
        {
            found.push(
                Finding::new(
                    None,
                    Kind::Framing,
                    format!(
                        "{} more bytes followed the reply line: {}",
                        rest.len(),
                        truncate(&String::from_utf8_lossy(rest), 200)
                    ),
                )
                .by("nothingAfter"),
            );
        }
        for (name, check) in checks {
            found.extend(
                check
                    .errors
                    .into_iter()
                    .map(|(rule, e)| Finding::new(rule, Kind::Rule, e).by(&name)),
            );
        }
        self.record(&what, found);
    }

    /// Records the findings about `what`, each message saying what it is about.
    fn record(&mut self, what: &str, found: Vec<Finding>) {
        for mut f in found {
            f.message = format!("{what}: {}", f.message);
            self.ev.push(f);
        }
    }

    fn match_pattern(
        &mut self,
        pattern: &Value,
        actual: &Value,
        path: &str,
        broken: &[String],
        found: &mut Vec<Finding>,
    ) {
        match matcher::expand(pattern, &self.vars) {
            Ok(p) => {
                let mut mismatches = Vec::new();
                matcher::match_value(&p, Some(actual), path, &mut self.vars, &mut mismatches);
                found.extend(mismatches.into_iter().map(|m| {
                    // A field the shape check found broken: its finding says so.
                    let consequence = broken.iter().any(|at| matcher::path_within(&m.path, at));
                    let mut f = Finding::of_pattern(m, path, path);
                    f.consequence = consequence;
                    f
                }));
            }
            Err(e) => self.ev.error(e.to_string()),
        }
    }
}

/// What a named check found: broken rules, and what it saw worth saying.
#[derive(Default)]
struct CheckFindings {
    /// What it found broken: the requirement, where the check can tell
    /// which of its case's it is, and why.
    errors: Vec<(Option<&'static str>, String)>,
    observation: Option<String>,
}

impl From<Vec<String>> for CheckFindings {
    fn from(errors: Vec<String>) -> Self {
        CheckFindings {
            errors: errors.into_iter().map(|e| (None, e)).collect(),
            observation: None,
        }
    }
}

/// What a named check may read besides the reply.
struct CheckContext<'a> {
    /// The request's params.
    params: &'a Value,
    /// How long the reply took, at least as long as the server took.
    elapsed: Duration,
    vars: &'a Vars,
    declared: &'a Declared,
}

/// A reply as a later check compares it: its kind, and its code and
/// message or its result.
fn kept(reply: &Reply) -> Value {
    match &reply.kind {
        ReplyKind::Result(r) => json!({"kind": "result", "result": r}),
        ReplyKind::Error { code, message, .. } => {
            json!({"kind": "error", "code": code.map(|c| c.0), "message": message})
        }
        ReplyKind::Empty => json!({"kind": "empty"}),
    }
}

/// Whether two kept replies are the same refusal: errors with the same code
/// and the same message once each call's tool name is left out.
fn same_refusal(a: &Value, a_name: &str, b: &Value, b_name: &str) -> bool {
    let text = |v: &Value, name: &str| {
        v["message"]
            .as_str()
            .unwrap_or_default()
            .replace(name, "<tool>")
    };
    a["kind"] == "error"
        && b["kind"] == "error"
        && a["code"] == b["code"]
        && text(a, a_name) == text(b, b_name)
}

/// `error.data.timeoutSeconds` as Vibe reads it: a positive number, not a boolean.
fn named_limit(data: Option<&Value>) -> Option<f64> {
    data.and_then(|d| d.get("timeoutSeconds"))
        .filter(|t| !t.is_boolean())
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0)
}

fn named_check(check: NamedCheck, reply: &Reply, cx: &CheckContext) -> CheckFindings {
    let result = match &reply.kind {
        ReplyKind::Result(r) => Some(r),
        _ => None,
    };
    match check {
        NamedCheck::ToolDeclarations => CheckFindings {
            errors: result
                .map(|r| validate::declaration_violations(&validate::declared_tools(r)))
                .unwrap_or_default()
                .into_iter()
                .map(|(rule, why)| (Some(rule), why))
                .collect(),
            observation: None,
        },
        NamedCheck::SandboxPair => match result.map(validate::declared_sandbox) {
            Some(DeclaredSandbox::Half) => vec![
                "`workspace` and `python` must come together: one is set and the other is null"
                    .to_owned(),
            ]
            .into(),
            _ => CheckFindings::default(),
        },
        NamedCheck::WorkspaceAbsolute => match result
            .and_then(|r| r.get("workspace"))
            .and_then(Value::as_str)
        {
            Some(w) if !validate::is_absolute(w) => {
                vec![format!("the workspace {w:?} is not an absolute path")].into()
            }
            _ => CheckFindings::default(),
        },
        NamedCheck::DescribeHalves => CheckFindings {
            errors: vec![],
            observation: Some(describe_halves(&reply.kind)),
        },
        NamedCheck::TimeoutLimit => {
            let ReplyKind::Error {
                code: Some(c),
                data,
                ..
            } = &reply.kind
            else {
                return CheckFindings::default();
            };
            let Some(timeout) = cx.params.get("timeout").and_then(Value::as_f64) else {
                return CheckFindings::default();
            };
            if *c != table::TIMEOUT_ERROR {
                return CheckFindings::default();
            }
            let took = cx.elapsed.as_secs_f64();
            let mut errors = Vec::new();
            match named_limit(data.as_ref()) {
                // "a shorter limit of the sandbox's own, which the error names"
                Some(limit) if limit > timeout + 1e-6 => errors.push(format!(
                    "the -32001 names a limit of {limit}s, longer than the command's timeout of {timeout}s: the limit applied is the timeout or a shorter one of the sandbox's own"
                )),
                Some(_) => {}
                // "A server that stopped the command sooner than ``timeout``,
                // at a limit of its own, says so in the error's optional ``data``"
                None if took + SOONER_MARGIN < timeout => errors.push(format!(
                    "the -32001 came {took:.2}s after the request, sooner than the command's timeout of {timeout}s, and its data names no limit: the model is told the command ran for its whole timeout"
                )),
                None => {}
            }
            errors.into()
        }
        NamedCheck::FullNameKnown => {
            let (Some(tool), Some(undeclared), Some(bare)) = (
                cx.vars.get("tool").cloned(),
                cx.vars.get("undeclared").cloned(),
                cx.vars.get("bare").cloned(),
            ) else {
                return CheckFindings::default();
            };
            let full = tool["name"].as_str().unwrap_or_default();
            let bare_name = tool["bare"].as_str().unwrap_or_default();
            // A bare name that is itself a declared name proves nothing.
            if cx.declared.tools.iter().any(|t| t.full_name == bare_name) {
                return CheckFindings::default();
            }
            let this = kept(reply);
            if same_refusal(&this, full, &undeclared, UNDECLARED_TOOL)
                && !same_refusal(&bare, bare_name, &undeclared, UNDECLARED_TOOL)
            {
                vec![format!(
                    "{full} is answered as the undeclared {UNDECLARED_TOOL} is ({}), while its bare name {bare_name} is not: a call names its tool as namespace.name",
                    describe_kind(&reply.kind)
                )]
                .into()
            } else {
                CheckFindings::default()
            }
        }
        NamedCheck::CallerNullAccepted => {
            let Some(rooted) = cx.vars.get("rooted").cloned() else {
                return CheckFindings::default();
            };
            let invalid = |v: &Value| {
                v["kind"] == "error"
                    && v["code"] == json!(crate::jsonrpc::ErrorCode::INVALID_PARAMS.0)
            };
            // Without the root call's answer there is nothing to compare.
            if invalid(&kept(reply)) && rooted["kind"] != "none" && !invalid(&rooted) {
                vec![format!(
                    "a call with caller null is refused as invalid params ({}), and the same call from the root session is not: caller is null when Vibe could not tell, which is valid params (a server that needs its caller may refuse the call, as a failed call)",
                    describe_kind(&reply.kind)
                )]
                .into()
            } else {
                CheckFindings::default()
            }
        }
        NamedCheck::TimeoutData => {
            match &reply.kind {
                ReplyKind::Error {
                    code: Some(c),
                    data: Some(data),
                    ..
                } if *c == table::TIMEOUT_ERROR && !data.is_null() => {
                    match data.get("timeoutSeconds") {
                    Some(t) if t.as_f64().is_some_and(|x| x > 0.0) && !t.is_boolean() => {
                        CheckFindings::default()
                    }
                    _ => vec![format!(
                        "a -32001 error's data is {}, not {{\"timeoutSeconds\": <positive number>}}: Vibe ignores it",
                        matcher::brief(data)
                    )]
                    .into(),
                }
                }
                _ => CheckFindings::default(),
            }
        }
    }
}

/// Which halves an `agent/initialize` result declares, without its paths.
fn describe_halves(kind: &ReplyKind) -> String {
    let ReplyKind::Result(r) = kind else {
        return format!("the handshake was answered with {}", describe_kind(kind));
    };
    let sandbox = match validate::declared_sandbox(r) {
        DeclaredSandbox::Pair { .. } => "a sandbox",
        DeclaredSandbox::None => "no sandbox",
        DeclaredSandbox::Half => "half a sandbox (workspace and python do not come together)",
        DeclaredSandbox::Malformed => "a malformed sandbox (workspace and python not both strings)",
    };
    let tools: Vec<String> = validate::declared_tools(r)
        .into_iter()
        .map(|t| t.full_name)
        .collect();
    let tools = if tools.is_empty() {
        "no tools".to_owned()
    } else {
        format!("{} tools ({})", tools.len(), tools.join(", "))
    };
    let timeout = match r.get("toolTimeoutSeconds") {
        Some(t) if !t.is_null() => format!("toolTimeoutSeconds {t}"),
        _ => format!(
            "the default tool timeout ({}s)",
            table::CLIENT_TOOL_TIMEOUT_SECONDS
        ),
    };
    let instructions = if r
        .get("instructions")
        .and_then(Value::as_str)
        .is_some_and(|i| !i.trim().is_empty())
    {
        "instructions"
    } else {
        "no instructions"
    };
    format!("the server declares {sandbox}, {tools}, {timeout}, {instructions}")
}

fn describe_kind(kind: &ReplyKind) -> String {
    match kind {
        ReplyKind::Result(r) => format!("a result {}", matcher::brief(r)),
        ReplyKind::Error { code, message, .. } => {
            let code = code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "without an integer code".into());
            let abort = if code.starts_with(&table::ABORT_ERROR.0.to_string()) {
                " (the server aborted the run)"
            } else {
                ""
            };
            format!("error {code} {:?}{abort}", message.as_deref().unwrap_or(""))
        }
        ReplyKind::Empty => "a reply with neither result nor error".into(),
    }
}

fn describe_failed_read(outcome: &ReadOutcome, deadline_s: f64) -> String {
    match outcome {
        ReadOutcome::Line { .. } => "a line".into(),
        ReadOutcome::Closed { partial } if partial.is_empty() => {
            "the target closed the connection without replying".into()
        }
        ReadOutcome::Closed { partial } => format!(
            "the target closed the connection after {} bytes with no newline: {}",
            partial.len(),
            truncate(&String::from_utf8_lossy(partial), 200)
        ),
        ReadOutcome::TooLong { limit } => {
            format!("the reply line grew past the {limit}-byte limit")
        }
        ReadOutcome::TimedOut { partial } if partial.is_empty() => {
            format!("no reply within {deadline_s}s")
        }
        ReadOutcome::TimedOut { partial } => format!(
            "no whole reply line within {deadline_s}s ({} bytes without a newline)",
            partial.len()
        ),
        ReadOutcome::Failed { error, .. } => error.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::transport::unix::Connector;
    use tokio::io::AsyncWriteExt;

    const INITIALIZE: &str = r#"{"id":"t/init","title":"the handshake","level":"MUST","requirements":["as.handshake.version"],
        "steps":[{"send":{"method":"agent/initialize","params":{"protocolVersion":2,"vibeVersion":"${vibeVersion}"}},
                  "expect":{"result":{"protocolVersion":2},"envelope":true},"deadline":5}]}"#;

    /// The case `json` against the server `connector` reaches.
    async fn run(connector: Connector, json: &str) -> CaseResult {
        let mut session = Session::new(connector, None, false);
        session.handshake().await;
        let case = crate::case::parse_cases::<super::super::ServerCases>("test", json)
            .unwrap()
            .remove(0);
        session.run_case(&case).await
    }

    /// A server in memory that answers each request line with `reply` (none
    /// for `None`) and keeps the connection open.
    fn answering(reply: Option<&'static str>) -> Connector {
        Connector::Memory(Arc::new(move |mut stream| {
            tokio::spawn(async move {
                let far = Instant::now() + Duration::from_secs(3600);
                let _ = unix::read_line(&mut stream, 1 << 20, far).await;
                if let Some(r) = reply {
                    let _ = stream.write_all(r.as_bytes()).await;
                }
                tokio::time::sleep_until(far).await;
            });
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn the_handshake_passes_against_the_reference_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(super::super::reference::Config {
            workspace: dir.path().to_path_buf(),
            python: super::super::reference::find_python(),
        });
        let running = super::super::reference::Running::default();
        let r = run(super::super::reference::memory(config, running), INITIALIZE).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_with_another_id_is_a_typed_envelope_finding() {
        let reply = "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{\"protocolVersion\":2,\"workspace\":null,\"python\":null,\"tools\":[],\"instructions\":null}}\n";
        let r = run(answering(Some(reply)), INITIALIZE).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings.len(), 1, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Envelope);
        assert_eq!(
            r.findings[0].requirement.as_deref(),
            Some(validate::rules::ID),
            "a result's id names the id rule"
        );
    }

    /// A server in memory that answers the handshake's connection and
    /// nothing after it.
    fn answering_once() -> Connector {
        let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
        Connector::Memory(Arc::new(move |mut stream| {
            let first = !served.swap(true, Ordering::SeqCst);
            tokio::spawn(async move {
                let far = Instant::now() + Duration::from_secs(3600);
                let _ = unix::read_line(&mut stream, 1 << 20, far).await;
                if first {
                    let reply = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":2,\"workspace\":null,\"python\":null,\"tools\":[],\"instructions\":null}}\n";
                    let _ = stream.write_all(reply.as_bytes()).await;
                }
                tokio::time::sleep_until(far).await;
            });
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_stops_replying_is_missing_its_reply_at_the_deadline() {
        let r = run(answering_once(), INITIALIZE).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert!(r.message.contains("no reply within 5s"), "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_replies_fails_the_set_up_once_and_the_rest_stand_on_it() {
        let mut session = Session::new(answering(None), None, false);
        session.startup = Duration::from_secs(10);
        session.selected = [SETUP_CASE.to_owned(), "t/init".to_owned()].into();
        let began = Instant::now();
        session.handshake().await;
        // The start-up bound, then as long again: not Vibe's 60 s.
        assert_eq!(began.elapsed().as_secs(), 20);
        let why = session
            .declared
            .silent
            .clone()
            .expect("the set-up got nothing");
        assert!(why.contains("within 20s"), "{why}");
        let case = crate::case::parse_cases::<super::super::ServerCases>("test", INITIALIZE)
            .unwrap()
            .remove(0);
        let r = session.run_case(&case).await;
        assert_eq!(r.outcome, Outcome::Skip, "{}", r.message);
        assert!(
            r.message
                .contains("agent-socket/handshake/version reports it"),
            "{}",
            r.message
        );
        // Without the set-up case in the run, the case fails on it itself.
        session.selected.clear();
        let r = session.run_case(&case).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_answers_in_the_grace_is_slow_not_silent() {
        let connector = Connector::Memory(Arc::new(move |mut stream| {
            tokio::spawn(async move {
                let far = Instant::now() + Duration::from_secs(3600);
                let _ = unix::read_line(&mut stream, 1 << 20, far).await;
                tokio::time::sleep(Duration::from_secs(15)).await;
                let reply = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":2,\"workspace\":null,\"python\":null,\"tools\":[],\"instructions\":null}}\n";
                let _ = stream.write_all(reply.as_bytes()).await;
                tokio::time::sleep_until(far).await;
            });
        }));
        let mut session = Session::new(connector, None, false);
        session.startup = Duration::from_secs(10);
        session.handshake().await;
        assert_eq!(session.declared.silent, None);
        assert_eq!(session.declared.handshake_failed, None);
        assert_eq!(session.declared.slow.map(|d| d.as_secs()), Some(15));
    }
}
