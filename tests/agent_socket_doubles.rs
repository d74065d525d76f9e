//! The agent-socket suite proven by test doubles: the Python fixture server
//! (`tests/fixtures/agent_socket_server.py`) conformant, in conformant
//! variations that must pass, and with one deviation each that the suite must
//! catch with exactly the cases named here.

mod support;

use std::collections::BTreeSet;
use support::{Double, run_doubles};

/// The case ids (without the `agent-socket/` prefix) each deviation must fail
/// (MUST) and warn (SHOULD), and nothing else.
const DEVIATIONS: &[(&str, &[&str], &[&str])] = &[
    ("protocol-version-3", &["handshake/version"], &[]),
    ("workspace-without-python", &["handshake/sandbox-pair"], &[]),
    ("relative-workspace", &["handshake/workspace-absolute"], &[]),
    ("reserved-namespace", &["handshake/tool-declarations"], &[]),
    ("duplicate-tool", &["handshake/tool-declarations"], &[]),
    ("bad-model-access", &["handshake/shape"], &[]),
    ("zero-tool-timeout", &["handshake/shape"], &[]),
    (
        "nonzero-exit-is-error",
        &["sandbox/execute/nonzero-exit"],
        &[],
    ),
    ("merged-output", &["sandbox/execute/streams-apart"], &[]),
    ("ignores-cwd", &["sandbox/execute/cwd"], &[]),
    ("ignores-timeout", &["sandbox/execute/timeout"], &[]),
    ("timeout-wrong-code", &["sandbox/execute/timeout"], &[]),
    (
        "missing-file-error",
        &["sandbox/read-file/missing", "framing/read-file-envelope"],
        &[],
    ),
    (
        "urlsafe-base64",
        &[
            "sandbox/read-file/content",
            "sandbox/read-file/binary",
            "sandbox/read-file/large",
        ],
        &["sandbox/read-file/max-bytes"],
    ),
    ("ignores-max-bytes", &[], &["sandbox/read-file/max-bytes"]),
    ("spaced-json", &[], &["framing/compact"]),
    ("string-id-as-int", &[], &["framing/string-id"]),
    ("serial", &[], &["sandbox/execute/concurrent"]),
    (
        "wrong-id",
        &[
            "framing/handshake-envelope",
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/read-file-envelope",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
        ],
        &["framing/string-id"],
    ),
    (
        "no-jsonrpc",
        &[
            "framing/handshake-envelope",
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/read-file-envelope",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
        ],
        &["framing/string-id", "robustness/malformed-line/parse-error"],
    ),
    ("trailing-line", &["framing/one-reply-line"], &[]),
    (
        "unknown-method-result",
        &["framing/error-envelope", "robustness/unknown-method/error"],
        &["robustness/unknown-method/code"],
    ),
    ("socket-mode-0666", &["security/socket-mode"], &[]),
    (
        "annotations-not-object",
        &[
            "tools/call/answered",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
        ],
        &[],
    ),
    (
        "execute-exit-code-string",
        &[
            "handshake/workspace-is-directory",
            "handshake/python-runs",
            "sandbox/execute/output",
            "sandbox/execute/nonzero-exit",
            "sandbox/execute/streams-apart",
            "sandbox/execute/cwd",
            "sandbox/execute/posix-sh",
            "sandbox/execute/null-timeout",
            "sandbox/execute/whole-output",
            "sandbox/execute/large-request",
            "sandbox/execute/non-utf8-output",
            "sandbox/execute/concurrent-accepted",
            "sandbox/read-file/content",
            "sandbox/read-file/binary",
            "sandbox/read-file/large",
        ],
        &["sandbox/execute/concurrent", "sandbox/read-file/max-bytes"],
    ),
    // A server that dies mid-run: the case that killed it and every case after it fail.
    (
        "crash-on-malformed",
        &[
            "robustness/malformed-line/survives",
            "robustness/huge-line/survives",
            "robustness/early-close/survives",
            "robustness/empty-connection/survives",
            "robustness/partial-line/survives",
            "robustness/array-params/survives",
            "robustness/split-request/answered",
        ],
        &["robustness/malformed-line/parse-error"],
    ),
    // A server that hangs on one method: only the cases that call it fail.
    // Found by conform fuzz first (tests/fuzz.rs, where a server that
    // hangs on a split line is found too); the corpus has their regression
    // cases since. Disruptive cases run in order, so a server that stops
    // serving fails the ones after too.
    (
        "die-on-array-params",
        &[
            "robustness/array-params/survives",
            "robustness/split-request/answered",
        ],
        &[],
    ),
    (
        "drop-split-line",
        &["robustness/split-request/answered"],
        &[],
    ),
    (
        "hang-on-tools-call",
        &[
            "tools/call/answered",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "framing/tools-call-envelope",
        ],
        &[],
    ),
];

/// Conformant variations: they must pass, skipping only the cases of a
/// half they do not serve (`None`: they serve both).
const VARIANTS: &[(&str, Option<&str>)] = &[
    ("close-after-reply", None),
    ("extra-fields", None),
    ("minimal-handshake", None),
    ("string-ids", None),
    ("timeout-with-data", None),
    ("with-instructions", None),
    ("tools-only", Some("sandbox")),
    ("sandbox-only", Some("tools")),
];

/// How many embedded cases need `half`.
fn cases_needing(half: &str) -> usize {
    conform::case::load::<conform::protocols::agent_socket::ServerCases>(&[])
        .unwrap()
        .iter()
        .filter(|c| c.needs.iter().any(|n| n.to_string() == half))
        .count()
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("agent-socket/{s}")).collect()
}

#[test]
fn every_broken_server_fails_exactly_its_cases_and_every_variation_passes() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture server needs it");
        return;
    }
    let mut doubles: Vec<Double> = DEVIATIONS
        .iter()
        .map(|(name, fail, warn)| Double {
            name: format!("deviation-{name}"),
            protocol: "agent-socket",
            target: support::fixture_target(&format!("--deviation {name}")),
            extra: vec![],
            fail: ids(fail),
            warn: ids(warn),
            skipped: None,
        })
        .collect();
    doubles.extend(VARIANTS.iter().map(|(name, missing)| Double {
        name: format!("variant-{name}"),
        protocol: "agent-socket",
        target: support::fixture_target(&format!("--variant {name}")),
        extra: vec![],
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(missing.map_or(0, cases_needing)),
    }));
    doubles.push(Double {
        name: "conformant".into(),
        protocol: "agent-socket",
        target: support::fixture_target(""),
        extra: vec![],
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(0),
    });
    let (problems, reports) = run_doubles(&doubles);
    for (name, report) in &reports {
        support::snapshot_report(&format!("agent_socket_{name}"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
