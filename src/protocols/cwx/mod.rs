//! The CWX1 extension-host protocol: conform plays the core and tests a host.
//! Its single source is the seed's `protocol.rs` (`../shared/specs/cwx/`).

pub mod core_role;
pub mod corpus;
pub mod driver;
pub mod fuzz;
pub mod reference;
pub mod scripted;
pub mod steps;
pub mod table;
pub mod validate;

use crate::case::{self, Case, CaseFileError};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::requirements::Catalogue;
use crate::runner;
use crate::target::Target;
use std::sync::Arc;
use std::time::Duration;
use steps::Step;
use table::Tier;

pub const CATALOGUE: &str = "cwx/requirements.json";

pub fn catalogue() -> Catalogue {
    Catalogue::parse(crate::corpus::file(CATALOGUE).unwrap_or("{}"))
        .expect("the embedded catalogue parses (a corpus test checks it)")
}

/// The embedded cases plus `extra` files, checked.
pub fn load_cases(extra: &[(String, String)]) -> Result<Vec<Case<Step>>, CaseFileError> {
    case::load_corpus("cwx/cases", &catalogue(), extra, &|c: &Case<Step>| {
        if !c.config.is_null() {
            serde_json::from_value::<steps::Config>(c.config.clone())
                .map_err(|e| format!("config: {e}"))?;
        }
        if c.for_each.is_some() || !c.finally.is_empty() {
            return Err("cwx cases take no for_each or finally".into());
        }
        Ok(())
    })
}

/// The embedded core cases (`--role core`) plus `extra` files, checked.
pub fn load_core_cases(
    extra: &[(String, String)],
) -> Result<Vec<Case<scripted::CoreStep>>, CaseFileError> {
    case::load_corpus(scripted::CASES_DIR, &catalogue(), extra, &|c: &Case<
        scripted::CoreStep,
    >| {
        if c.for_each.is_some() || !c.finally.is_empty() || !c.needs.is_empty() {
            return Err("core cases take no for_each, needs or finally".into());
        }
        scripted::Script::of(c).map(|_| ())
    })
}

impl case::CheckedStep for Step {
    fn check(&self) -> Result<(), String> {
        self.validate()
    }
}

pub struct RunOptions {
    pub target: Target,
    pub tier: Tier,
    pub extension: Option<driver::Extension>,
    pub jobs: usize,
    pub strict: bool,
    pub startup_timeout: Duration,
}

/// Starts the host once: one that cannot be started, or ends without
/// writing a byte, is the target's failure to start (exit 2), not a case
/// failure. Anything it writes, even garbage, lets the cases say what is wrong.
async fn preflight(command: &str, startup: Duration) -> Result<(), RunError> {
    use crate::transport::process;
    use crate::transport::stdio::{LineStream, StreamEvent};
    let mut stream = LineStream::spawn_framed(command, &[])
        .map_err(|e| RunError::Target(format!("cannot start `{command}`: {e}")))?;
    let first = stream.next(tokio::time::Instant::now() + startup).await;
    let silent_end =
        matches!(&first, Some((_, StreamEvent::Closed { partial })) if partial.is_empty());
    let status = stream
        .process
        .wait_for_exit(Duration::from_millis(200))
        .await;
    stream.close_stdin();
    let _ = stream.process.shutdown(process::TERM_GRACE).await;
    if silent_end || (first.is_none() && status.is_some()) {
        let stderr = stream.process.stderr_tail();
        return Err(RunError::Target(format!(
            "the host {} without writing anything{}",
            process::describe_status(status),
            if stderr.trim().is_empty() {
                String::new()
            } else {
                format!("; its stderr:\n{}", stderr.trim_end())
            }
        )));
    }
    Ok(())
}

/// The command line that starts one host for `target`.
fn command_for(target: &Target, tier: Tier) -> Result<String, RunError> {
    match target {
        Target::Builtin => {
            let exe = std::env::current_exe().map_err(|e| {
                RunError::Conform(format!("cannot find conform's own executable: {e}"))
            })?;
            Ok(format!(
                "exec {} reference --protocol cwx --tier {}",
                crate::matcher::shell_quote(&exe.display().to_string()),
                tier.name()
            ))
        }
        Target::Exec(cmd) => Ok(cmd.clone()),
        Target::Unix(_) => Err(RunError::Usage(
            "cwx hosts speak over stdio: use builtin or exec:<command line>".into(),
        )),
    }
}

pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<Step>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let command = command_for(&options.target, options.tier)?;
    preflight(&command, options.startup_timeout).await?;
    let extension = match (&options.target, &options.extension) {
        (_, Some(x)) => Some(x.clone()),
        (Target::Builtin, None) => Some(driver::Extension {
            path: reference::TOY_ENTRY.into(),
            sha256: reference::TOY_SHA256.into(),
        }),
        _ => None,
    };
    let ctx = Arc::new(driver::Context {
        command,
        tier: options.tier,
        strict: options.strict,
        catalogue: catalogue(),
        extension,
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
    let mut notes = vec![format!(
        "the host was run for the {} tier",
        options.tier.name()
    )];
    if results
        .iter()
        .all(|r| r.outcome == crate::outcome::Outcome::Error)
    {
        notes.push("every case errored: the host could not be started".into());
    }
    Ok(RunReport::new(
        crate::protocols::Protocol::Cwx,
        "host",
        options.target.to_string(),
        options.strict,
        results,
        notes,
    ))
}
