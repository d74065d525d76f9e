//! conform against the second round of independent doubles
//! (`tests/independent/round2/`): an ACP agent, a cwx host and an
//! agent-socket server written from the sources alone by a helper who never
//! read conform's code or corpus (its README says what it read). Issue 26's
//! proof: the legal variations (an agent that refrains without a capability,
//! one that asks no permission, one whose model is slow, ids of every kind,
//! a host that registers in any order) get no failure and exit 0; the
//! one-deviation variants (a turn never ended after a cancel, a reader that
//! deadlocks while its own request is pending, a request never answered
//! after `$/cancel_request`, id 0 taken for a notification, a null id not
//! echoed) exit 1 naming the requirement they break; silent targets end
//! without a case per bound.

mod support;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/independent/round2")
}

fn agent(args: &str) -> String {
    format!("exec:python3 {}/acp_agent.py {args}", dir().display())
}

/// `toy_extension.json` of the first round and the digest its README gives.
fn extension() -> String {
    format!(
        "{}/tests/independent/cwx/toy_extension.json#fde80d3df9c5bffad0a7313cd2ff2fdd3a826c510f4d430665e505304d8a7d38",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The requirements the findings of failed cases name (a finding counts
/// against the requirement it names, not every one its case lists).
fn failed_requirements(report: &Value) -> BTreeSet<String> {
    report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["outcome"] == "fail")
        .flat_map(|c| c["findings"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["requirement"].as_str().map(str::to_owned))
        .collect()
}

fn run(protocol: &str, target: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    support::run_protocol_json_env(protocol, target, extra, env)
}

fn skip_without_python() -> bool {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH");
        return true;
    }
    false
}

/// Legal variations of the agent, each on the cases that bear on what it
/// varies: every one exits 0 (items 1, 2, 5 of issue 26).
#[test]
fn the_agents_legal_variations_pass() {
    if skip_without_python() {
        return;
    }
    let legal: &[(&str, &str)] = &[
        (
            "--variant refrain",
            "acp/fs/,acp/terminal/,acp/init/omitted-capabilities",
        ),
        ("--variant no_permission", "acp/permission/,acp/tool/"),
        ("--variant null_ids", "acp/jsonrpc/,acp/init/"),
        (
            "",
            "acp/fs/,acp/terminal/,acp/permission/,acp/cancel/,acp/jsonrpc/",
        ),
    ];
    let mut problems = Vec::new();
    for (args, filter) in legal {
        let (code, report, stderr) =
            run("acp", &agent(args), &["--filter", filter, "-j", "2"], &[]);
        if code != 0 {
            problems.push(format!(
                "`{args}` exit {code}, failed {:?}, summary {}, unexercised {}: {stderr}",
                failed_requirements(&report),
                report["summary"],
                report["unexercised"]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A slow model: a turn that outlives conform's bound but ends within the
/// grace is an answer (noted as slow), and the run passes; one that outlives
/// the grace too, while the agent answers the probe, is conform's limit: a
/// skip, never a failure (item 11 and item 3).
#[test]
fn a_slow_model_is_never_failed() {
    if skip_without_python() {
        return;
    }
    // A tenth of conform's bounds: the turn bound is 6 s, its grace 3 s.
    let scale = [("CONFORM_BOUND_SCALE", "0.1")];
    let filter = ["--filter", "acp/prompt/", "-j", "2"];
    let (code, report, stderr) = run(
        "acp",
        &agent("--variant slow_model --turn-seconds 7"),
        &filter,
        &scale,
    );
    assert_eq!(
        code, 0,
        "a turn inside the grace is an answer: {stderr} {report:#}"
    );
    let (code, report, stderr) = run(
        "acp",
        &agent("--variant slow_model --turn-seconds 30"),
        &filter,
        &scale,
    );
    assert!(
        failed_requirements(&report).is_empty() && code != 1,
        "a turn past the grace on a live agent is skipped, never failed (exit {code}): {stderr} {report:#}"
    );
}

/// Each one-deviation variant exits 1 and names the requirement it breaks.
#[test]
fn the_agents_deviations_fail_their_requirement() {
    if skip_without_python() {
        return;
    }
    let deviations: &[(&str, &str, &str)] = &[
        (
            "no_answer_after_cancel",
            "acp/cancel/",
            "acp.cancel.stop-reason-cancelled",
        ),
        (
            "reader_deadlock",
            "acp/fs/,acp/permission/",
            "acp.jsonrpc.reply-to-request",
        ),
        (
            "no_answer_after_cancel_request",
            "acp/cancel/",
            "acp.cancel.request-must-respond-agent",
        ),
        (
            "zero_id_is_notification",
            "acp/jsonrpc/,acp/init/",
            "acp.jsonrpc.reply-to-request",
        ),
        // Its answer has no `id` member: JSON-RPC's response "id: This
        // member is REQUIRED", the envelope requirement.
        ("null_id_mishandled", "acp/jsonrpc/", "acp.jsonrpc.envelope"),
    ];
    let scale = [("CONFORM_BOUND_SCALE", "0.2")];
    let mut problems = Vec::new();
    for (name, filter, requirement) in deviations {
        let args = format!("--deviation {name}");
        let (code, report, stderr) = run(
            "acp",
            &agent(&args),
            &["--filter", filter, "-j", "2"],
            &scale,
        );
        let failed = failed_requirements(&report);
        if code != 1 || !failed.contains(*requirement) {
            problems.push(format!(
                "{name}: exit {code}, failed {failed:?}, expected {requirement}: {stderr}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A host may register its tool, command and hook in any order, and more
/// than one of each: every case passes (item 8).
#[test]
fn a_host_that_registers_in_any_order_passes() {
    if skip_without_python() {
        return;
    }
    let mut problems = Vec::new();
    for variant in [
        "order_hook_command_tool",
        "order_tool_hook_command",
        "order_command_tool_hook",
        "two_of_each",
    ] {
        let target = format!(
            "exec:python3 {}/cwx_host.py --tier plugin --variant {variant}",
            dir().display()
        );
        let (code, report, stderr) = run("cwx", &target, &["--extension", &extension()], &[]);
        if code != 0 {
            problems.push(format!(
                "{variant}: exit {code}, failed {:?}, unexercised {}: {stderr}",
                failed_requirements(&report),
                report["unexercised"]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Targets that start and say nothing: the set-up case fails once (or the
/// target is "could not be started", exit 2, for one that writes nothing at
/// all), and no case waits out a bound of its own (item 6): the report
/// holds at most one failure.
#[test]
fn silent_targets_are_named_once() {
    if skip_without_python() {
        return;
    }
    let d = dir().display().to_string();
    let targets = [
        (
            "acp",
            format!("exec:python3 {d}/acp_agent.py --deviation silent"),
            vec![],
        ),
        (
            "cwx",
            format!("exec:python3 {d}/cwx_host.py --tier plugin --deviation silent"),
            vec!["--extension".to_owned(), extension()],
        ),
        (
            // The server ends when its stdin closes; a pipe that stays open
            // keeps it serving (conform gives servers no stdin).
            "agent-socket",
            format!("exec:sleep 600 | python3 {d}/as_server.py {{socket}} --deviation silent"),
            vec![],
        ),
    ];
    let mut problems = Vec::new();
    for (protocol, target, extra) in &targets {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (code, report, stderr) = run(protocol, target, &extra, &[]);
        let failed = report["summary"]["failed"].as_u64().unwrap_or(0);
        if !(code == 2 || (code == 1 && failed == 1)) {
            problems.push(format!(
                "{protocol}: exit {code}, {failed} failed: {stderr} {}",
                report["summary"]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
