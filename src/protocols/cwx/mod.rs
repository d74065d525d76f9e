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
use crate::suite::{self, BoxFuture, Protocol, Role, RunOptions, Suite, SuiteOption};
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
.with_reference(serve_reference)
.reading(&[SuiteOption::Tier, SuiteOption::Extension]);

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
    fn checks(step: &Step) -> Vec<String> {
        step.expect
            .as_ref()
            .map(steps::Expect::check_names)
            .unwrap_or_default()
    }
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

/// What the start-up probe heard of the host.
struct Heard {
    /// How long its first frame took, when one came.
    first: Option<Duration>,
    /// Why the set-up cannot stand: nothing came within the start-up bound
    /// and the grace after it, though the host kept running.
    silent: Option<String>,
}

/// Starts the host once: one that cannot be started, or ends without
/// writing a byte, is the target's failure to start (exit 2), not a case
/// failure. Anything it writes, even garbage, lets the cases say what is
/// wrong. A host still running but silent at the start-up bound gets as
/// long again (a slow start is not a failure); silent after that, it is
/// a set-up that got nothing, which one case reports and the others stand on.
async fn preflight(launcher: &Launcher, startup: Duration) -> Result<Heard, RunError> {
    use crate::transport::process;
    use crate::transport::stdio::StreamEvent;
    let mut stream = launcher
        .start(&[], crate::wire::Codec::Frames)
        .map_err(|e| RunError::Target(format!("cannot start {launcher:?}: {e}")))?;
    let began = tokio::time::Instant::now();
    let mut first = stream.next(began + startup).await;
    if first.is_none() && stream.process.exit_status().is_none() {
        // The grace: alive but quiet may be slow.
        first = stream.next(began + startup * 2).await;
    }
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
    let silent = first.is_none().then(|| {
        format!(
            "set-up: the host wrote nothing within {:.0}s of its start (conform's start-up bound of {:.0}s, then as long again), though it kept running",
            (startup * 2).as_secs_f64(),
            startup.as_secs_f64()
        )
    });
    Ok(Heard {
        first: first.map(|(at, _)| at.saturating_duration_since(began)),
        silent,
    })
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

/// What every case of a host run shares: the cases' context, and what the
/// start-up probe found.
struct HostRun {
    ctx: driver::Context,
    /// The set-up got nothing (see [`preflight`]).
    silent: Option<String>,
    selected: std::collections::BTreeSet<String>,
}

async fn run_nth(run: Arc<HostRun>, cases: Arc<Vec<Case<HostCases>>>, i: usize) -> CaseResult {
    match &run.silent {
        Some(why) => run.ctx.stands_on_silence(&cases[i], why, &run.selected),
        None => run.ctx.run_case(&cases[i]).await,
    }
}

pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<HostCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let launcher = launcher_for(&options.target, options.tier)?;
    let heard = preflight(&launcher, options.startup_timeout).await?;
    let extension = match (&options.target, &options.extension) {
        (_, Some(x)) => Some(x.clone()),
        (Target::Builtin, None) => Some(driver::Extension {
            path: reference::TOY_ENTRY.into(),
            sha256: reference::TOY_SHA256.into(),
        }),
        _ => None,
    };
    // A host slow to start is given, in every case, twice what its first
    // frame took in the probe, if that is longer than the bound.
    let startup = match heard.first {
        Some(t) if t * 2 > options.startup_timeout => t * 2,
        _ => options.startup_timeout,
    };
    let ctx = driver::Context {
        launcher,
        tier: options.tier,
        strict: options.strict,
        extension,
        startup,
    };
    let ctx = HostRun {
        selected: cases.iter().map(|c| c.id.clone()).collect(),
        silent: heard.silent,
        ctx,
    };
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
    let mut notes = vec![format!(
        "the host was run for the {} tier",
        options.tier.name()
    )];
    if startup > options.startup_timeout {
        notes.push(format!(
            "the host is slow to start: its first frame came after {:.1}s, so each case waits up to {:.1}s for host/hello (--startup-timeout {:.0}s)",
            heard.first.unwrap_or_default().as_secs_f64(),
            startup.as_secs_f64(),
            options.startup_timeout.as_secs_f64()
        ));
    }
    if results
        .iter()
        .all(|r| r.outcome == crate::outcome::Outcome::Error)
    {
        notes.push("every case errored: the host could not be started".into());
    }
    Ok(HOST.report(options, results, notes))
}
