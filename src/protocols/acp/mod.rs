//! The Agent Client Protocol v1: conform plays the editor and tests an agent
//! over its stdin and stdout.

pub mod checks;
pub mod client_role;
pub mod driver;
pub mod editor;
pub mod fuzz;
pub mod mcp_stub;
pub mod monitor;
pub mod prompts;
pub mod reference;
pub mod schema;
pub mod scripted;
pub mod steps;
pub mod table;

use crate::case::{Case, Dialect, NoNeed};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::runner;
use crate::suite::{self, BoxFuture, Protocol, Role, RunOptions, Suite, SuiteOption};
use crate::target::Target;
use crate::transport::stdio::Launcher;
use std::sync::Arc;
use steps::{Need, Step};

pub const CATALOGUE: &str = "acp/requirements.json";

/// Agents: conform plays the editor.
pub const AGENT: Suite = Suite::new(
    Protocol::Acp,
    Role::Agent,
    CATALOGUE,
    monitor::rules::EVERY_MESSAGE,
    suite::load::<AgentCases>,
)
.fuzzed_by(fuzz::start, crate::fuzz::live::JOBS)
.with_reference(serve_reference)
.reading(&[SuiteOption::Prompts, SuiteOption::Isolate]);

/// Clients: conform plays an agent the client spawns.
pub const CLIENT: Suite = Suite::new(
    Protocol::Acp,
    Role::Client,
    CATALOGUE,
    scripted::rules::EVERY_MESSAGE,
    suite::load::<ClientCases>,
)
.with_peer(serve_peer);

/// `conform peer --protocol acp`: the scripted agent a client under test
/// starts, or, for a script that asks for it, conform's MCP stub (the stdio
/// MCP server agent cases give an agent).
fn serve_peer(
    script: std::path::PathBuf,
    record: std::path::PathBuf,
) -> BoxFuture<'static, std::io::Result<()>> {
    if mcp_stub::is_stub_script(&script) {
        Box::pin(crate::peer::serve_stdio(
            script,
            record,
            mcp_stub::Stub::new,
        ))
    } else {
        crate::peer::serve_peer::<ClientCases>(script, record)
    }
}

/// The agent cases' language.
#[derive(Debug, Clone, Copy)]
pub struct AgentCases;

impl Dialect for AgentCases {
    type Step = Step;
    type Need = Need;
    type Config = steps::Config;
    const PROTOCOL: Protocol = Protocol::Acp;
    const DIR: &'static str = "acp/cases";
    fn checks(step: &Step) -> Vec<String> {
        step.expect
            .as_ref()
            .map(steps::Expect::check_names)
            .unwrap_or_default()
    }
}

crate::runs!(AgentCases, run);

/// The client cases' language (`--role client`).
#[derive(Debug, Clone, Copy)]
pub struct ClientCases;

impl Dialect for ClientCases {
    type Step = scripted::ClientStep;
    type Need = NoNeed;
    type Config = scripted::Script;
    const PROTOCOL: Protocol = Protocol::Acp;
    const DIR: &'static str = scripted::CASES_DIR;
}

crate::runs!(ClientCases, crate::peer::run::<ClientCases>);

/// `conform reference --protocol acp`: the reference agent on stdio.
fn serve_reference(_: suite::ReferenceOptions) -> BoxFuture<'static, Result<(), RunError>> {
    Box::pin(async {
        reference::serve()
            .await
            .map_err(|e| RunError::Conform(format!("the reference agent failed: {e}")))
    })
}

/// What `notes.txt` holds in a fresh workspace.
pub const WORKSPACE_NOTES: &str = "conform notes\n";

/// A fresh workspace: the `cwd` of a case's sessions, with the files the
/// prompt script names (corpus/acp/SCRIPT.md).
pub fn workspace() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("conform-acp-")
        .tempdir()
        .map_err(|e| format!("cannot create a workspace: {e}"))?;
    let setup = || -> std::io::Result<()> {
        std::fs::write(dir.path().join("notes.txt"), WORKSPACE_NOTES)?;
        std::fs::create_dir(dir.path().join("src"))?;
        std::fs::write(dir.path().join("src/main.txt"), "fn main() {}\n")
    };
    setup().map_err(|e| format!("cannot fill the workspace: {e}"))?;
    Ok(dir)
}

/// How one agent is started for `target`.
pub fn launcher_for(target: &Target) -> Result<Launcher, RunError> {
    match target {
        Target::Builtin => Ok(Launcher::Own(
            ["reference", "--protocol", "acp"].map(String::from).into(),
        )),
        Target::Exec(cmd) => Ok(Launcher::Command(cmd.clone())),
        Target::Unix(_) => Err(RunError::Usage(
            "acp agents speak over stdio: use builtin or exec:<command line>".into(),
        )),
    }
}

/// The run's context, which the run keeps too (its processes, its notes).
struct Shared(Arc<driver::Context>);

/// Runs `cases` against the target and reports.
async fn run_nth(ctx: Arc<Shared>, cases: Arc<Vec<Case<AgentCases>>>, i: usize) -> CaseResult {
    ctx.0.run_case(&cases[i]).await
}

pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<AgentCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let launcher = launcher_for(&options.target)?;
    let mut book = prompts::Book::builtin().map_err(RunError::Conform)?;
    if let Some(path) = &options.prompts {
        book = book.with_user(path).map_err(RunError::Usage)?;
    }
    let (probe, conn, timing) = driver::probe_timed(&launcher, options.startup_timeout)
        .await
        .map_err(|e| RunError::Target(format!("the agent could not be started: {e}")))?;
    let mut notes = timing.notes.clone();
    // Start-up bounds adapt to what the agent showed (drive::patience).
    let startup = timing.startup(options.startup_timeout);
    if startup > options.startup_timeout {
        notes.push(format!(
            "the start-up bound for later agent processes is {}, adapted from --startup-timeout ({}) to the agent's first answer, which took {}",
            crate::drive::patience::secs(startup),
            crate::drive::patience::secs(options.startup_timeout),
            crate::drive::patience::secs(timing.first_answer.unwrap_or_default()),
        ));
    }
    if let Err(why) = &probe.initialize {
        notes.push(format!(
            "the handshake failed before the run ({why}): the handshake cases say how, and every case that needs a handshake is skipped"
        ));
    } else if let Err(why) = &probe.session {
        notes.push(format!(
            "no session could be created, so every case that needs one is skipped: {why}"
        ));
    }
    let mut ctx = driver::Context::new(
        launcher,
        options.strict,
        probe,
        startup,
        book,
        options.isolate,
    );
    ctx.selected = cases.iter().map(|c| c.id.clone()).collect();
    match conn {
        Some(c) if !options.isolate => ctx.give_back(c),
        Some(c) => c.close().await,
        None => {}
    }
    let ctx = Arc::new(ctx);
    let shared = Shared(ctx.clone());
    let results = runner::run_with(cases, options.jobs, shared, run_nth, progress).await;
    ctx.close_pool().await;
    notes.extend(ctx.notes());
    notes.push(coverage_note(&results));
    Ok(AGENT.report(options, results, notes))
}

/// How much of the agent-side catalogue the run exercised: requirements
/// with at least one case that ran (not skipped), of those with cases.
fn coverage_note(results: &[CaseResult]) -> String {
    use std::collections::BTreeSet;
    let agent: BTreeSet<&str> = AGENT
        .catalogue()
        .requirements
        .iter()
        .filter(|r| r.role == Role::Agent)
        .map(|r| r.id.as_str())
        .collect();
    let mut with_case = BTreeSet::new();
    let mut exercised = BTreeSet::new();
    for r in results {
        for req in &r.requirements {
            if agent.contains(req.as_str()) {
                with_case.insert(req.clone());
                if r.outcome != crate::outcome::Outcome::Skip {
                    exercised.insert(req.clone());
                }
            }
        }
    }
    format!(
        "exercised {} of the {} agent requirements the selected cases check ({} in the catalogue); skipped cases exercised nothing",
        exercised.len(),
        with_case.len(),
        agent.len()
    )
}
