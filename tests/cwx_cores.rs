//! `--role core` for cwx: conform's scripted host against the reference
//! cores (the builtin one and a Python one) and against broken cores, each
//! with one deviation, which must fail exactly their cases.

mod support;

use std::collections::BTreeSet;
use support::Double;

fn core_fixture(deviation: &str) -> String {
    format!(
        "exec:python3 {}/tests/fixtures/cwx_core.py --deviation {deviation} {{host}}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("cwx/core/{s}")).collect()
}

/// Each deviation of `tests/fixtures/cwx_core.py`, the `--filter` its run
/// takes (deviations that break every frame are run on one or two cases),
/// the cases it must fail, and those it must warn.
type Deviation = (
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
    &'static [&'static str],
);
const DEVIATIONS: &[Deviation] = &[
    (
        "bad-magic",
        Some("cwx/core/workload/plugin"),
        &["workload/plugin"],
        &[],
    ),
    (
        "no-jsonrpc",
        Some("cwx/core/workload/*"),
        &["workload/plugin", "workload/builtin"],
        &[],
    ),
    // mcp/close is builtin-only: the builtin-tier case passes; every
    // plugin-tier case whose core reaches its tool/call fails.
    (
        "ignores-tier",
        None,
        &[
            "core-call/bogus-ticket",
            "deadline/cancel",
            "inflight/held-answers",
            "workload/plugin",
        ],
        &[],
    ),
    ("no-cancel", None, &["deadline/cancel"], &[]),
    ("early-cancel", None, &["deadline/cancel"], &[]),
    (
        "keeps-host",
        None,
        &[
            "protocol-error/bad-magic",
            "protocol-error/oversized-length",
        ],
        &[],
    ),
    ("ignores-hello-tier", None, &["hello/wrong-tier"], &[]),
    ("no-module-check", None, &["hello/unpinned-module"], &[]),
    ("lenient-hello", None, &["strict/hello-unknown-field"], &[]),
    (
        "admits-anything",
        None,
        &[
            "core-call/bogus-ticket",
            "strict/bad-registration",
            "strict/builtin-method-from-plugin",
            "strict/unknown-method",
        ],
        &[],
    ),
    ("core-call-denied", None, &["core-call/bogus-ticket"], &[]),
    (
        "reads-oversize",
        None,
        &["protocol-error/oversized-length"],
        &[],
    ),
    // In flight only while the host holds an answer: the cases whose host
    // does (never, until its core/call is answered, or 2 s).
    (
        "burst-calls",
        None,
        &["deadline/cancel", "inflight/held-answers"],
        &[],
    ),
    (
        "reuses-ids",
        None,
        &[
            "core-call/bogus-ticket",
            "deadline/cancel",
            "inflight/held-answers",
        ],
        &[],
    ),
    (
        "bad-protocol",
        Some("cwx/core/workload/plugin"),
        &["workload/plugin"],
        &[],
    ),
    (
        "limits-over",
        Some("cwx/core/workload/plugin"),
        &[],
        &["workload/plugin"],
    ),
    (
        "activate-first",
        Some("cwx/core/workload/plugin"),
        &[],
        &["workload/plugin"],
    ),
    (
        "answer-twice",
        Some("cwx/core/workload/*"),
        &["workload/plugin", "workload/builtin"],
        &[],
    ),
    (
        "register-bad-result",
        Some("cwx/core/workload/*"),
        &["workload/plugin", "workload/builtin"],
        &[],
    ),
    (
        "weak-token",
        Some("cwx/core/workload/plugin"),
        &["workload/plugin"],
        &[],
    ),
    (
        "config-list",
        Some("cwx/core/workload/plugin"),
        &["workload/plugin"],
        &[],
    ),
    (
        "untrimmed",
        Some("cwx/core/workload/*"),
        &["workload/plugin", "workload/builtin"],
        &[],
    ),
    (
        "two-data-dirs",
        Some("cwx/core/workload/*"),
        &["workload/plugin", "workload/builtin"],
        &[],
    ),
    (
        "leaves-host",
        Some("cwx/core/workload/plugin,cwx/core/strict/bad-registration"),
        &["workload/plugin", "strict/bad-registration"],
        &[],
    ),
];

#[test]
fn the_reference_cores_pass_and_every_broken_core_fails_exactly_its_cases() {
    let role = || vec!["--role".to_owned(), "core".to_owned()];
    let mut doubles = vec![Double {
        name: "builtin".into(),
        protocol: "cwx",
        target: "builtin".into(),
        extra: role(),
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(0),
    }];
    if support::python_available() {
        doubles.push(Double {
            name: "python-reference".into(),
            protocol: "cwx",
            target: core_fixture("none"),
            extra: role(),
            fail: BTreeSet::new(),
            warn: BTreeSet::new(),
            skipped: Some(0),
        });
        doubles.extend(DEVIATIONS.iter().map(|(name, filter, fail, warn)| {
            let mut extra = role();
            if let Some(f) = filter {
                extra.extend(["--filter".into(), (*f).into()]);
            }
            Double {
                name: format!("deviation-{name}"),
                protocol: "cwx",
                target: core_fixture(name),
                extra,
                fail: ids(fail),
                warn: ids(warn),
                skipped: Some(0),
            }
        }));
    } else {
        eprintln!("python3 is not on PATH: only the builtin core runs; the broken cores need it");
    }
    let (problems, reports) = support::run_doubles(&doubles);
    for (name, report) in &reports {
        support::snapshot_client_report(&format!("cwx_core_{name}"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn every_core_must_has_a_case() {
    let cases = conform::case::load::<conform::protocols::cwx::CoreCases>(&[]).unwrap();
    let cited: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.requirements.iter().map(String::as_str))
        .collect();
    let missing: Vec<String> = conform::suite::Protocol::Cwx
        .catalogue()
        .requirements
        .iter()
        .filter(|r| r.role == conform::suite::Role::Core && r.level == conform::case::Level::Must)
        .filter(|r| !cited.contains(r.id.as_str()) && r.no_case.is_none())
        .map(|r| r.id.clone())
        .collect();
    assert!(missing.is_empty(), "core MUSTs with no case: {missing:?}");
}
