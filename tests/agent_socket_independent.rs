//! The independent agent-socket battery (issue 18): a reference server and
//! 73 one-deviation variants of it in `tests/independent/agent_socket/`,
//! written from the sources alone by someone who never saw conform's code
//! or corpus. conform passes the reference and catches each variant as
//! [`EXPECTED`] records: failed (a MUST case fails), warned (only SHOULD
//! cases warn) or missed, with the cases that do it. The README's kill
//! rate is this table's.
//!
//! What the test runs, to prove the table with the least work (CI time is
//! tight): the reference gets the whole suite, and must pass every case.
//! A variant that is caught gets only the cases its row names (`--filter`;
//! a name also selects the cases it prefixes, which the row lists too),
//! and must fail and warn exactly those; the rest of the suite was run
//! once, by hand, when the table was written (`docs/proof.md`, "How the suite
//! is proven"). A missed variant gets the whole suite, which must pass, so
//! a new catch shows as a change to the table. Six variants run at once.
//! `request-needs-eof` waits out its server's 30 s read limit on every
//! request, so its row names few cases.

mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use support::{Double, run_doubles};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caught {
    Failed,
    Warned,
    Missed,
}

/// Each variant: how conform catches it, the cases that fail, the cases
/// that warn (ids without the `agent-socket/` prefix).
const EXPECTED: &[(&str, Caught, &[&str], &[&str])] = &[
    (
        "protocol-version-1",
        Caught::Failed,
        &["handshake/version"],
        &["handshake/version-answer"],
    ),
    (
        "protocol-version-echo",
        Caught::Warned,
        &[],
        &["handshake/version-answer"],
    ),
    (
        "protocol-version-missing",
        Caught::Failed,
        &["handshake/shape", "handshake/version"],
        &["handshake/version-answer"],
    ),
    (
        "workspace-without-python",
        Caught::Failed,
        &["handshake/sandbox-pair"],
        &[],
    ),
    (
        "workspace-relative",
        Caught::Failed,
        &["handshake/workspace-absolute"],
        &[],
    ),
    // The sandbox cannot run a command in its workspace: the set-up probe
    // says so, one case reports it, the other sandbox cases are skipped.
    (
        "workspace-nonexistent",
        Caught::Failed,
        &["handshake/workspace-is-directory"],
        &[],
    ),
    (
        "python-not-runnable",
        Caught::Failed,
        &["handshake/helper-installable", "handshake/python-runs"],
        &[],
    ),
    (
        "reserved-namespace-vibe",
        Caught::Failed,
        &["handshake/tool-declarations"],
        &[],
    ),
    (
        "reserved-namespace-ui",
        Caught::Failed,
        &["handshake/tool-declarations"],
        &[],
    ),
    (
        "duplicate-tool",
        Caught::Failed,
        &["handshake/tool-declarations"],
        &[],
    ),
    (
        "duplicate-via-default",
        Caught::Failed,
        &["handshake/tool-declarations"],
        &[],
    ),
    (
        "model-access-invalid",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "input-schema-not-object",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "output-schema-not-object",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "description-null",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "tool-name-missing",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    ("tools-not-list", Caught::Failed, &["handshake/shape"], &[]),
    (
        "tool-timeout-zero",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "instructions-not-string",
        Caught::Failed,
        &["handshake/shape"],
        &[],
    ),
    (
        "reply-no-newline",
        Caught::Failed,
        &[
            "framing/error-envelope",
            "framing/handshake-envelope",
            "framing/string-id",
            "handshake/sandbox-pair",
            "handshake/shape",
            "handshake/tool-declarations",
            "handshake/version",
            "handshake/workspace-absolute",
            "robustness/array-params/survives",
            "robustness/empty-connection/survives",
            "robustness/huge-line/survives",
            "robustness/malformed-line/survives",
            "robustness/partial-line/survives",
            "robustness/split-request/answered",
            "robustness/unknown-method/error",
        ],
        &[
            "framing/compact",
            "framing/one-reply-line",
            "handshake/version-answer",
            "robustness/invalid-request/code",
            "robustness/malformed-line/parse-error",
            "robustness/unknown-method/code",
        ],
    ),
    (
        "reply-indented",
        Caught::Failed,
        &[
            "framing/error-envelope",
            "framing/handshake-envelope",
            "framing/string-id",
            "handshake/sandbox-pair",
            "handshake/shape",
            "handshake/tool-declarations",
            "handshake/version",
            "handshake/workspace-absolute",
            "robustness/array-params/survives",
            "robustness/empty-connection/survives",
            "robustness/huge-line/survives",
            "robustness/malformed-line/survives",
            "robustness/partial-line/survives",
            "robustness/split-request/answered",
            "robustness/unknown-method/error",
            // A reply spread over lines breaks as.framing.line, a MUST,
            // whatever the level of the case that met it.
            "framing/compact",
            "framing/one-reply-line",
            "handshake/version-answer",
            "robustness/invalid-request/code",
            "robustness/malformed-line/parse-error",
            "robustness/unknown-method/code",
        ],
        &[],
    ),
    ("reply-spaces", Caught::Warned, &[], &["framing/compact"]),
    ("reply-crlf", Caught::Warned, &[], &["framing/compact"]),
    (
        "reply-extra-line",
        Caught::Warned,
        &[],
        &["framing/one-reply-line"],
    ),
    (
        "request-needs-eof",
        Caught::Failed,
        &["handshake/version"],
        &[],
    ),
    (
        "close-without-reply",
        Caught::Failed,
        &["framing/error-envelope", "robustness/unknown-method/error"],
        &["robustness/unknown-method/code"],
    ),
    // The sandbox cannot run a command in its workspace: the set-up probe
    // says so, one case reports it, the other sandbox cases are skipped.
    (
        "require-initialize-per-connection",
        Caught::Failed,
        &["handshake/workspace-is-directory"],
        &[
            "robustness/invalid-params/tools-call",
            "robustness/unknown-method/code",
        ],
    ),
    (
        "serial",
        Caught::Warned,
        &[],
        &["sandbox/execute/concurrent"],
    ),
    (
        "die-on-malformed",
        Caught::Failed,
        &[
            "robustness/array-params/survives",
            "robustness/early-close/survives",
            "robustness/empty-connection/survives",
            "robustness/huge-line/survives",
            "robustness/malformed-line/survives",
            "robustness/partial-line/survives",
            "robustness/split-request/answered",
        ],
        &["robustness/malformed-line/parse-error"],
    ),
    (
        "parse-error-with-id",
        Caught::Failed,
        &["robustness/malformed-line/parse-error"],
        &[],
    ),
    (
        "parse-error-code",
        Caught::Warned,
        &[],
        &["robustness/malformed-line/parse-error"],
    ),
    (
        "invalid-request-code",
        Caught::Warned,
        &[],
        &["robustness/invalid-request/code"],
    ),
    (
        "method-not-found-code",
        Caught::Warned,
        &[],
        &["robustness/unknown-method/code"],
    ),
    (
        "invalid-params-code",
        Caught::Warned,
        &[],
        &[
            "robustness/invalid-params/execute",
            "robustness/invalid-params/read-file",
            "robustness/invalid-params/tools-call",
        ],
    ),
    (
        "error-id-null",
        Caught::Failed,
        &["framing/error-envelope"],
        &[],
    ),
    (
        "error-null-on-success",
        Caught::Failed,
        &[
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/string-id",
            "framing/tools-call-envelope",
        ],
        &[],
    ),
    (
        "id-as-string",
        Caught::Failed,
        &[
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
        ],
        &[],
    ),
    (
        "jsonrpc-missing",
        Caught::Failed,
        &[
            "framing/error-envelope",
            "framing/execute-envelope",
            "framing/handshake-envelope",
            "framing/read-file-envelope",
            "framing/string-id",
            "framing/tools-call-envelope",
            "robustness/array-params/survives",
            // as.jsonrpc.version, a MUST, on the parse error's envelope too.
            "robustness/malformed-line/parse-error",
        ],
        &[],
    ),
    (
        "error-message-missing",
        Caught::Failed,
        &[
            "framing/error-envelope",
            "robustness/array-params/survives",
            // The parse error's envelope lacks error.message: a JSON-RPC
            // MUST (as.jsonrpc.error-object), whatever the SHOULD of the code.
            "robustness/malformed-line/parse-error",
            "robustness/unknown-method/error",
            "sandbox/execute/timeout",
            "sandbox/execute/timeout-stops",
        ],
        &[
            "robustness/invalid-params/execute",
            "robustness/invalid-params/read-file",
            "robustness/invalid-params/tools-call",
            "robustness/invalid-request/code",
            "robustness/unknown-method/code",
            "sandbox/execute/timeout-data",
        ],
    ),
    (
        "abort-code-for-errors",
        Caught::Warned,
        &[],
        &[
            "robustness/invalid-params/execute",
            "robustness/invalid-params/read-file",
            "robustness/invalid-params/tools-call",
            "robustness/unknown-method/code",
        ],
    ),
    // The sandbox cannot run a command in its workspace: the set-up probe
    // says so, one case reports it, the other sandbox cases are skipped.
    (
        "snake-case-fields",
        Caught::Failed,
        &["handshake/workspace-is-directory"],
        &[],
    ),
    (
        "nonzero-exit-error",
        Caught::Failed,
        &[
            "sandbox/execute/helper-exit-codes",
            "sandbox/execute/nonzero-exit",
        ],
        &[],
    ),
    (
        "stderr-into-stdout",
        Caught::Failed,
        &["sandbox/execute/streams-apart"],
        &[],
    ),
    (
        "exit-code-string",
        Caught::Warned,
        &[],
        &[
            "handshake/helper-installable",
            "handshake/python-runs",
            "handshake/workspace-is-directory",
            "sandbox/execute/concurrent",
            "sandbox/execute/concurrent-accepted",
            "sandbox/execute/cwd",
            "sandbox/execute/helper-exit-codes",
            "sandbox/execute/large-request",
            "sandbox/execute/non-utf8-output",
            "sandbox/execute/nonzero-exit",
            "sandbox/execute/null-timeout",
            "sandbox/execute/output",
            "sandbox/execute/posix-sh",
            "sandbox/execute/root-cwd",
            "sandbox/execute/shlex-quoting",
            "sandbox/execute/streams-apart",
            "sandbox/execute/timeout-stops",
            "sandbox/execute/whole-output",
            "sandbox/read-file/binary",
            "sandbox/read-file/content",
            "sandbox/read-file/empty",
            "sandbox/read-file/fifo",
            "sandbox/read-file/large",
            "sandbox/read-file/max-bytes",
            "sandbox/read-file/tilde",
        ],
    ),
    (
        "cwd-ignored",
        Caught::Failed,
        &["sandbox/execute/cwd", "sandbox/execute/root-cwd"],
        &[],
    ),
    (
        "bash-not-sh",
        Caught::Failed,
        &["sandbox/execute/posix-sh"],
        &[],
    ),
    (
        "timeout-null-refused",
        Caught::Failed,
        &["sandbox/execute/null-timeout"],
        &[],
    ),
    (
        "timeout-not-enforced",
        Caught::Failed,
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-wrong-code",
        Caught::Failed,
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-as-result",
        Caught::Failed,
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-leaves-running",
        Caught::Failed,
        &["sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-kills-only-shell",
        Caught::Failed,
        &["sandbox/execute/timeout-stops"],
        &[],
    ),
    ("timeout-data-missing", Caught::Missed, &[], &[]),
    (
        "timeout-data-longer",
        Caught::Failed,
        &["sandbox/execute/timeout", "sandbox/execute/timeout-stops"],
        &[],
    ),
    (
        "timeout-data-string",
        Caught::Warned,
        &[],
        &["sandbox/execute/timeout-data"],
    ),
    (
        "readfile-over-max",
        Caught::Failed,
        &["sandbox/read-file/max-bytes"],
        &[],
    ),
    (
        "readfile-directory-listing",
        Caught::Failed,
        &["sandbox/read-file/directory"],
        &[],
    ),
    (
        "readfile-nonregular",
        Caught::Failed,
        &["sandbox/read-file/device", "sandbox/read-file/fifo"],
        &[],
    ),
    (
        "readfile-base64-newlines",
        Caught::Failed,
        &[
            "sandbox/read-file/binary",
            "sandbox/read-file/content",
            "sandbox/read-file/large",
            "sandbox/read-file/max-bytes",
            "sandbox/read-file/tilde",
        ],
        &[],
    ),
    (
        "readfile-urlsafe",
        Caught::Failed,
        &["sandbox/read-file/binary"],
        &[],
    ),
    (
        "readfile-empty-null",
        Caught::Failed,
        &["sandbox/read-file/empty"],
        &[],
    ),
    (
        "readfile-missing-error",
        Caught::Failed,
        &[
            "framing/read-file-envelope",
            "sandbox/read-file/device",
            "sandbox/read-file/directory",
            "sandbox/read-file/fifo",
            "sandbox/read-file/missing",
        ],
        &["sandbox/execute/concurrent"],
    ),
    (
        "readfile-missing-empty",
        Caught::Failed,
        &[
            "sandbox/read-file/device",
            "sandbox/read-file/directory",
            "sandbox/read-file/fifo",
            "sandbox/read-file/missing",
        ],
        &["sandbox/execute/concurrent"],
    ),
    // The result's type is a MUST (`as.tools.call-result`), whatever the
    // level of the case that met it: the SHOULD case fails on it too.
    (
        "annotations-not-object",
        Caught::Failed,
        &[
            "tools/call/answered",
            "tools/call/full-name",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "tools/call/null-caller",
        ],
        &[],
    ),
    (
        "tool-error-code-int",
        Caught::Failed,
        &[
            "tools/call/answered",
            "tools/call/full-name",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "tools/call/null-caller",
        ],
        &[],
    ),
    (
        "tool-error-no-message",
        Caught::Failed,
        &[
            "tools/call/answered",
            "tools/call/full-name",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "tools/call/null-caller",
        ],
        &[],
    ),
    (
        "tool-error-string",
        Caught::Failed,
        &[
            "tools/call/answered",
            "tools/call/full-name",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
            "tools/call/null-caller",
        ],
        &[],
    ),
    (
        "result-unwrapped",
        Caught::Failed,
        &[
            "framing/tools-call-envelope",
            "tools/call/answered",
            "tools/call/full-name",
            "tools/call/root-caller",
            "tools/call/subagent-caller",
        ],
        &["tools/call/null-caller"],
    ),
    (
        "tool-name-bare",
        Caught::Failed,
        &["tools/call/full-name"],
        &[],
    ),
    (
        "caller-null-refused",
        Caught::Warned,
        &[],
        &["tools/call/null-caller"],
    ),
    ("tool-timeout-wrong-code", Caught::Missed, &[], &[]),
    (
        "socket-mode-0666",
        Caught::Failed,
        &["security/socket-mode"],
        &[],
    ),
    ("socket-dir-0755", Caught::Missed, &[], &[]),
];

/// The battery's directory.
fn dir() -> String {
    format!(
        "{}/tests/independent/agent_socket",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Where the independent server makes its workspace: a directory of the
/// test's, so a variant that dies before its own cleanup leaves nothing in
/// the machine's temporary directory (the test removes it at the end).
fn scratch() -> String {
    format!("{}/agent-socket-independent", env!("CARGO_TARGET_TMPDIR"))
}

fn target(variant: Option<&str>) -> String {
    let mut t = format!(
        "exec:env TMPDIR={} python3 {}/server.py --listen {{socket}}",
        scratch(),
        dir()
    );
    if let Some(v) = variant {
        t.push_str(&format!(" --deviation {v}"));
    }
    t
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("agent-socket/{s}")).collect()
}

#[test]
fn the_independent_reference_passes_and_each_variant_is_caught_as_recorded() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the independent server needs it");
        return;
    }
    // Every variant of the battery has a row, and every row a variant.
    let listed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/deviations.json", dir())).unwrap(),
    )
    .unwrap();
    let variants: BTreeSet<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    let rows: BTreeSet<&str> = EXPECTED.iter().map(|(n, ..)| *n).collect();
    assert_eq!(
        variants, rows,
        "the battery's variants and this table's rows differ"
    );

    let mut doubles = vec![Double {
        name: "reference".into(),
        protocol: "agent-socket",
        target: target(None),
        extra: vec![],
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(0),
    }];
    for (name, caught, fail, warn) in EXPECTED {
        assert_eq!(
            *caught,
            if !fail.is_empty() {
                Caught::Failed
            } else if !warn.is_empty() {
                Caught::Warned
            } else {
                Caught::Missed
            },
            "{name}: the verdict does not follow from its cases"
        );
        let extra = if *caught == Caught::Missed {
            vec![]
        } else {
            let filter: Vec<String> = ids(fail).into_iter().chain(ids(warn)).collect();
            vec!["--filter".into(), filter.join(",")]
        };
        doubles.push(Double {
            name: (*name).into(),
            protocol: "agent-socket",
            target: target(Some(name)),
            extra,
            fail: ids(fail),
            warn: ids(warn),
            skipped: None,
        });
    }
    std::fs::create_dir_all(scratch()).unwrap();
    let (problems, reports) = run_doubles(&doubles);
    let _ = std::fs::remove_dir_all(scratch());

    // What came, as a reviewer reads it, with the kill rate.
    let short = |ids: BTreeSet<String>| -> Vec<String> {
        ids.into_iter()
            .map(|i| i.trim_start_matches("agent-socket/").to_owned())
            .collect()
    };
    let mut rows = Vec::new();
    for (name, report) in &reports {
        let fail = short(support::outcome_ids(report, "fail"));
        let warn = short(support::outcome_ids(report, "warn"));
        let caught = if !fail.is_empty() {
            "failed"
        } else if !warn.is_empty() {
            "warned"
        } else if name == "reference" {
            "passed"
        } else {
            "missed"
        };
        rows.push((name.clone(), caught, fail, warn));
    }
    let count = |c: &str| rows.iter().filter(|r| r.1 == c).count();
    let mut table = String::new();
    writeln!(
        table,
        "{} variants: {} failed, {} warned, {} missed",
        EXPECTED.len(),
        count("failed"),
        count("warned"),
        count("missed")
    )
    .unwrap();
    for (name, caught, fail, warn) in &rows {
        writeln!(table, "{name}: {caught}").unwrap();
        for f in fail {
            writeln!(table, "    fail {f}").unwrap();
        }
        for w in warn {
            writeln!(table, "    warn {w}").unwrap();
        }
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!("agent_socket_independent", table));
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Issue 26, item 12: a reply that is not one line of JSON breaks the
/// framing rule, whatever the case asked; the certificate does not charge it
/// to the version, shape or sandbox rules of the cases that met it. The
/// independent server's `reply-indented` spreads every reply over lines.
#[test]
fn a_reply_that_is_not_a_line_of_json_is_charged_to_the_framing_rule() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the independent server needs it");
        return;
    }
    let bundle = tempfile::tempdir().unwrap();
    let out = support::conform()
        .args(["run", "--protocol", "agent-socket", "--format", "json"])
        .args(["--target", &target(Some("reply-indented"))])
        .args(["--filter", "agent-socket/handshake/"])
        .arg("--certify")
        .arg(bundle.path())
        .output()
        .expect("conform runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        support::failed_requirements(bundle.path()),
        BTreeSet::from(["as.framing.line".to_owned()])
    );
}

/// Issue 26, item 12: a declared sandbox that cannot run a command in its
/// workspace is the instrument every sandbox case uses: one case reports
/// it (conform's set-up probe names it) and the others are skipped on it,
/// so the certificate fails the rule that was broken, not the thirty the
/// sandbox cases list. A result of the wrong shape breaks its type's rule,
/// and the pattern's mismatch in the same field adds nothing.
#[test]
fn a_sandbox_that_cannot_run_a_command_is_reported_once() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the independent server needs it");
        return;
    }
    for (deviation, broken) in [
        ("workspace-nonexistent", "as.init.workspace-directory"),
        (
            "require-initialize-per-connection",
            "as.init.workspace-directory",
        ),
        ("snake-case-fields", "as.exec.result"),
    ] {
        let bundle = tempfile::tempdir().unwrap();
        let out = support::conform()
            .args(["run", "--protocol", "agent-socket", "--format", "json"])
            .args(["--target", &target(Some(deviation))])
            .arg("--certify")
            .arg(bundle.path())
            .output()
            .expect("conform runs");
        assert_eq!(out.status.code(), Some(1), "{deviation}");
        assert_eq!(
            support::failed_requirements(bundle.path()),
            BTreeSet::from([broken.to_owned()]),
            "{deviation}"
        );
    }
}

/// Issue 26, item 4: conform sends what Vibe sends. Vibe's parameters are
/// pydantic models whose `timeout` is `float | None`, written as `30.0`; a
/// server that reads it as a float only (written from the sources alone,
/// `deviations-round3.json`) is not failed for conform's own spelling.
#[test]
fn a_command_timeout_is_sent_as_the_float_vibe_sends() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the independent server needs it");
        return;
    }
    let out = support::conform()
        .args([
            "run",
            "--protocol",
            "agent-socket",
            "--filter",
            "agent-socket/sandbox/",
        ])
        .args(["--target", &target(Some("timeout-int-refused"))])
        .output()
        .expect("conform runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
