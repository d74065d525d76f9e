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

use crate::case::{Case, Dialect, NoNeed};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::runner;
use crate::suite::{self, BoxFuture, Protocol, Role, RunOptions, Suite};
use crate::target::Target;
use crate::transport::stdio::Launcher;
use std::sync::Arc;
use std::time::Duration;
use steps::{Need, Step};
use table::Tier;

pub const CATALOGUE: &str = "cwx/requirements.json";

/// Hosts: conform plays the core.
pub const HOST: Suite = Suite::new(
    Protocol::Cwx,
    Role::Host,
    CATALOGUE,
    driver::rules::EVERY_MESSAGE,
    suite::load::<HostCases>,
)
.fuzzed_by(fuzz::start, crate::fuzz::live::JOBS)
.with_reference(serve_reference);

/// Cores: conform plays a host the core launches.
pub const CORE: Suite = Suite::new(
    Protocol::Cwx,
    Role::Core,
    CATALOGUE,
    scripted::rules::EVERY_MESSAGE,
    suite::load::<CoreCases>,
)
.with_peer(crate::peer::serve_peer::<CoreCases>);

/// The host cases' language.
#[derive(Debug, Clone, Copy)]
pub struct HostCases;

impl Dialect for HostCases {
    type Step = Step;
    type Need = Need;
    type Config = steps::Config;
    const PROTOCOL: Protocol = Protocol::Cwx;
    const DIR: &'static str = "cwx/cases";
}

crate::runs!(HostCases, run);

/// The core cases' language (`--role core`).
#[derive(Debug, Clone, Copy)]
pub struct CoreCases;

impl Dialect for CoreCases {
    type Step = scripted::CoreStep;
    type Need = NoNeed;
    type Config = scripted::Script;
    const PROTOCOL: Protocol = Protocol::Cwx;
    const DIR: &'static str = scripted::CASES_DIR;
}

crate::runs!(CoreCases, crate::peer::run::<CoreCases>);

/// `conform reference --protocol cwx --tier T`: the reference host on stdio.
fn serve_reference(options: suite::ReferenceOptions) -> BoxFuture<'static, Result<(), RunError>> {
    Box::pin(async move {
        reference::serve(options.tier)
            .await
            .map_err(|e| RunError::Conform(format!("the reference host failed: {e}")))
    })
}

/// Starts the host once: one that cannot be started, or ends without
/// writing a byte, is the target's failure to start (exit 2), not a case
/// failure. Anything it writes, even garbage, lets the cases say what is wrong.
async fn preflight(launcher: &Launcher, startup: Duration) -> Result<(), RunError> {
    use crate::transport::process;
    use crate::transport::stdio::StreamEvent;
    let mut stream = launcher
        .start(&[], crate::wire::Codec::Frames)
        .map_err(|e| RunError::Target(format!("cannot start {launcher:?}: {e}")))?;
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

/// How one host is started for `target`.
fn launcher_for(target: &Target, tier: Tier) -> Result<Launcher, RunError> {
    match target {
        Target::Builtin => Ok(Launcher::Own(
            ["reference", "--protocol", "cwx", "--tier", tier.name()]
                .map(String::from)
                .into(),
        )),
        Target::Exec(cmd) => Ok(Launcher::Command(cmd.clone())),
        Target::Unix(_) => Err(RunError::Usage(
            "cwx hosts speak over stdio: use builtin or exec:<command line>".into(),
        )),
    }
}

async fn run_nth(
    ctx: Arc<driver::Context>,
    cases: Arc<Vec<Case<HostCases>>>,
    i: usize,
) -> CaseResult {
    ctx.run_case(&cases[i]).await
}

pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<HostCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let launcher = launcher_for(&options.target, options.tier)?;
    preflight(&launcher, options.startup_timeout).await?;
    let extension = match (&options.target, &options.extension) {
        (_, Some(x)) => Some(x.clone()),
        (Target::Builtin, None) => Some(driver::Extension {
            path: reference::TOY_ENTRY.into(),
            sha256: reference::TOY_SHA256.into(),
        }),
        _ => None,
    };
    let ctx = driver::Context {
        launcher,
        tier: options.tier,
        strict: options.strict,
        extension,
        startup: options.startup_timeout,
    };
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
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
    Ok(HOST.report(options, results, notes))
}
