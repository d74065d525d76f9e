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

use crate::case::{self, Case, CaseFileError};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::requirements::Catalogue;
use crate::runner;
use crate::target::Target;
use std::sync::Arc;
use std::time::Duration;
use steps::Step;

pub const CATALOGUE: &str = "acp/requirements.json";

/// The requirement catalogue of the protocol.
pub fn catalogue() -> Catalogue {
    Catalogue::parse(crate::corpus::file(CATALOGUE).unwrap_or("{}"))
        .expect("the embedded catalogue parses (a corpus test checks it)")
}

/// The embedded cases plus `extra` files, checked.
pub fn load_cases(extra: &[(String, String)]) -> Result<Vec<Case<Step>>, CaseFileError> {
    case::load_corpus("acp/cases", &catalogue(), extra, &|c: &Case<Step>| {
        if !c.config.is_null() {
            serde_json::from_value::<steps::Config>(c.config.clone())
                .map_err(|e| format!("config: {e}"))?;
        }
        if c.for_each.is_some() || !c.finally.is_empty() {
            return Err("acp cases take no for_each or finally".into());
        }
        Ok(())
    })
}

/// The embedded client cases (`--role client`) plus `extra` files, checked.
pub fn load_client_cases(
    extra: &[(String, String)],
) -> Result<Vec<Case<scripted::ClientStep>>, CaseFileError> {
    case::load_corpus(scripted::CASES_DIR, &catalogue(), extra, &|c: &Case<
        scripted::ClientStep,
    >| {
        if c.for_each.is_some() || !c.finally.is_empty() || !c.needs.is_empty() {
            return Err("client cases take no for_each, needs or finally".into());
        }
        scripted::Script::of(c).map(|_| ())
    })
}

impl case::CheckedStep for Step {
    fn check(&self) -> Result<(), String> {
        self.validate()
    }
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

/// How a run is set up.
pub struct RunOptions {
    pub target: Target,
    pub jobs: usize,
    pub strict: bool,
    pub startup_timeout: Duration,
}

/// The command line that starts one agent for `target`.
pub fn command_for(target: &Target) -> Result<String, RunError> {
    match target {
        Target::Builtin => {
            let exe = std::env::current_exe().map_err(|e| {
                RunError::Conform(format!("cannot find conform's own executable: {e}"))
            })?;
            Ok(format!(
                "exec {} reference --protocol acp",
                crate::matcher::shell_quote(&exe.display().to_string())
            ))
        }
        Target::Exec(cmd) => Ok(cmd.clone()),
        Target::Unix(_) => Err(RunError::Usage(
            "acp agents speak over stdio: use builtin or exec:<command line>".into(),
        )),
    }
}

/// Runs `cases` against the target and reports.
pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<Step>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let command = command_for(&options.target)?;
    let probe = driver::probe(&command, options.startup_timeout)
        .await
        .map_err(|e| RunError::Target(format!("the agent could not be initialized: {e}")))?;
    let mut notes = Vec::new();
    if let Err(why) = &probe.session {
        notes.push(format!(
            "no session could be created, so every case that needs one is skipped: {why}"
        ));
    }
    let ctx = Arc::new(driver::Context {
        command,
        strict: options.strict,
        catalogue: catalogue(),
        probe,
        startup: options.startup_timeout,
    });
    let cases = Arc::new(cases);
    let run_one: Arc<dyn Fn(usize) -> runner::CaseFuture + Send + Sync> = {
        let ctx = ctx.clone();
        let cases = cases.clone();
        Arc::new(move |i| {
            let ctx = ctx.clone();
            let cases = cases.clone();
            Box::pin(async move { ctx.run_case(&cases[i]).await })
        })
    };
    let results = runner::run_cases(&cases, options.jobs, run_one, progress).await;
    notes.push(coverage_note(&results));
    Ok(RunReport::new(
        crate::protocols::Protocol::Acp,
        "agent",
        options.target.to_string(),
        options.strict,
        results,
        notes,
    ))
}

/// How much of the agent-side catalogue the run exercised: requirements
/// with at least one case that ran (not skipped), of those with cases.
fn coverage_note(results: &[CaseResult]) -> String {
    use std::collections::BTreeSet;
    let catalogue = catalogue();
    let agent: BTreeSet<&str> = catalogue
        .requirements
        .iter()
        .filter(|r| r.role == "agent")
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
