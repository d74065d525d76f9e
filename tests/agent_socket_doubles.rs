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
    (
        "protocol-version-3",
        &["handshake/version"],
        &["handshake/version-answer"],
    ),
    ("workspace-without-python", &["handshake/sandbox-pair"], &[]),
    ("relative-workspace", &["handshake/workspace-absolute"], &[]),
    ("reserved-namespace", &["handshake/tool-declarations"], &[]),
    ("duplicate-tool", &["handshake/tool-declarations"], &[]),
    ("bad-model-access", &["handshake/shape"], &[]),
    ("zero-tool-timeout", &["handshake/shape"], &[]),
    // Documented keys without a default left out: Vibe copes, the
    // documented shape is broken (as.shape.documented).
    ("minimal-handshake", &[], &["handshake/shape"]),
    ("snake-case-timeout", &[], &["handshake/shape"]),
    ("version-echo", &[], &["handshake/version-answer"]),
    (
        "nonzero-exit-is-error",
        &[
            "sandbox/execute/nonzero-exit",
            "sandbox/execute/helper-exit-codes",
        ],
        &[],
    ),
    (
        "exit-127-error",
        &["sandbox/execute/helper-exit-codes"],
        &[],
    ),
    ("merged-output", &["sandbox/execute/streams-apart"], &[]),
    (
        "ignores-cwd",
        &["sandbox/execute/cwd", "sandbox/execute/root-cwd"],
        &[],
    ),
    ("workspace-only-cwd", &["sandbox/execute/root-cwd"], &[]),
    ("bash-not-sh", &["sandbox/execute/posix-sh"], &[]),
    ("expands-env", &["sandbox/execute/shlex-quoting"], &[]),
    (
        "ignores-timeout",
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-wrong-code",
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    ("kill-shell-only", &["sandbox/execute/timeout-stops"], &[]),
    (
        "data-longer",
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "early-timeout-no-data",
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    ("helper-tmp-missing", &["handshake/helper-installable"], &[]),
    (
        "missing-file-error",
        &[
            "sandbox/read-file/missing",
            "sandbox/read-file/directory",
            "sandbox/read-file/device",
            "sandbox/read-file/fifo",
            "framing/read-file-envelope",
        ],
        &["sandbox/execute/concurrent"],
    ),
    (
        "urlsafe-base64",
        &[
            "sandbox/read-file/content",
            "sandbox/read-file/binary",
            "sandbox/read-file/large",
            "sandbox/read-file/max-bytes",
            "sandbox/read-file/tilde",
        ],
        &[],
    ),
    ("ignores-max-bytes", &["sandbox/read-file/max-bytes"], &[]),
    ("short-read", &["sandbox/read-file/max-bytes"], &[]),
    ("empty-file-null", &["sandbox/read-file/empty"], &[]),
    ("directory-listing", &["sandbox/read-file/directory"], &[]),
    (
        "nonregular-content",
        &["sandbox/read-file/device", "sandbox/read-file/fifo"],
        &[],
    ),
    ("tilde-literal", &["sandbox/read-file/tilde"], &[]),
    ("spaced-json", &[], &["framing/compact"]),
    ("string-id-as-int", &["framing/string-id"], &[]),
    ("serial", &[], &["sandbox/execute/concurrent"]),
    ("serial-read", &[], &["sandbox/execute/concurrent"]),
    // A wrong id fails every reply: JSON-RPC's "It MUST be the same as the
    // value of the id member in the Request Object" (docs/levels.md).
    (
        "wrong-id",
        &[
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/string-id",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
        ],
        &[],
    ),
    ("error-id-null", &["framing/error-envelope"], &[]),
    (
        "error-null-on-success",
        &[
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/string-id",
            "framing/tools-call-envelope",
        ],
        &[],
    ),
    // Vibe reads "-32601" as -32601, but JSON-RPC's "This MUST be an
    // integer" makes every error reply of a case that reads it fail
    // (as.jsonrpc.error-code, docs/levels.md).
    (
        "error-code-string",
        &[
            "framing/error-envelope",
            "robustness/array-params/survives",
            "robustness/invalid-params/execute",
            "robustness/invalid-params/read-file",
            "robustness/invalid-params/tools-call",
            "robustness/invalid-request/code",
            "robustness/malformed-line/parse-error",
            "robustness/unknown-method/code",
            "robustness/unknown-method/error",
            "sandbox/execute/timeout",
            "sandbox/execute/timeout-data",
            "sandbox/execute/timeout-stops",
        ],
        &[],
    ),
    (
        "no-jsonrpc",
        &[
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/string-id",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
            // A parse error without `jsonrpc` breaks as.jsonrpc.version, a
            // MUST, whatever the SHOULD of answering the line.
            "robustness/malformed-line/parse-error",
        ],
        &[],
    ),
    ("trailing-line", &[], &["framing/one-reply-line"]),
    (
        "unknown-method-result",
        &["framing/error-envelope", "robustness/unknown-method/error"],
        &["robustness/unknown-method/code"],
    ),
    (
        "invalid-params-internal",
        &[],
        &[
            "robustness/invalid-params/execute",
            "robustness/invalid-params/read-file",
            "robustness/invalid-params/tools-call",
        ],
    ),
    (
        "invalid-request-parse-code",
        &[],
        &["robustness/invalid-request/code"],
    ),
    (
        "parse-error-scraped-id",
        &["robustness/malformed-line/parse-error"],
        &[],
    ),
    ("socket-mode-0666", &["security/socket-mode"], &[]),
    (
        // The result's type is a MUST (`as.tools.call-result`) whatever the
        // level of the case that met it: the SHOULD case fails on it too.
        "annotations-not-object",
        &[
            "tools/call/answered",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "tools/call/full-name",
            "tools/call/null-caller",
        ],
        &[],
    ),
    ("bare-tool-names", &["tools/call/full-name"], &[]),
    ("caller-null-invalid", &[], &["tools/call/null-caller"]),
    // Vibe reads an exitCode of "3" as 3: the documented int is broken in
    // every case that reads a command's result, and nothing fails.
    (
        "execute-exit-code-string",
        &[],
        &[
            "handshake/workspace-is-directory",
            "handshake/python-runs",
            "handshake/helper-installable",
            "sandbox/execute/output",
            "sandbox/execute/nonzero-exit",
            "sandbox/execute/helper-exit-codes",
            "sandbox/execute/streams-apart",
            "sandbox/execute/cwd",
            "sandbox/execute/root-cwd",
            "sandbox/execute/posix-sh",
            "sandbox/execute/shlex-quoting",
            "sandbox/execute/null-timeout",
            "sandbox/execute/timeout-stops",
            "sandbox/execute/whole-output",
            "sandbox/execute/large-request",
            "sandbox/execute/non-utf8-output",
            "sandbox/execute/concurrent-accepted",
            "sandbox/execute/concurrent",
            "sandbox/read-file/content",
            "sandbox/read-file/binary",
            "sandbox/read-file/empty",
            "sandbox/read-file/max-bytes",
            "sandbox/read-file/large",
            "sandbox/read-file/fifo",
            "sandbox/read-file/tilde",
        ],
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
            "tools/call/full-name",
            "framing/tools-call-envelope",
        ],
        &[
            "tools/call/null-caller",
            "robustness/invalid-params/tools-call",
        ],
    ),
];

/// Conformant variations: they must pass, skipping only the cases of a
/// half they do not serve (`None`: they serve both).
const VARIANTS: &[(&str, Option<&str>)] = &[
    ("close-after-reply", None),
    ("extra-fields", None),
    ("default-handshake", None),
    ("early-timeout-with-data", None),
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

/// A server that reads each request to the end of its input (Vibe never
/// half-closes) and so never answers: the set-up got nothing, which
/// `handshake/version` reports once; every case that needs an answer ends
/// at once naming it, instead of waiting out the source's 60 s bound each
/// (issue 26, item 6). The socket's mode is still checked.
#[test]
fn a_server_that_never_answers_fails_the_handshake_once_and_ends_the_rest() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture server needs it");
        return;
    }
    let (code, report, stderr) = support::run_json(
        &support::fixture_target("--deviation read-to-eof"),
        &["--startup-timeout", "2"],
    );
    assert_eq!(code, 1, "{stderr}\n{}", support::outcome_text(&report));
    assert_eq!(
        support::outcome_ids(&report, "fail"),
        ids(&["handshake/version"])
    );
    assert_eq!(
        support::outcome_ids(&report, "pass"),
        ids(&["security/socket-mode"])
    );
    let total = report["summary"]["total"].as_u64().unwrap() as usize;
    let skipped = support::outcome_ids(&report, "skip");
    assert_eq!(
        skipped.len(),
        total - 2,
        "{}",
        support::outcome_text(&report)
    );
    for c in report["cases"].as_array().unwrap() {
        if c["outcome"] == "skip" {
            let m = c["message"].as_str().unwrap();
            assert!(
                m.contains("agent-socket/handshake/version reports it"),
                "{c}"
            );
        }
    }
}

/// The same for a server that closes every connection without a byte of
/// reply: nothing came, whether the connection stays open or is closed.
#[test]
fn a_server_that_closes_every_connection_unanswered_fails_the_handshake_once() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture server needs it");
        return;
    }
    let (code, report, stderr) = support::run_json(
        &support::fixture_target("--deviation close-unanswered"),
        &[],
    );
    assert_eq!(code, 1, "{stderr}\n{}", support::outcome_text(&report));
    assert_eq!(
        support::outcome_ids(&report, "fail"),
        ids(&["handshake/version"])
    );
    let total = report["summary"]["total"].as_u64().unwrap() as usize;
    assert_eq!(
        support::outcome_ids(&report, "skip").len(),
        total - 2,
        "{}",
        support::outcome_text(&report)
    );
}

/// A server that accepts at once but answers nothing for 2.5 s, past the
/// start-up bound of 2 s, is slow, not silent: the grace hears it, the run
/// says so, and every case runs.
#[test]
fn a_server_slow_to_answer_gets_a_grace_and_passes() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture server needs it");
        return;
    }
    let (code, report, stderr) = support::run_json(
        &support::fixture_target("--variant slow-start"),
        &[
            "--startup-timeout",
            "2",
            "--filter",
            "agent-socket/handshake",
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{}", support::outcome_text(&report));
    assert!(support::outcome_ids(&report, "skip").is_empty());
    assert!(
        report["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n.as_str().unwrap().contains("is slow"))),
        "{}",
        report["notes"]
    );
}
