//! What a bound means (issue 26, items 3 and 11). A bound is conform's
//! choice, not the source's: an agent that outlives one while it still
//! answers the liveness probe is conform's limit (skipped), one that answers
//! neither is stuck (failed: "the Server MUST reply with a Response"), and a
//! turn after a cancel is bounded from the cancel. Proven on one-deviation
//! fixture agents (`tests/fixtures/acp_agent.py`, its liveness block) run
//! with conform's bounds scaled down (`CONFORM_BOUND_SCALE`), and on the
//! independent references, whose verdicts must be the same on a quiet
//! machine and on one whose cores a load generator keeps busy.

mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

fn fixture(args: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/acp_agent.py");
    format!("exec:python3 {path} {args}")
}

fn independent() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/independent/acp/agent.py"
    );
    format!("exec:python3 {path}")
}

/// `conform run --protocol acp` on `target` with `extra` and `env`, as JSON.
fn run(target: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    support::run_protocol_json_env("acp", target, extra, env)
}

/// The requirements the findings of the case `id` name.
fn broken(report: &Value, id: &str) -> Vec<String> {
    report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["id"] == id)
        .flat_map(|c| c["findings"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["requirement"].as_str().map(str::to_owned))
        .collect()
}

/// Bounds a fifth of their size: a cancel's 2 s, a turn's 12 s.
const SCALE: (&str, &str) = ("CONFORM_BOUND_SCALE", "0.2");

#[test]
fn an_agent_that_leaves_an_answer_owed_is_failed_with_the_rule_it_breaks() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture agent needs it");
        return;
    }
    // (deviation, the cases run, the case that must fail, the requirement).
    let deviations = [
        (
            "stuck-after-cancel",
            "acp/cancel/during-turn",
            "acp.cancel.stop-reason-cancelled",
        ),
        (
            "drop-cancelled-request",
            "acp/cancel/cancel-request-answered",
            "acp.cancel.request-must-respond-agent",
        ),
        (
            "reader-stops-on-own-request",
            "acp/fs/read-advertised",
            "acp.jsonrpc.reply-to-request",
        ),
        // A prompt that waits for the agent's request (not for the turn's
        // end) probes too when its bound passes: stuck, not "did not
        // follow the prompt".
        (
            "reader-stops-on-prompt",
            "acp/cancel/during-fs-read",
            "acp.jsonrpc.reply-to-request",
        ),
    ];
    let mut problems = Vec::new();
    std::thread::scope(|scope| {
        let runs: Vec<_> = deviations
            .iter()
            .map(|(name, case, rule)| {
                scope.spawn(move || {
                    let target = fixture(&format!("--deviation {name}"));
                    let (code, report, stderr) = run(
                        &target,
                        &["--filter", case, "--startup-timeout", "30"],
                        &[SCALE],
                    );
                    let rules = broken(&report, case);
                    if code != 1 || !rules.iter().any(|r| r == rule) {
                        Some(format!(
                            "{name}: exit {code}, {case} broke {rules:?}, expected {rule}\n{}\n{stderr}",
                            support::outcome_text(&report)
                        ))
                    } else {
                        None
                    }
                })
            })
            .collect();
        for r in runs {
            problems.extend(r.join().expect("the run's thread"));
        }
    });
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn a_slow_agent_that_answers_the_probe_is_skipped_never_failed() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture agent needs it");
        return;
    }
    // Each turn thinks for 60 s; conform's scaled turn bound and grace end
    // well before, and the agent answers the probe all along.
    let (code, report, stderr) = run(
        &fixture("--variant slow-turn"),
        &["--filter", "acp/prompt/text", "--startup-timeout", "30"],
        &[SCALE, ("ACP_FIXTURE_SLOW_TURN", "60")],
    );
    assert_ne!(code, 1, "{stderr}\n{}", support::outcome_text(&report));
    assert!(support::outcome_ids(&report, "fail").is_empty());
    let case = &report["cases"][0];
    assert_eq!(case["outcome"], "skip", "{case}");
    let message = case["message"].as_str().unwrap_or_default();
    assert!(message.contains("so it still serves requests"), "{message}");
}

/// Busy-loop processes, one per `count`, each ending by itself after 10
/// minutes and killed when this is dropped.
struct Load(Vec<Child>);

impl Load {
    fn start(count: usize) -> Load {
        let spin = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n";
        Load(
            (0..count)
                .filter_map(|_| {
                    Command::new("python3")
                        .args(["-c", spin])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .ok()
                })
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every case's outcome, and the exit status.
fn verdicts(target: &str) -> (i32, BTreeMap<String, String>, String) {
    let (code, report, stderr) = run(target, &["--startup-timeout", "30"], &[]);
    let outcomes = report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_owned(),
                c["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    (
        code,
        outcomes,
        format!("{stderr}\n{}", support::outcome_text(&report)),
    )
}

#[test]
fn the_references_get_the_same_verdicts_quiet_and_under_load() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the independent agent and the load need it");
        return;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for target in [independent(), "builtin".to_owned()] {
        let quiet = verdicts(&target);
        let loaded = {
            let _load = Load::start(cores.clamp(2, 4));
            verdicts(&target)
        };
        assert!(!quiet.1.is_empty(), "{target}: no cases ran\n{}", quiet.2);
        assert_eq!(
            (quiet.0, &quiet.1),
            (loaded.0, &loaded.1),
            "{target}: the verdicts changed under load\nquiet:\n{}\nloaded:\n{}",
            quiet.2,
            loaded.2
        );
        assert_eq!(quiet.0, 0, "{target}\n{}", quiet.2);
    }
}
