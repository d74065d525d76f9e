//! The `conform` command line (DESIGN.md: extend it, never break it): it
//! parses, finds the suite in [`crate::suite::SUITES`], and hands over.
//! Nothing here knows which protocols there are.

use crate::case::{self, Shard};
use crate::error::RunError;
use crate::interrupt::Signals;
use crate::outcome::StopSignal;
use crate::protocols::cwx::{driver::Extension, table::Tier};
use crate::report::{self, Format};
use crate::suite::{FuzzSetup, Protocol, ReferenceOptions, Role, Suite, SuiteOption};
use crate::target::Target;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "conform",
    version,
    about = "Conformance test harness and fuzzer for agent JSON-RPC protocols"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a protocol's conformance suite against a target.
    Run(RunArgs),
    /// Fuzz a live target with generated inputs; shrink and save what fails.
    Fuzz(FuzzArgs),
    /// List a protocol's cases with ids, levels and requirements.
    List(ListArgs),
    /// Serve conform's reference implementation of a role (the `builtin` target).
    Reference(ReferenceArgs),
    /// The scripted peer a client under test starts through `{agent}` (internal).
    #[command(hide = true)]
    Peer(PeerArgs),
    /// Print a completion script for SHELL (clap_complete), e.g.
    /// `conform completions bash > /etc/bash_completion.d/conform`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the JSON Schema of `--format json` (report) or of the
    /// certification bundle (certification): the contract of those files.
    Schema {
        #[arg(value_enum, default_value = "report")]
        document: crate::report::schema::Document,
    },
    /// Print conform's manual page (roff, clap_mangen), or write one page a
    /// command into DIR (conform.1, conform-run.1, ...).
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The protocol and the role under test, as every subcommand takes them.
#[derive(Debug, Args)]
pub struct SuiteArgs {
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// The role under test (by default the protocol's first: agent-socket
    /// server, cwx host, acp agent).
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

impl SuiteArgs {
    pub(crate) fn suite(&self) -> Result<&'static Suite, RunError> {
        self.protocol.suite(self.role)
    }
}

#[derive(Debug, Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// The script the peer plays (written by `conform run --role client`).
    #[arg(long)]
    pub script: PathBuf,
    /// Where the peer records every line it exchanges.
    #[arg(long)]
    pub record: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    /// builtin, exec:<command line> (with {socket} for agent-socket), or
    /// unix:<path>. Given several times, every target runs the same cases
    /// and the report is a matrix: rows the cases, columns the targets.
    #[arg(long, default_value = "builtin")]
    pub target: Vec<Target>,
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Write the report here instead of standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Case files or directories that add to or override the embedded corpus.
    #[arg(long = "case")]
    pub cases: Vec<PathBuf>,
    /// Run only cases whose id starts with, or matches the glob, PATTERN (comma-separated).
    #[arg(long)]
    pub filter: Option<String>,
    /// A broken SHOULD fails the run.
    #[arg(long)]
    pub strict: bool,
    /// How many cases run at once (disruptive cases always run alone).
    #[arg(short = 'j', long = "jobs")]
    pub jobs: Option<usize>,
    /// How long an exec: target has to start accepting connections.
    #[arg(long, default_value_t = 10.0)]
    pub startup_timeout: f64,
    /// cwx: the trust tier the host was launched with (default plugin).
    #[arg(long, value_enum)]
    pub tier: Option<Tier>,
    /// cwx: an extension entry the host can load, as PATH#SHA256, for the
    /// cases that need a loaded extension (builtin: its toy extension).
    #[arg(long)]
    pub extension: Option<Extension>,
    /// Run only shard K of N (1-based): the selected cases dealt out in turn,
    /// so N runs with K = 1..N run every case exactly once.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Print the cases the run would select, and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Known failures, each with a reason (JSON): a listed failure does not
    /// fail the run, an unlisted one does, a listed case that passes is stale
    /// and fails the run.
    #[arg(long, value_name = "FILE")]
    pub expected_failures: Option<PathBuf>,
    /// Write every case's transcript (both directions, with times) to DIR,
    /// one JSON file a case; secrets are redacted as in every report.
    #[arg(long, value_name = "DIR")]
    pub transcripts: Option<PathBuf>,
    /// Write a certification bundle (certification.json and .md) to DIR:
    /// conform's version, the corpus digest, the target, every requirement
    /// with its verdict and evidence, the waivers, and the verdict.
    #[arg(long, value_name = "DIR")]
    pub certify: Option<PathBuf>,
    /// acp: prompt phrasings your agent's model understands (JSON), tried first.
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// acp: a fresh agent process for every case (none shared).
    #[arg(long)]
    pub isolate: bool,
    /// Also write the report in FORMAT to FILE (repeatable): one run, every
    /// format a CI job keeps, e.g. `--report junit=conform.xml
    /// --report html=conform.html`.
    #[arg(long = "report", value_name = "FORMAT=FILE")]
    pub reports: Vec<report::ReportFile>,
}

#[derive(Debug, Args)]
pub struct FuzzArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    /// builtin, exec:<command line> (with {socket} for agent-socket), or unix:<path>.
    #[arg(long, default_value = "builtin")]
    pub target: Target,
    /// The seed the inputs come from (printed; by default one from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop after this many inputs (10000 when neither this nor --duration is given).
    #[arg(long, conflicts_with = "duration")]
    pub cases: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Where shrunk reproducers are written, as case files.
    #[arg(long, default_value = "conform-fuzz-findings")]
    pub out: PathBuf,
    /// How many inputs run at once (by default the suite's own).
    #[arg(short = 'j', long = "jobs")]
    pub jobs: Option<usize>,
    /// How long a reply or a probe may take, in seconds (the fuzzer's bound,
    /// shorter than most of the sources' own).
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
    /// The most shrinking attempts per finding.
    #[arg(long, default_value_t = 256)]
    pub shrink_limit: usize,
    /// The longest a finding's shrinking may take, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub shrink_time: f64,
    /// How long an exec: target has to start.
    #[arg(long, default_value_t = 10.0)]
    pub startup_timeout: f64,
    /// cwx: the trust tier the host was launched with (default plugin).
    #[arg(long, value_enum)]
    pub tier: Option<Tier>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    #[arg(long)]
    pub filter: Option<String>,
    /// Only shard K of N, as `run --shard` deals them.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReferenceArgs {
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// The Unix socket to listen on (agent-socket; acp serves on stdio).
    #[arg(long)]
    pub listen: Option<PathBuf>,
    /// The sandbox workspace; by default a fresh temporary directory.
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// cwx: the trust tier the reference host serves (default plugin).
    #[arg(long, value_enum)]
    pub tier: Option<Tier>,
}

/// Runs the command line and returns the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    crate::transport::process::adopt_orphans();
    crate::transport::process::return_large_frees();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            crate::console::err_line(&format!("conform: cannot start the runtime: {e}"));
            return 2;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Whatever a case left running is stopped with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
    crate::transport::process::sweep();
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::console::err_line(&format!("conform: {e}"));
            e.exit_code()
        }
    }
}

/// Runs a command. `run` keeps its report when a signal stops it; the
/// fuzzer ends on Ctrl-C or SIGTERM, the other commands on Ctrl-C, their
/// targets ended as the runtime shuts down.
async fn dispatch(cli: Cli) -> Result<i32, RunError> {
    let interrupt = async {
        tokio::signal::ctrl_c()
            .await
            .map(|()| StopSignal::Interrupt)
    };
    let stopped = |signal| Err(RunError::Interrupted(signal));
    match cli.command {
        Command::Run(args) => crate::run::run(args).await,
        Command::Fuzz(args) => {
            let mut signals = listen()?;
            tokio::select! {
                r = fuzz(args) => r,
                s = signals.recv() => stopped(s),
            }
        }
        Command::List(args) => list(args),
        Command::Reference(args) => tokio::select! {
            r = reference(args) => r,
            Ok(s) = interrupt => stopped(s),
        },
        Command::Peer(args) => tokio::select! {
            r = peer(args) => r,
            Ok(s) = interrupt => stopped(s),
        },
        Command::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write (a
            // closed pipe), and a panic in conform is a bug.
            let mut script = Vec::new();
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "conform", &mut script);
            crate::console::out_bytes(&script);
            Ok(0)
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::Schema { document } => {
            crate::console::out_bytes(document.text().as_bytes());
            Ok(0)
        }
    }
}

/// `conform man`: the page on standard output, or every page into `dir`.
fn man(dir: Option<&std::path::Path>) -> Result<i32, RunError> {
    let cmd = <Cli as clap::CommandFactory>::command();
    let written = match dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| clap_mangen::generate_to(cmd, dir))
            .map_err(|e| format!("cannot write the manual pages to {}: {e}", dir.display())),
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| format!("cannot render the manual page: {e}"))
                .map(|()| crate::console::out_bytes(&page))
        }
    };
    written.map(|()| 0).map_err(RunError::Conform)
}

/// The suite-owned options a command line gave: `--tier`, `--extension`,
/// `--prompts`, `--isolate`.
pub(crate) fn given(tier: bool, extension: bool, prompts: bool, isolate: bool) -> Vec<SuiteOption> {
    [
        (tier, SuiteOption::Tier),
        (extension, SuiteOption::Extension),
        (prompts, SuiteOption::Prompts),
        (isolate, SuiteOption::Isolate),
    ]
    .into_iter()
    .filter_map(|(on, o)| on.then_some(o))
    .collect()
}

pub(crate) fn bounded(name: &str, secs: f64, max: f64) -> Result<f64, RunError> {
    if secs > 0.0 && secs <= max {
        Ok(secs)
    } else {
        Err(RunError::Usage(format!(
            "{name} is between 0 and {max} seconds"
        )))
    }
}

pub(crate) fn listen() -> Result<Signals, RunError> {
    Signals::listen().map_err(|e| RunError::Conform(format!("cannot listen for signals: {e}")))
}

async fn fuzz(args: FuzzArgs) -> Result<i32, RunError> {
    let suite = args.suite.suite()?;
    let Some(entry) = &suite.fuzz else {
        return Err(RunError::Usage(format!(
            "conform fuzz has no harness for the {} role of {}; --role {} is for conform run",
            suite.role, suite.protocol, suite.role
        )));
    };
    suite.check_options(&given(args.tier.is_some(), false, false, false))?;
    let timeout = bounded("--timeout", args.timeout, 600.0)?;
    let (cases, duration) = crate::fuzz::limits(args.cases, args.duration)?;
    let seed = args.seed.unwrap_or_else(crate::fuzz::clock_seed);
    let options = crate::fuzz::Options {
        protocol: suite.protocol,
        role: suite.role,
        target: args.target.to_string(),
        seed,
        cases,
        duration,
        out: args.out.clone(),
        jobs: args.jobs.unwrap_or(entry.jobs).max(1),
        shrink_limit: args.shrink_limit,
        shrink_time: Duration::from_secs_f64(args.shrink_time.clamp(0.0, 86400.0)),
    };
    crate::console::err_line(&format!("conform fuzz: seed {seed}"));
    let mut progress = |line: &str| crate::console::err_line(&format!("conform fuzz: {line}"));
    let setup = FuzzSetup {
        target: args.target.clone(),
        startup: Duration::from_secs_f64(args.startup_timeout.clamp(0.1, 3600.0)),
        timeout,
        tier: args.tier.unwrap_or(Tier::Plugin),
    };
    let (report, notes) = (entry.start)(setup, &options, &mut progress).await?;
    let mut text = crate::fuzz::human(&report, &options);
    for n in notes {
        text.push_str(&format!("note: {n}\n"));
    }
    crate::console::out(&text);
    Ok(report.exit_code())
}

fn list(args: ListArgs) -> Result<i32, RunError> {
    let suite = args.suite.suite()?;
    let listing = (suite.load)(&[])?.listing();
    let ids: Vec<&str> = listing.iter().map(|c| c.id.as_str()).collect();
    let keep = case::select(&ids, args.filter.as_deref(), args.shard)?;
    let chosen = chosen(listing, &keep);
    if args.json {
        crate::console::out(&format!(
            "{}\n",
            report::list::json(&chosen, suite.catalogue())
        ));
    } else {
        crate::console::out(&report::list::text(&chosen, suite.catalogue()));
    }
    Ok(0)
}

/// The listings `keep` selects.
pub(crate) fn chosen(listing: Vec<case::Listing>, keep: &[bool]) -> Vec<case::Listing> {
    listing
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c)
        .collect()
}

/// The protocol's suite that provides `what`, for the commands that serve
/// one role of a protocol (`reference`, `peer`).
fn suite_with<T>(
    protocol: Protocol,
    what: &str,
    get: impl Fn(&'static Suite) -> Option<T>,
) -> Result<T, RunError> {
    protocol
        .suites()
        .find_map(get)
        .ok_or_else(|| RunError::Usage(format!("conform has no {what} for {protocol}")))
}

async fn peer(args: PeerArgs) -> Result<i32, RunError> {
    let serve = suite_with(args.protocol, "scripted peer", |s| s.peer)?;
    serve(args.script, args.record)
        .await
        .map(|()| 0)
        .map_err(|e| RunError::Conform(format!("the scripted peer failed: {e}")))
}

async fn reference(args: ReferenceArgs) -> Result<i32, RunError> {
    let (suite, serve) = suite_with(args.protocol, "reference", |s| s.reference.map(|r| (s, r)))?;
    suite.check_options(&given(args.tier.is_some(), false, false, false))?;
    serve(ReferenceOptions {
        listen: args.listen,
        workspace: args.workspace,
        tier: args.tier.unwrap_or(Tier::Plugin),
    })
    .await?;
    Ok(0)
}
