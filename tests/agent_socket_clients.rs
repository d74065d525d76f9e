//! `--role client` for agent-socket: conform's scripted server against the
//! reference clients (the builtin one and a Python one) and against broken
//! clients, each with one deviation, which must fail exactly their cases.

mod support;

use std::collections::BTreeSet;
use support::Double;

fn client_fixture(deviation: &str) -> String {
    format!(
        "exec:python3 {}/tests/fixtures/as_client.py {{socket}} --deviation {deviation}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter()
        .map(|s| format!("agent-socket/client/{s}"))
        .collect()
}

/// Cases a client that gets past the handshake reaches with a second
/// request (every case but the handshake refusals and the abort).
const PAST_HANDSHAKE: &[&str] = &[
    "workload/valid",
    "handshake/unknown-fields",
    "handshake/tools-only",
    "handshake/no-tools",
    "handshake/tools-omitted",
];

/// Each deviation of `tests/fixtures/as_client.py`, the `--filter` its run
/// takes (deviations that break every request are run on a few cases), and
/// the cases it must fail.
const DEVIATIONS: &[(&str, Option<&str>, &[&str])] = &[
    (
        "ignores-version",
        None,
        &["handshake/version-3", "handshake/version-1"],
    ),
    (
        "no-pair-check",
        None,
        &[
            "handshake/workspace-without-python",
            "handshake/python-without-workspace",
        ],
    ),
    ("relative-ok", None, &["handshake/relative-workspace"]),
    (
        "no-declaration-check",
        None,
        &["handshake/reserved-namespace", "handshake/duplicate-tool"],
    ),
    (
        "ignores-abort",
        None,
        &[
            "handshake/abort",
            "sandbox/abort-on-execute",
            "sandbox/abort-on-read-file",
            "tools/abort-on-call",
        ],
    ),
    ("strict-fields", None, &["handshake/unknown-fields"]),
    (
        "timeout-aborts",
        None,
        &["sandbox/timeout", "sandbox/timeout-with-data"],
    ),
    ("no-grace", None, &["sandbox/no-reply"]),
    ("ignores-tool-timeout", None, &["tools/no-reply"]),
    (
        "pretty",
        Some("agent-socket/client/handshake/*,agent-socket/client/workload/*"),
        &[
            "workload/valid",
            "handshake/unknown-fields",
            "handshake/version-3",
            "handshake/version-1",
            "handshake/workspace-without-python",
            "handshake/python-without-workspace",
            "handshake/relative-workspace",
            "handshake/reserved-namespace",
            "handshake/duplicate-tool",
            "handshake/error-reply",
            "handshake/cut-reply",
            "handshake/not-json",
            "handshake/wrong-id",
            "handshake/abort",
            "handshake/tools-only",
            "handshake/no-tools",
            "handshake/tools-omitted",
        ],
    ),
    (
        "reuse-connection",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        // tools-only has no sandbox/execute to send on the kept connection.
        &[
            "workload/valid",
            "handshake/unknown-fields",
            "handshake/no-tools",
            "handshake/tools-omitted",
        ],
    ),
    ("sandbox-anyway", None, &["handshake/tools-only"]),
    (
        "initialize-twice",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        PAST_HANDSHAKE,
    ),
    (
        "wrong-version",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/version-3"),
        &["workload/valid", "handshake/version-3"],
    ),
    (
        "bare-names",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        &["workload/valid", "handshake/tools-only"],
    ),
    (
        "same-callback-id",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        &["workload/valid", "handshake/tools-only"],
    ),
    (
        "calls-undeclared",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        PAST_HANDSHAKE,
    ),
    // A root session "with no parent, name or agent".
    (
        "named-root",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        &[
            "workload/valid",
            "handshake/unknown-fields",
            "handshake/tools-only",
        ],
    ),
    (
        "execute-no-timeout",
        Some("agent-socket/client/workload/*,agent-socket/client/handshake/*"),
        &[
            "workload/valid",
            "handshake/unknown-fields",
            "handshake/no-tools",
            "handshake/tools-omitted",
        ],
    ),
];

/// Deviations from a SHOULD, with the `--filter` of their run and the
/// cases they must warn (and fail none).
const WARNINGS: &[(&str, Option<&str>, &[&str])] = &[
    // "A path in a Sandbox Environment, normalized as written."
    (
        "dotted-path",
        Some("agent-socket/client/workload/*"),
        &["workload/valid"],
    ),
];

#[test]
fn the_reference_clients_pass_and_every_broken_client_fails_exactly_its_cases() {
    let mut doubles = vec![Double {
        name: "builtin".into(),
        protocol: "agent-socket",
        target: "builtin".into(),
        extra: vec!["--role".into(), "client".into()],
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(0),
    }];
    if support::python_available() {
        doubles.push(Double {
            name: "python-reference".into(),
            protocol: "agent-socket",
            target: client_fixture("none"),
            extra: vec!["--role".into(), "client".into()],
            fail: BTreeSet::new(),
            warn: BTreeSet::new(),
            skipped: Some(0),
        });
        doubles.extend(DEVIATIONS.iter().map(|(name, filter, fail)| {
            let mut extra = vec!["--role".into(), "client".into()];
            if let Some(f) = filter {
                extra.extend(["--filter".into(), (*f).into()]);
            }
            Double {
                name: format!("deviation-{name}"),
                protocol: "agent-socket",
                target: client_fixture(name),
                extra,
                fail: ids(fail),
                warn: BTreeSet::new(),
                skipped: Some(0),
            }
        }));
        doubles.extend(WARNINGS.iter().map(|(name, filter, warn)| {
            let mut extra = vec!["--role".into(), "client".into()];
            if let Some(f) = filter {
                extra.extend(["--filter".into(), (*f).into()]);
            }
            Double {
                name: format!("deviation-{name}"),
                protocol: "agent-socket",
                target: client_fixture(name),
                extra,
                fail: BTreeSet::new(),
                warn: ids(warn),
                skipped: Some(0),
            }
        }));
    } else {
        eprintln!(
            "python3 is not on PATH: only the builtin client runs; the broken clients need it"
        );
    }
    let (problems, reports) = support::run_doubles(&doubles);
    for (name, report) in &reports {
        support::snapshot_client_report(&format!("agent_socket_client_{name}"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn a_client_run_needs_a_client_conform_can_start() {
    let out = support::conform()
        .args([
            "run",
            "--protocol",
            "agent-socket",
            "--role",
            "client",
            "--target",
            "unix:/nonexistent.sock",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--role client"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_client_cases_list_and_every_client_must_has_a_case_or_says_why_not() {
    let out = support::conform()
        .args(["list", "--protocol", "agent-socket", "--role", "client"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("agent-socket/client/sandbox/no-reply"),
        "{text}"
    );
    let cases = conform::case::load::<conform::protocols::agent_socket::ClientCases>(&[]).unwrap();
    let catalogue = conform::suite::Protocol::AgentSocket.catalogue();
    let cited: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.requirements.iter().map(String::as_str))
        .chain(
            conform::protocols::agent_socket::scripted::rules::EVERY_MESSAGE
                .iter()
                .copied(),
        )
        .collect();
    let missing: Vec<&str> = catalogue
        .requirements
        .iter()
        .filter(|r| r.role == conform::suite::Role::Client && r.level == conform::case::Level::Must)
        .filter(|r| !cited.contains(r.id.as_str()) && r.no_case.is_none())
        .map(|r| r.id.as_str())
        .collect();
    assert!(missing.is_empty(), "client MUSTs with no case: {missing:?}");
}

/// A client that never connects to conform's socket in any case could not
/// be started (DESIGN.md, exit 2, with its stderr), not a graded report
/// (issue 26, item 7: it was exit 1); one that connects and writes garbage
/// gets its report.
#[test]
fn a_client_that_never_connects_could_not_be_started_and_one_that_writes_garbage_is_graded() {
    let out = support::conform()
        .args(["run", "--protocol", "agent-socket", "--role", "client"])
        .args([
            "--target",
            "exec:/nonexistent/conform-client --socket {socket}",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("could not be started"), "{stderr}");
    assert!(stderr.contains("/nonexistent/conform-client"), "{stderr}");
    if !support::python_available() {
        eprintln!("the garbage half skipped: python3 is not on PATH");
        return;
    }
    let garbage = "exec:python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); \
                   s.connect(sys.argv[1]); s.sendall(b\"garbage\\n\")' {socket}";
    let out = support::conform()
        .args(["run", "--protocol", "agent-socket", "--role", "client"])
        .args(["--target", garbage, "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = support::report_from(&out.stdout);
    assert!(!support::outcome_ids(&report, "fail").is_empty());
}
