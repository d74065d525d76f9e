//! What the three "conform plays the peer" roles share (agent-socket
//! `--role client`, acp `--role client`, cwx `--role core`): how a case's
//! checks become its evidence, the exit a check wants, and how a scripted
//! peer's record is read back; and, for the two stdio roles, the whole run
//! ([`PeerRole`], [`run`]).

use crate::case::Case;
use crate::error::RunError;
use crate::evidence::{Evidence, Kind};
use crate::outcome::{CaseResult, RunReport, SkipKind, TranscriptEntry};
use crate::suite::{RunOptions, Suite};
use crate::target::Target;
use crate::transport::serve::{Served, serve};
use crate::transport::stdio::Launcher;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// The most of a scripted peer's record conform reads back.
pub const RECORD_LIMIT: u64 = 32 * 1024 * 1024;

/// What one check of a peer case found.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Holds,
    /// The peer broke the check.
    Broken(Kind, String),
    /// Seen and worth knowing, never a failure.
    Note(String),
    /// The peer never did what the check is about (the workload the case
    /// gives it), so neither this check nor the later ones can be judged.
    Unseen(String),
}

/// The evidence of a peer case: the every-message rules the peer broke, as
/// (requirement, kind, why), then each step's check in order (`info` marks
/// the steps whose break is information only); `who` did `summary`.
pub fn evidence<S>(
    broken: Vec<(String, Kind, String)>,
    steps: &[S],
    info: impl Fn(&S) -> bool,
    mut check: impl FnMut(&S) -> Check,
    who: &str,
    summary: String,
) -> Evidence {
    let mut ev = Evidence::default();
    for (requirement, kind, why) in broken {
        if !ev
            .findings
            .iter()
            .any(|f| f.requirement.as_deref() == Some(&requirement) && f.message == why)
        {
            ev.broke(&requirement, kind, why);
        }
    }
    for step in steps {
        match check(step) {
            Check::Holds => {}
            // The later steps are about what the peer did not do: moot.
            Check::Unseen(why) => {
                ev.skip(why, SkipKind::Outside);
                break;
            }
            Check::Broken(_, why) if info(step) => ev.notes.push(why),
            Check::Broken(kind, why) => {
                ev.fail(kind, why);
            }
            Check::Note(why) => ev.notes.push(why),
        }
    }
    ev.summary = Some(format!("What the {who} did: {summary}"));
    ev
}

/// One step of a peer case: the one check it names, and whether a broken
/// check is information only.
#[derive(Debug, Clone)]
pub struct PeerStep<C> {
    pub check: C,
    pub info: bool,
}

/// How a peer dialect reads a step: its keys, and the checks they name.
pub trait CheckKeys: Sized {
    /// The step's keys (a struct with `deny_unknown_fields`).
    type Raw: DeserializeOwned;
    /// The keys a step names exactly one of, for the error.
    const ONE_OF: &'static str;
    /// The checks `raw` names, and its `info`.
    fn read(raw: Self::Raw) -> Result<(Vec<Self>, bool), String>;
}

impl<'de, C: CheckKeys> Deserialize<'de> for PeerStep<C> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (checks, info) = C::read(C::Raw::deserialize(d)?).map_err(D::Error::custom)?;
        match <[C; 1]>::try_from(checks) {
            Ok([check]) => Ok(PeerStep { check, info }),
            Err(_) => Err(D::Error::custom(format!("a step is one of {}", C::ONE_OF))),
        }
    }
}

/// The exit status a check wants: a code, or `zero` / `nonzero`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ExitWant {
    Code(i32),
    Named(ExitClass),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitClass {
    Zero,
    Nonzero,
}

impl ExitWant {
    /// Whether an exit with `code` (`None`: by a signal) is the one wanted.
    pub fn holds(self, code: Option<i32>) -> bool {
        match (self, code) {
            (ExitWant::Code(w), Some(c)) => w == c,
            (ExitWant::Named(ExitClass::Zero), Some(c)) => c == 0,
            (ExitWant::Named(ExitClass::Nonzero), Some(c)) => c != 0,
            (ExitWant::Named(ExitClass::Nonzero), None) => true,
            (_, None) => false,
        }
    }
}

impl std::fmt::Display for ExitWant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitWant::Code(c) => write!(f, "{c}"),
            ExitWant::Named(ExitClass::Zero) => f.write_str("0"),
            ExitWant::Named(ExitClass::Nonzero) => f.write_str("non-zero"),
        }
    }
}

/// Where a scripted peer writes down what it exchanged, one JSON line an
/// event: the file conform reads back when the peer is a process of its
/// own, or memory when it runs in conform (the tests').
pub enum Record {
    File(std::fs::File),
    Memory(Arc<Mutex<Vec<String>>>),
}

impl Record {
    /// A record appended to the file at `path`.
    pub fn append_to(path: &Path) -> std::io::Result<Record> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Record::File)
    }

    /// Writes one event down. A record that cannot be written leaves the
    /// case without evidence, which its grading then says; the peer goes on.
    pub fn write(&mut self, event: &impl serde::Serialize) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        match self {
            Record::File(f) => {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
            Record::Memory(lines) => {
                if let Ok(mut l) = lines.lock() {
                    l.push(line);
                }
            }
        }
    }
}

/// The events of a record kept in memory.
pub fn read_memory<E: DeserializeOwned>(lines: &Mutex<Vec<String>>) -> Vec<E> {
    lines
        .lock()
        .map(|l| {
            l.iter()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a scripted peer's record (JSON lines, at most [`RECORD_LIMIT`]
/// bytes); none at all when the peer was never started.
pub fn read_record<E: DeserializeOwned>(path: &Path) -> Result<Vec<E>, String> {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(path) {
        Ok(f) => {
            f.take(RECORD_LIMIT)
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read the scripted peer's record: {e}"))?;
        }
        Err(_) => return Ok(vec![]),
    }
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// A scripted peer ready to start: its temporary directory (the script is
/// in it), the shell-quoted command line that starts it, and where it
/// writes its record.
pub struct Prepared {
    pub dir: tempfile::TempDir,
    pub command: String,
    pub record: PathBuf,
}

/// Writes `script` into a fresh temporary directory named `prefix...` and
/// builds the command line `exe peer --protocol <protocol> --script S
/// --record R`.
pub fn prepare(
    prefix: &str,
    protocol: &str,
    exe: &Path,
    script: &impl serde::Serialize,
) -> Result<Prepared, String> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let script_path = dir.path().join("script.json");
    let record = dir.path().join("record.jsonl");
    std::fs::write(
        &script_path,
        serde_json::to_vec(script).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write the script: {e}"))?;
    let command = [
        exe.display().to_string(),
        "peer".into(),
        "--protocol".into(),
        protocol.into(),
        "--script".into(),
        script_path.display().to_string(),
        "--record".into(),
        record.display().to_string(),
    ]
    .iter()
    .map(|w| crate::matcher::shell_quote(w))
    .collect::<Vec<_>>()
    .join(" ");
    Ok(Prepared {
        dir,
        command,
        record,
    })
}

/// How the peer under test (a client or a core) ended.
pub struct Ended {
    /// Its exit status, when it exited before the deadline.
    pub code: Option<i32>,
    /// It was still running at the deadline and conform stopped it.
    pub stopped: bool,
    /// Milliseconds from `started` to its end (before any shutdown).
    pub ms: u64,
    /// What it logged: the reference's log, or the process's stderr.
    pub log: String,
}

/// Runs the peer under test until it exits or `deadline` passes: the
/// builtin reference (`builtin`, a task), or `line` run with `env` for an
/// `exec:` target, whose whole group (the scripted peer it started
/// included) is then ended. `role` ("client", "core") words the errors.
pub async fn launch<F>(
    target: &Target,
    role: &str,
    builtin: F,
    line: impl FnOnce(&str) -> String,
    env: &[(&str, &std::ffi::OsStr)],
    started: Instant,
    deadline: Instant,
) -> Result<Ended, String>
where
    F: Future<Output = (i32, Vec<String>)> + Send + 'static,
{
    use crate::transport::process::{self, Stdio3};
    use Target;
    let ms = || started.elapsed().as_millis() as u64;
    match target {
        Target::Builtin => {
            let task = tokio::spawn(builtin);
            let abort = task.abort_handle();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok((code, log))) => Ok(Ended {
                    code: Some(code),
                    stopped: false,
                    ms: ms(),
                    log: log.join("\n"),
                }),
                Ok(Err(e)) => Err(format!("conform's reference {role} failed: {e}")),
                Err(_) => {
                    abort.abort();
                    Ok(Ended {
                        code: None,
                        stopped: true,
                        ms: ms(),
                        log: String::new(),
                    })
                }
            }
        }
        Target::Exec(cmd) => {
            let mut spawned = process::spawn(&line(cmd), env, Stdio3::CaptureOutput)
                .map_err(|e| format!("cannot start `{cmd}`: {e}"))?;
            let status = spawned
                .wait_for_exit(deadline.saturating_duration_since(Instant::now()))
                .await;
            let ms = ms();
            // The whole group, the scripted peer it spawned included.
            let _ = spawned.shutdown(process::TERM_GRACE).await;
            Ok(Ended {
                code: status.and_then(|s| s.code()),
                stopped: status.is_none(),
                ms,
                log: spawned.stderr_tail(),
            })
        }
        Target::Unix(_) => Err(format!("--role {role} cannot test unix: targets")),
    }
}

/// What a peer role observed of one case: its peer's record, how the target
/// ended, and what the target logged.
pub type Observed<R> = (Vec<<R as PeerRole>::Event>, <R as PeerRole>::End, String);

/// A role where conform plays a stdio peer the target under test starts
/// (ACP's client role, cwx's core role): what each gives the shared run.
pub trait PeerRole: crate::case::Dialect<Config: PeerScript> {
    /// One event of the peer's record.
    type Event: DeserializeOwned + Send;
    /// How the target ended.
    type End: Send;
    /// The scripted peer, served on stdio.
    type Peer: Served + 'static;
    /// The placeholder a target's command line names conform's peer by.
    const PLACEHOLDER: &'static str;
    /// What conform's peer is, for the errors: the placeholder's word.
    fn peer_name() -> &'static str {
        Self::PLACEHOLDER.trim_matches(|c| c == '{' || c == '}')
    }
    /// The role the target under test plays.
    const ROLE: crate::suite::Role;
    fn suite() -> &'static Suite {
        Self::PROTOCOL
            .suite(Some(Self::ROLE))
            .expect("every peer role is in the suite table")
    }
    /// The peer that plays `script`, recording to `record`.
    fn peer(script: Self::Config, record: Record) -> Self::Peer;
    /// Runs the target against the case's peer.
    fn observe(
        case: &Case<Self>,
        target: &Target,
        exe: &Path,
        started: Instant,
    ) -> impl Future<Output = Result<Observed<Self>, String>> + Send;
    fn evidence(case: &Case<Self>, events: &[Self::Event], end: Self::End) -> Evidence;
    /// Whether the target reached conform's peer in a case: started it and
    /// so left a record (a peer that writes first records its start; one
    /// that only answers records the target's first line).
    fn reached(events: &[Self::Event]) -> bool {
        !events.is_empty()
    }
    fn transcript(events: &[Self::Event], log: &str, started: Instant) -> Vec<TranscriptEntry>;
}

/// A suite's `conform peer`: serves role `R`'s scripted peer on this
/// process's stdio.
pub fn serve_peer<R: PeerRole>(
    script: PathBuf,
    record: PathBuf,
) -> crate::suite::BoxFuture<'static, std::io::Result<()>> {
    Box::pin(serve_stdio(script, record, R::peer))
}

/// Seconds the target has for its whole workload when a script sets none.
pub const DEFAULT_DEADLINE_SECONDS: f64 = 20.0;

/// A scripted peer's script: a peer case's `config`.
pub trait PeerScript:
    DeserializeOwned + std::fmt::Debug + Clone + Default + Send + Sync + 'static
{
    /// The longest `deadline` a case may set, in seconds.
    const MAX_DEADLINE: f64;
    /// Seconds the target has for its whole workload, if the case says.
    fn deadline(&self) -> Option<f64>;
    /// What else serde cannot check, at load.
    fn check_more(&self) -> Result<(), String> {
        Ok(())
    }
    fn deadline_seconds(&self) -> f64 {
        self.deadline().unwrap_or(DEFAULT_DEADLINE_SECONDS)
    }
}

impl<T: PeerScript> crate::case::Config for T {
    fn check(&self) -> Result<(), String> {
        self.check_more()?;
        let max = T::MAX_DEADLINE;
        if self.deadline().is_some_and(|d| !(d > 0.0 && d <= max)) {
            return Err(format!("config: deadline is between 0 and {max} seconds"));
        }
        Ok(())
    }
}

/// Runs a peer role's `cases` against `options.target` and reports.
pub async fn run<R: PeerRole>(
    options: &RunOptions,
    cases: Vec<Case<R>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let suite = R::suite();
    if let Target::Unix(_) = options.target {
        return Err(RunError::Usage(format!(
            "--role {} tests a {} conform starts: --target builtin or exec:<command line> with {}",
            suite.role,
            suite.role,
            R::PLACEHOLDER
        )));
    }
    let exe = std::env::current_exe()
        .map_err(|e| RunError::Conform(format!("cannot find conform's own executable: {e}")))?;
    let reach = Arc::new(Reach::default());
    let ctx = PeerRun {
        target: options.target.clone(),
        exe,
        strict: options.strict,
        reach: reach.clone(),
    };
    let results = crate::runner::run_with(cases, options.jobs, ctx, run_nth::<R>, progress).await;
    reach.verdict(suite.role.id(), R::peer_name(), results.len())?;
    Ok(suite.report(options, results, vec![]))
}

/// What every case of a peer role's run shares.
struct PeerRun {
    target: Target,
    exe: PathBuf,
    strict: bool,
    reach: Arc<Reach>,
}

async fn run_nth<R: PeerRole>(ctx: Arc<PeerRun>, cases: Arc<Vec<Case<R>>>, i: usize) -> CaseResult {
    let started = Instant::now();
    let observed = R::observe(&cases[i], &ctx.target, &ctx.exe, started).await;
    match &observed {
        Ok((events, _, log)) => ctx.reach.saw(R::reached(events), log),
        Err(why) => ctx.reach.saw(false, why),
    }
    graded(&cases[i], observed, ctx.strict, started)
}

/// Whether the target under test reached conform's peer in any case of a
/// run (DESIGN.md: a target that "cannot be spawned ... or exits without
/// writing anything" could not be started, exit 2). A target that reached
/// it once, even to write garbage, gets its report; one that never did in
/// any case gets no vacuous one (a check that the peer was never asked
/// something holds of a target that never ran).
#[derive(Default)]
pub struct Reach {
    reached: AtomicBool,
    /// What a target that did not reach the peer said (its stderr), kept
    /// from the first such case that said anything.
    said: Mutex<Option<String>>,
}

/// The most of a target's stderr the "could not be started" error quotes.
const SAID_LIMIT: usize = 4096;

impl Reach {
    /// One case: whether the target reached the peer, and what it logged.
    pub fn saw(&self, reached: bool, log: &str) {
        if reached {
            self.reached.store(true, Ordering::SeqCst);
            return;
        }
        let text = log.trim();
        if text.is_empty() {
            return;
        }
        if let Ok(mut said) = self.said.lock()
            && said.is_none()
        {
            *said = Some(crate::matcher::truncate(text, SAID_LIMIT));
        }
    }

    /// After `cases` cases: the target "could not be started" when it
    /// reached conform's `peer` in none of them. `role` is the role the
    /// target plays.
    pub fn verdict(&self, role: &str, peer: &str, cases: usize) -> Result<(), RunError> {
        if cases == 0 || self.reached.load(Ordering::SeqCst) {
            return Ok(());
        }
        let said = self.said.lock().ok().and_then(|s| s.clone());
        Err(RunError::Target(format!(
            "the {role} could not be started: in none of the {cases} cases did it reach conform's {peer}{}",
            match said {
                Some(s) => format!("; its stderr:\n{s}"),
                None => " (and it wrote nothing on stderr)".into(),
            }
        )))
    }
}

/// What the target did in `case`, graded.
pub fn graded<R: PeerRole>(
    case: &Case<R>,
    observed: Result<Observed<R>, String>,
    strict: bool,
    started: Instant,
) -> CaseResult {
    let (evidence, transcript) = match observed {
        Err(why) => (Evidence::failed_to_run(why), vec![]),
        Ok((events, end, log)) => (
            R::evidence(case, &events, end),
            R::transcript(&events, &log, started),
        ),
    };
    CaseResult::graded(case, evidence, strict, started, transcript)
}

/// Serves a scripted peer on this process's stdio: its script read from
/// `script`, its record appended to `record`.
pub async fn serve_stdio<C, S>(
    script: PathBuf,
    record: PathBuf,
    make: impl FnOnce(C, Record) -> S,
) -> std::io::Result<()>
where
    C: DeserializeOwned,
    S: Served,
{
    let script: C = serde_json::from_slice(&std::fs::read(script)?)
        .map_err(|e| std::io::Error::other(format!("the script: {e}")))?;
    let mut peer = make(script, Record::append_to(&record)?);
    serve(&mut peer, tokio::io::stdin(), tokio::io::stdout()).await
}

/// A scripted peer served in this process over in-memory pipes: how to
/// start it, its record, and whether it has ended.
pub struct InMemory {
    pub launcher: Launcher,
    pub record: Arc<Mutex<Vec<String>>>,
    pub ended: Arc<AtomicBool>,
}

impl InMemory {
    /// A fresh `make(record)` for each start.
    pub fn serve<S>(make: impl Fn(Record) -> S + Send + Sync + 'static) -> InMemory
    where
        S: Served + 'static,
    {
        let record = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(AtomicBool::new(false));
        let (lines, done) = (record.clone(), ended.clone());
        let launcher = Launcher::Memory(Arc::new(move |pipes| {
            let mut peer = make(Record::Memory(lines.clone()));
            let done = done.clone();
            Box::pin(async move {
                let _ = serve(&mut peer, pipes.input, pipes.output).await;
                done.store(true, Ordering::SeqCst);
            })
        }));
        InMemory {
            launcher,
            record,
            ended,
        }
    }

    /// The events the peer wrote down.
    pub fn events<E: DeserializeOwned>(&self) -> Vec<E> {
        read_memory(&self.record)
    }

    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

/// Runs `target` until `deadline`: its exit code and log, or `None` when
/// conform stopped it at the deadline.
pub async fn until<F>(deadline: Instant, target: F) -> Option<(i32, String)>
where
    F: Future<Output = (i32, Vec<String>)>,
{
    tokio::time::timeout_at(deadline, target)
        .await
        .ok()
        .map(|(code, log)| (code, log.join("\n")))
}

/// Runs a reference target's `workload` against the peer (`who`) that
/// `peer` starts, then ends the peer: the target's exit status (0, or
/// `failed` when the workload fails) and its log.
pub async fn run_reference(
    peer: &Launcher,
    who: &str,
    codec: crate::wire::Codec,
    failed: i32,
    workload: impl AsyncFnOnce(
        &mut crate::transport::stdio::LineStream,
        &mut Vec<String>,
    ) -> Result<(), String>,
) -> (i32, Vec<String>) {
    let mut log = Vec::new();
    let mut stream = match peer.start(&[], codec) {
        Ok(s) => s,
        Err(e) => {
            log.push(format!("cannot start the {who}: {e}"));
            return (1, log);
        }
    };
    let code = match workload(&mut stream, &mut log).await {
        Ok(()) => 0,
        Err(why) => {
            log.push(why);
            failed
        }
    };
    stream.close_stdin();
    let _ = stream
        .process
        .wait_for_exit(std::time::Duration::from_secs(2))
        .await;
    let _ = stream
        .process
        .shutdown(crate::transport::process::TERM_GRACE)
        .await;
    (code, log)
}
