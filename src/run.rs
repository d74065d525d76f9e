//! One `conform run`: each target's cases selected, run, and reported in
//! every output asked for (the report, the transcripts, the certification
//! bundle). A signal (Ctrl-C, SIGTERM) stops the run, not its report: the
//! targets are ended as the run is dropped, the cases that finished are
//! reported, the others marked not run, and conform exits 128 + the signal.

use crate::baseline::Baseline;
use crate::case;
use crate::cli::{RunArgs, bounded, chosen, listen};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport, StopSignal};
use crate::progress::Progress;
use crate::report::{self, Format};
use crate::suite::{RunOptions, Suite};
use crate::target::Target;
use std::time::Duration;

/// Runs `args`' selection against each of its targets in turn and writes
/// every output; the exit status is the worst target's (130 or 143 when a
/// signal stopped the run).
pub async fn run(args: RunArgs) -> Result<i32, RunError> {
    // From the start: a signal that comes while the cases load is kept.
    let mut signals = listen()?;
    let suite = args.suite.suite()?;
    suite.check_options(&crate::cli::given(
        args.tier.is_some(),
        args.extension.is_some(),
        args.prompts.is_some(),
        args.isolate,
    ))?;
    if args.target.len() > 1 && args.certify.is_some() {
        return Err(RunError::Usage(
            "--certify certifies one target: give --target once".into(),
        ));
    }
    let startup = bounded("--startup-timeout", args.startup_timeout, 3600.0)?;
    let extra = case::read_case_paths(&args.cases)?;
    let human_on_stdout = args.format == Format::Human && args.output.is_none();
    let mut progress = Progress::new(human_on_stdout);
    let many = args.target.len() > 1;
    let mut reports = Vec::new();
    let mut stopped_by = None;
    for (i, target) in args.target.iter().enumerate() {
        let label = if many {
            format!("[{}] ", i + 1)
        } else {
            String::new()
        };
        let options = RunOptions {
            target: target.clone(),
            jobs: args.jobs.unwrap_or_else(RunOptions::default_jobs).max(1),
            strict: args.strict,
            startup_timeout: Duration::from_secs_f64(startup),
            tier: args
                .tier
                .unwrap_or(crate::protocols::cwx::table::Tier::Plugin),
            extension: args.extension.clone(),
            prompts: args.prompts.clone(),
            isolate: args.isolate,
        };
        let Some(selected) = select(&args, suite, &options, &extra)? else {
            return Ok(0);
        };
        let mut report = match stopped_by {
            // A signal stopped an earlier target: this one never starts.
            Some(signal) => stopped(suite, &options, &selected.chosen, vec![], signal),
            None => {
                progress.start(&label, selected.chosen.len());
                let mut finished = Vec::new();
                let ran = {
                    let mut on_case = |r: &CaseResult, done, total| {
                        progress.case(r, done, total);
                        finished.push(r.clone());
                    };
                    // On a signal the run is dropped: its targets are ended
                    // and its temporary directories removed as it goes.
                    tokio::select! {
                        r = selected.cases.run(&options, &mut on_case) => Ok(r?),
                        s = signals.recv() => Err(s),
                    }
                };
                match ran {
                    Ok(report) => report,
                    Err(signal) => {
                        stopped_by = Some(signal);
                        stopped(suite, &options, &selected.chosen, finished, signal)
                    }
                }
            }
        };
        if let Some(b) = &selected.baseline {
            b.apply(&mut report, suite.watched);
        }
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
    if let Some(signal) = stopped_by {
        crate::console::err_line(&format!(
            "conform: interrupted by {}: writing the report of the cases that finished",
            signal.name()
        ));
    }
    if let (Some(dir), [report]) = (&args.certify, reports.as_slice()) {
        let digest = crate::certify::corpus_digest(suite.protocol.id(), &extra);
        let complete = args.filter.is_none() && args.shard.is_none();
        let bundle =
            crate::certify::bundle(report, suite.catalogue(), suite.watched, &digest, complete);
        crate::certify::write(dir, &bundle)?;
    }
    let with_list = !progress.listed_on_stdout();
    report::emit(&reports, args.format, with_list, args.output.as_deref())?;
    for extra in &args.reports {
        report::emit(&reports, extra.format, true, Some(&extra.path))?;
    }
    Ok(report::matrix::exit_code(&reports))
}

/// The report of a target's run that `signal` stopped.
fn stopped(
    suite: &Suite,
    options: &RunOptions,
    chosen: &[case::Listing],
    finished: Vec<CaseResult>,
    signal: StopSignal,
) -> RunReport {
    let target = options.target.to_string();
    RunReport::stopped(suite, target, options.strict, chosen, finished, signal)
}

/// One target's selected cases, what they are, and the baseline that
/// applies to it.
struct Selected {
    cases: Box<dyn crate::suite::Cases>,
    chosen: Vec<case::Listing>,
    baseline: Option<Baseline>,
}

/// Loads and selects the cases for one target; `None` when `--dry-run`
/// printed the selection instead. A bad baseline is a usage error before
/// the target starts.
fn select(
    args: &RunArgs,
    suite: &Suite,
    options: &RunOptions,
    extra: &[(String, String)],
) -> Result<Option<Selected>, RunError> {
    let mut cases = (suite.load)(extra)?;
    let listing = cases.listing();
    let ids: Vec<&str> = listing.iter().map(|c| c.id.as_str()).collect();
    let baseline = match &args.expected_failures {
        Some(path) => {
            let known: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            let musts = suite.musts();
            let names: Vec<String> = args.target.iter().map(Target::to_string).collect();
            let b = Baseline::load(path, &known, &musts, &names)?;
            Some(b.for_target(&options.target.to_string()))
        }
        None => None,
    };
    let keep = case::select(&ids, args.filter.as_deref(), args.shard)?;
    let chosen = chosen(listing, &keep);
    if args.dry_run {
        crate::console::out(&report::list::text(&chosen, suite.catalogue()));
        return Ok(None);
    }
    cases.keep(&keep);
    Ok(Some(Selected {
        cases,
        chosen,
        baseline,
    }))
}
