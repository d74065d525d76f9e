//! The Agent Client Protocol v1: conform plays the editor and tests an agent
//! over its stdin and stdout.

pub mod client_role;
pub mod driver;
pub mod editor;
pub mod fuzz;
pub mod monitor;
pub mod reference;
pub mod schema;
pub mod scripted;
pub mod steps;
pub mod table;

use crate::case::{Case, Dialect, NoNeed};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::runner;
use crate::suite::{self, BoxFuture, Protocol, Role, RunOptions, Suite};
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
.fuzzed_by(fuzz::start, 4)
.with_reference(serve_reference);

/// Clients: conform plays an agent the client spawns.
pub const CLIENT: Suite = Suite::new(
    Protocol::Acp,
    Role::Client,
    CATALOGUE,
    scripted::rules::EVERY_MESSAGE,
    suite::load::<ClientCases>,
)
.with_peer(crate::peer::serve_peer::<ClientCases>);

/// The agent cases' language.
#[derive(Debug, Clone, Copy)]
pub struct AgentCases;

impl Dialect for AgentCases {
    type Step = Step;
    type Need = Need;
    type Config = steps::Config;
    const PROTOCOL: Protocol = Protocol::Acp;
    const DIR: &'static str = "acp/cases";
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

/// A fresh workspace: the `cwd` of a case's sessions, with the files the
/// prompt script names (corpus/acp/SCRIPT.md).
pub fn workspace() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("conform-acp-")
        .tempdir()
        .map_err(|e| format!("cannot create a workspace: {e}"))?;
    let setup = || -> std::io::Result<()> {
        std::fs::write(dir.path().join("notes.txt"), "conform notes\n")?;
        std::fs::create_dir(dir.path().join("src"))?;
        std::fs::write(dir.path().join("src/main.txt"), "fn main() {}\n")
    };
    setup().map_err(|e| format!("cannot fill the workspace: {e}"))?;
    Ok(dir)
}

/// How one agent is started for `target`.
pub fn launcher_for(target: &Target) -> Result<Launcher, RunError> {
    match target {
        Target::Builtin => {
            let exe = std::env::current_exe().map_err(|e| {
                RunError::Conform(format!("cannot find conform's own executable: {e}"))
            })?;
            Ok(Launcher::Command(format!(
                "exec {} reference --protocol acp",
                crate::matcher::shell_quote(&exe.display().to_string())
            )))
        }
        Target::Exec(cmd) => Ok(Launcher::Command(cmd.clone())),
        Target::Unix(_) => Err(RunError::Usage(
            "acp agents speak over stdio: use builtin or exec:<command line>".into(),
        )),
    }
}

/// Runs `cases` against the target and reports.
async fn run_nth(
    ctx: Arc<driver::Context>,
    cases: Arc<Vec<Case<AgentCases>>>,
    i: usize,
) -> CaseResult {
    ctx.run_case(&cases[i]).await
}

pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<AgentCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let launcher = launcher_for(&options.target)?;
    let probe = driver::probe(&launcher, options.startup_timeout)
        .await
        .map_err(|e| RunError::Target(format!("the agent could not be initialized: {e}")))?;
    let mut notes = Vec::new();
    if let Err(why) = &probe.session {
        notes.push(format!(
            "no session could be created, so every case that needs one is skipped: {why}"
        ));
    }
    let ctx = driver::Context {
        launcher,
        strict: options.strict,
        probe,
        startup: options.startup_timeout,
    };
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
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
