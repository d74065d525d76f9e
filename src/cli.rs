//! The `conform` command line (DESIGN.md: extend it, never break it).

use crate::baseline::Baseline;
use crate::case::Case;
use crate::case::{self, filter_matches};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::progress::Progress;
use crate::protocols::{Protocol, acp, agent_socket, cwx};
use crate::report::{self, Format};
use crate::requirements::Catalogue;
use crate::target::Target;
use clap::{Args, Parser, Subcommand};
use std::io::Write;
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
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// The role under test (agent-socket: server).
    #[arg(long)]
    pub role: Option<String>,
    /// builtin, exec:<command line> (with {socket} for agent-socket), or
    /// unix:<path>. Given several times, every target runs the same cases
    /// and the report is a matrix: rows the cases, columns the targets.
    #[arg(long, default_value = "builtin")]
    pub target: Vec<String>,
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
    /// cwx: the trust tier the host was launched with (builtin or plugin).
    #[arg(long, default_value = "plugin")]
    pub tier: String,
    /// cwx: an extension entry the host can load, as PATH#SHA256, for the
    /// cases that need a loaded extension (builtin: its toy extension).
    #[arg(long)]
    pub extension: Option<String>,
    /// Run only shard K of N (1-based): the selected cases dealt out in turn,
    /// so N runs with K = 1..N run every case exactly once.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
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
}

#[derive(Debug, Args)]
pub struct FuzzArgs {
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    #[arg(long)]
    pub role: Option<String>,
    /// builtin, exec:<command line> (with {socket} for agent-socket), or unix:<path>.
    #[arg(long, default_value = "builtin")]
    pub target: String,
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
    /// How many inputs run at once.
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
    /// cwx: the trust tier the host was launched with (builtin or plugin).
    #[arg(long, default_value = "plugin")]
    pub tier: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    #[arg(long)]
    pub role: Option<String>,
    #[arg(long)]
    pub filter: Option<String>,
    /// Only shard K of N, as `run --shard` deals them.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
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
    /// cwx: the trust tier the reference host serves.
    #[arg(long, default_value = "plugin")]
    pub tier: String,
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
            eprintln!("conform: cannot start the runtime: {e}");
            return 2;
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            r = dispatch(cli) => r,
            _ = tokio::signal::ctrl_c() => Err(RunError::Usage("interrupted".into())),
        }
    });
    // Whatever a case left running is stopped with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
    crate::transport::process::sweep();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("conform: {e}");
            e.exit_code()
        }
    }
}

fn check_role(protocol: Protocol, role: Option<&str>) -> Result<&'static str, RunError> {
    let roles = protocol.roles();
    let role = match role {
        None => roles[0],
        Some(r) => roles.iter().copied().find(|x| *x == r).ok_or_else(|| {
            RunError::Usage(format!(
                "{} has no role {r:?}; its roles are {}",
                protocol.id(),
                roles.join(", ")
            ))
        })?,
    };
    Ok(role)
}

async fn dispatch(cli: Cli) -> Result<i32, RunError> {
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Fuzz(args) => fuzz(args).await,
        Command::List(args) => list(args),
        Command::Reference(args) => reference(args).await,
        Command::Peer(args) => peer(args).await,
    }
}

async fn run(args: RunArgs) -> Result<i32, RunError> {
    let role = check_role(args.protocol, args.role.as_deref())?;
    let targets = args
        .target
        .iter()
        .map(|t| {
            t.parse::<Target>()
                .map_err(|e| RunError::Usage(format!("--target {t}: {e}")))
        })
        .collect::<Result<Vec<Target>, RunError>>()?;
    if targets.len() > 1 && args.certify.is_some() {
        return Err(RunError::Usage(
            "--certify certifies one target: give --target once".into(),
        ));
    }
    if !(args.startup_timeout > 0.0 && args.startup_timeout <= 3600.0) {
        return Err(RunError::Usage(
            "--startup-timeout is between 0 and 3600 seconds".into(),
        ));
    }
    let extra = case::read_case_paths(&args.cases)?;
    let human_on_stdout = args.format == Format::Human && args.output.is_none();
    let mut progress = Progress::new(human_on_stdout);
    let many = targets.len() > 1;
    let mut reports = Vec::new();
    for (i, target) in targets.into_iter().enumerate() {
        let label = if many {
            format!("[{}] ", i + 1)
        } else {
            String::new()
        };
        let Some(mut report) =
            run_target(&args, role, target, &extra, &mut progress, &label).await?
        else {
            return Ok(0);
        };
        crate::redact::Redactor::from_env().report(&mut report);
        if let Some(dir) = &args.transcripts {
            let dir = if many {
                dir.join((i + 1).to_string())
            } else {
                dir.clone()
            };
            report::write_transcripts(&report, &dir)?;
        }
        reports.push(report);
    }
    progress.finish();
    if let (Some(dir), [report]) = (&args.certify, reports.as_slice()) {
        let digest = crate::certify::corpus_digest(args.protocol.id(), &extra);
        let complete = args.filter.is_none() && args.shard.is_none();
        let bundle = crate::certify::bundle(
            report,
            &args.protocol.catalogue(),
            args.protocol.watched(role),
            &digest,
            complete,
        );
        crate::certify::write(dir, &bundle)?;
    }
    let with_list = !progress.listed_on_stdout();
    let text = match (reports.as_slice(), args.format) {
        ([one], Format::Human) => report::human(one, with_list),
        ([one], format) => report::render(one, format),
        (all, format) => report::matrix::render(all, format, with_list),
    };
    let text = match args.format {
        // JSON and JUnit escape what they carry; text formats would pass a
        // target's NUL bytes and terminal escapes straight to a terminal.
        Format::Human | Format::Markdown | Format::Html => report::printable(&text),
        _ => text,
    };
    match &args.output {
        Some(path) => std::fs::write(path, &text)
            .map_err(|e| RunError::Conform(format!("cannot write {}: {e}", path.display())))?,
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
    Ok(report::matrix::exit_code(&reports))
}

/// One target's run of the selected cases, with the baseline applied;
/// `None` when `--dry-run` printed the selection instead.
async fn run_target(
    args: &RunArgs,
    role: &str,
    target: Target,
    extra: &[(String, String)],
    progress: &mut Progress,
    label: &str,
) -> Result<Option<RunReport>, RunError> {
    let jobs = args
        .jobs
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2)
                * 2
        })
        .max(1);
    let startup_timeout = Duration::from_secs_f64(args.startup_timeout);
    let target_name = target.to_string();
    let (mut report, baseline) = match args.protocol {
        Protocol::Cwx if role == "core" => {
            let Some((cases, b)) = prepare(cwx::load_core_cases(extra)?, args, &target_name)?
            else {
                return Ok(None);
            };
            let options = cwx::core_role::CoreRunOptions {
                target,
                jobs,
                strict: args.strict,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (cwx::core_role::run(&options, cases, &mut on_case).await?, b)
        }
        Protocol::Cwx => {
            let Some((cases, b)) = prepare(cwx::load_cases(extra)?, args, &target_name)? else {
                return Ok(None);
            };
            let tier = parse_tier(&args.tier)?;
            let extension = match &args.extension {
                None => None,
                Some(x) => {
                    let (path, sha256) = x
                        .split_once('#')
                        .ok_or_else(|| RunError::Usage("--extension is PATH#SHA256".into()))?;
                    Some(cwx::driver::Extension {
                        path: path.into(),
                        sha256: sha256.into(),
                    })
                }
            };
            let options = cwx::RunOptions {
                target,
                tier,
                extension,
                jobs,
                strict: args.strict,
                startup_timeout,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (cwx::run(&options, cases, &mut on_case).await?, b)
        }
        Protocol::Acp if role == "client" => {
            let Some((cases, b)) = prepare(acp::load_client_cases(extra)?, args, &target_name)?
            else {
                return Ok(None);
            };
            let options = acp::client_role::ClientRunOptions {
                target,
                jobs,
                strict: args.strict,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (
                acp::client_role::run(&options, cases, &mut on_case).await?,
                b,
            )
        }
        Protocol::Acp => {
            let Some((cases, b)) = prepare(acp::load_cases(extra)?, args, &target_name)? else {
                return Ok(None);
            };
            let options = acp::RunOptions {
                target,
                jobs,
                strict: args.strict,
                startup_timeout,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (acp::run(&options, cases, &mut on_case).await?, b)
        }
        Protocol::AgentSocket if role == "client" => {
            let Some((cases, b)) =
                prepare(agent_socket::load_client_cases(extra)?, args, &target_name)?
            else {
                return Ok(None);
            };
            let options = agent_socket::scripted_server::ClientRunOptions {
                target,
                jobs,
                strict: args.strict,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (
                agent_socket::scripted_server::run(&options, cases, &mut on_case).await?,
                b,
            )
        }
        Protocol::AgentSocket => {
            let Some((cases, b)) = prepare(agent_socket::load_cases(extra)?, args, &target_name)?
            else {
                return Ok(None);
            };
            let options = agent_socket::RunOptions {
                target,
                jobs,
                strict: args.strict,
                startup_timeout,
            };
            progress.start(label, cases.len());
            let mut on_case = |r: &CaseResult, done, total| progress.case(r, done, total);
            (agent_socket::run(&options, cases, &mut on_case).await?, b)
        }
    };
    if let Some(b) = &baseline {
        b.apply(&mut report);
    }
    Ok(Some(report))
}

async fn fuzz(args: FuzzArgs) -> Result<i32, RunError> {
    let role = check_role(args.protocol, args.role.as_deref())?;
    if role != args.protocol.roles()[0] {
        return Err(RunError::Usage(format!(
            "conform fuzz tests the {} role of {}; --role {role} is for conform run",
            args.protocol.roles()[0],
            args.protocol.id()
        )));
    }
    let target: Target = args
        .target
        .parse()
        .map_err(|e| RunError::Usage(format!("--target: {e}")))?;
    if !(args.timeout > 0.0 && args.timeout <= 600.0) {
        return Err(RunError::Usage(
            "--timeout is between 0 and 600 seconds".into(),
        ));
    }
    if let Some(d) = args.duration
        && !(d > 0.0 && d <= 7.0 * 86400.0)
    {
        return Err(RunError::Usage("--duration is between 0 and a week".into()));
    }
    if args.cases == Some(0) {
        return Err(RunError::Usage(
            "--cases 0 runs nothing: a run of zero inputs proves nothing".into(),
        ));
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
            .unwrap_or(1)
    });
    let options = crate::fuzz::Options {
        protocol: args.protocol.id().to_owned(),
        role: role.to_owned(),
        target: target.to_string(),
        seed,
        cases: match (args.cases, args.duration) {
            (None, None) => Some(10_000),
            (c, _) => c,
        },
        duration: args.duration.map(Duration::from_secs_f64),
        out: args.out.clone(),
        jobs: args
            .jobs
            .unwrap_or(if args.protocol == Protocol::AgentSocket {
                32
            } else {
                4
            })
            .max(1),
        shrink_limit: args.shrink_limit,
        shrink_time: Duration::from_secs_f64(args.shrink_time.clamp(0.0, 86400.0)),
    };
    eprintln!("conform fuzz: seed {seed}");
    let mut progress = |line: &str| eprintln!("conform fuzz: {line}");
    let startup = Duration::from_secs_f64(args.startup_timeout.clamp(0.1, 3600.0));
    let (report, notes) = match args.protocol {
        Protocol::AgentSocket => {
            let h = std::sync::Arc::new(
                agent_socket::fuzz::Harness::new(target, startup, args.timeout).await?,
            );
            let report = crate::fuzz::fuzz(h.clone(), &options, &mut progress).await;
            let notes = h.finish().await;
            (report?, notes)
        }
        Protocol::Acp => {
            let h =
                std::sync::Arc::new(acp::fuzz::Harness::new(target, startup, args.timeout).await?);
            (crate::fuzz::fuzz(h, &options, &mut progress).await?, vec![])
        }
        Protocol::Cwx => {
            let tier = parse_tier(&args.tier)?;
            let h = std::sync::Arc::new(
                cwx::fuzz::Harness::new(target, tier, startup, args.timeout).await?,
            );
            (crate::fuzz::fuzz(h, &options, &mut progress).await?, vec![])
        }
    };
    let mut text = crate::fuzz::human(&report, &options);
    for n in notes.iter().filter(|n| !n.contains("after SIGTERM")) {
        text.push_str(&format!("note: {n}\n"));
    }
    print!("{text}");
    Ok(report.exit_code())
}

type Prepared<S> = Option<(Vec<Case<S>>, Option<Baseline>)>;

/// What a run selected and the baseline to apply to it; `None` when
/// `--dry-run` printed the selection instead. A bad baseline is a usage
/// error before the target starts.
fn prepare<S>(all: Vec<Case<S>>, args: &RunArgs, target: &str) -> Result<Prepared<S>, RunError> {
    let ids: Vec<String> = all.iter().map(|c| c.id.clone()).collect();
    let baseline = match &args.expected_failures {
        Some(path) => {
            // Targets by the name reports give them.
            let names: Vec<String> = args
                .target
                .iter()
                .filter_map(|t| t.parse::<Target>().ok())
                .map(|t| t.to_string())
                .collect();
            Some(Baseline::load(path, &ids, &names)?.for_target(target))
        }
        None => None,
    };
    let cases = selected(all, args.filter.as_deref(), args.shard.as_deref())?;
    if args.dry_run {
        print_cases(&cases, &args.protocol.catalogue(), false)?;
        return Ok(None);
    }
    Ok(Some((cases, baseline)))
}

/// Parses `K/N`: shard K (from 1) of N.
fn parse_shard(s: &str) -> Result<(usize, usize), RunError> {
    let bad = || RunError::Usage(format!("--shard is K/N with 1 <= K <= N, not {s:?}"));
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// The cases `--filter` and `--shard` select; none is a usage error.
fn selected<S>(
    mut cases: Vec<Case<S>>,
    filter: Option<&str>,
    shard: Option<&str>,
) -> Result<Vec<Case<S>>, RunError> {
    if let Some(f) = filter {
        cases.retain(|c| filter_matches(f, &c.id));
    }
    if let Some(s) = shard {
        let (k, n) = parse_shard(s)?;
        // Dealt in turn over the corpus's order, which every shard of a CI
        // matrix loads the same way: each case lands in exactly one shard.
        cases = cases
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % n == k - 1)
            .map(|(_, c)| c)
            .collect();
    }
    if cases.is_empty() {
        return Err(RunError::Usage(
            "no case selected: a run of zero cases proves nothing".into(),
        ));
    }
    Ok(cases)
}

fn parse_tier(s: &str) -> Result<cwx::table::Tier, RunError> {
    cwx::table::Tier::parse(s)
        .ok_or_else(|| RunError::Usage(format!("--tier is builtin or plugin, not {s:?}")))
}

fn list(args: ListArgs) -> Result<i32, RunError> {
    let role = check_role(args.protocol, args.role.as_deref())?;
    match args.protocol {
        Protocol::Cwx if role == "core" => print_cases(
            &selected(
                cwx::load_core_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &cwx::catalogue(),
            args.json,
        ),
        Protocol::AgentSocket if role == "client" => print_cases(
            &selected(
                agent_socket::load_client_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &agent_socket::catalogue(),
            args.json,
        ),
        Protocol::Cwx => print_cases(
            &selected(
                cwx::load_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &cwx::catalogue(),
            args.json,
        ),
        Protocol::Acp if role == "client" => print_cases(
            &selected(
                acp::load_client_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &acp::catalogue(),
            args.json,
        ),
        Protocol::Acp => print_cases(
            &selected(
                acp::load_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &acp::catalogue(),
            args.json,
        ),
        _ => print_cases(
            &selected(
                agent_socket::load_cases(&[])?,
                args.filter.as_deref(),
                args.shard.as_deref(),
            )?,
            &agent_socket::catalogue(),
            args.json,
        ),
    }
}

fn print_cases<S>(cases: &[Case<S>], catalogue: &Catalogue, json: bool) -> Result<i32, RunError> {
    if json {
        let items: Vec<serde_json::Value> = cases
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id, "title": c.title, "level": c.level, "needs": c.needs,
                    "requirements": c.requirements.iter().map(|r| catalogue.get(r)).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&items).unwrap_or_default()
        );
        return Ok(0);
    }
    for c in cases {
        let needs = if c.needs.is_empty() {
            String::new()
        } else {
            format!("  (needs {})", c.needs.join(", "))
        };
        println!("{:<6} {}  {}{needs}", c.level.as_str(), c.id, c.title);
        for r in &c.requirements {
            if let Some(req) = catalogue.get(r) {
                println!(
                    "         {} [{} {}] {}: \"{}\"",
                    req.id,
                    req.level.as_str(),
                    req.role,
                    req.source,
                    req.quote
                );
            }
        }
    }
    println!("\n{} cases", cases.len());
    Ok(0)
}

async fn peer(args: PeerArgs) -> Result<i32, RunError> {
    match args.protocol {
        Protocol::Acp => acp::client_role::serve_peer(&args.script, &args.record)
            .await
            .map(|()| 0)
            .map_err(|e| RunError::Conform(format!("the scripted agent failed: {e}"))),
        Protocol::Cwx => cwx::core_role::serve_peer(&args.script, &args.record)
            .await
            .map(|()| 0)
            .map_err(|e| RunError::Conform(format!("the scripted host failed: {e}"))),
        other => Err(RunError::Usage(format!(
            "conform has no scripted peer for {}",
            other.id()
        ))),
    }
}

async fn reference(args: ReferenceArgs) -> Result<i32, RunError> {
    match args.protocol {
        Protocol::Acp => {
            acp::reference::serve()
                .await
                .map_err(|e| RunError::Conform(format!("the reference agent failed: {e}")))?;
            return Ok(0);
        }
        Protocol::Cwx => {
            let tier = parse_tier(&args.tier)?;
            cwx::reference::serve(tier)
                .await
                .map_err(|e| RunError::Conform(format!("the reference host failed: {e}")))?;
            return Ok(0);
        }
        Protocol::AgentSocket => {}
    }
    let Some(listen) = args.listen else {
        return Err(RunError::Usage(
            "agent-socket's reference needs --listen PATH".into(),
        ));
    };
    let (_tmp, workspace) = match args.workspace {
        Some(w) => (None, w),
        None => {
            let t = tempfile::Builder::new()
                .prefix("conform-as-workspace-")
                .tempdir()
                .map_err(|e| RunError::Conform(e.to_string()))?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    let (task, running) = agent_socket::start_reference(&listen, &workspace)
        .await
        .map_err(|e| RunError::Usage(format!("cannot listen on {}: {e}", listen.display())))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| RunError::Conform(e.to_string()))?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    task.abort();
    running.kill_all();
    let _ = std::fs::remove_file(&listen);
    Ok(0)
}
