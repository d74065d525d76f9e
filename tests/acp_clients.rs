//! `--role client` for ACP: conform's scripted agent against the reference
//! clients (the builtin one and a Python one) and against broken clients,
//! each with one deviation, which must fail exactly their cases.

mod support;

use std::collections::BTreeSet;
use support::Double;

fn client_fixture(deviation: &str) -> String {
    format!(
        "exec:python3 {}/tests/fixtures/acp_client.py --deviation {deviation} {{agent}}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("acp/client/{s}")).collect()
}

/// Each deviation of `tests/fixtures/acp_client.py`, the `--filter` its run
/// takes (deviations that break every case are run on the plain turn), and
/// the cases it must fail.
const DEVIATIONS: &[(&str, Option<&str>, &[&str])] = &[
    ("no-create", None, &["fs/write-creates"]),
    ("truncate-end", None, &["terminal/truncation"]),
    ("byte-cut", None, &["terminal/truncation"]),
    ("select-after-cancel", None, &["cancel/pending-permission"]),
    ("release-keeps", None, &["terminal/release-invalidates"]),
    (
        "ignore-custom",
        Some("acp/client/ext/*"),
        &["ext/custom-request"],
    ),
    (
        "relative-cwd",
        Some("acp/client/prompt/*"),
        &["prompt/turn"],
    ),
    (
        "skip-initialize",
        Some("acp/client/prompt/*"),
        &["prompt/turn"],
    ),
    (
        "load-session",
        Some("acp/client/prompt/*"),
        &["prompt/turn"],
    ),
    (
        "image-prompt",
        Some("acp/client/prompt/*"),
        &["prompt/turn"],
    ),
    ("bad-permission-shape", None, &["permission/answered"]),
    ("wrong-option", None, &["permission/answered"]),
    ("create-waits", None, &["terminal/create-returns-at-once"]),
];

#[test]
fn the_reference_clients_pass_and_every_broken_client_fails_exactly_its_cases() {
    let role = || vec!["--role".to_owned(), "client".to_owned()];
    let mut doubles = vec![Double {
        name: "builtin".into(),
        protocol: "acp",
        target: "builtin".into(),
        extra: role(),
        fail: BTreeSet::new(),
        warn: BTreeSet::new(),
        skipped: Some(0),
    }];
    if support::python_available() {
        doubles.push(Double {
            name: "python-reference".into(),
            protocol: "acp",
            target: client_fixture("none"),
            extra: role(),
            fail: BTreeSet::new(),
            warn: BTreeSet::new(),
            skipped: Some(0),
        });
        // Conformant: it does no file system, so the two fs cases do not apply.
        doubles.push(Double {
            name: "variant-no-fs".into(),
            protocol: "acp",
            target: client_fixture("no-fs"),
            extra: role(),
            fail: BTreeSet::new(),
            warn: BTreeSet::new(),
            skipped: Some(2),
        });
        doubles.extend(DEVIATIONS.iter().map(|(name, filter, fail)| {
            let mut extra = role();
            if let Some(f) = filter {
                extra.extend(["--filter".into(), (*f).into()]);
            }
            Double {
                name: format!("deviation-{name}"),
                protocol: "acp",
                target: client_fixture(name),
                extra,
                fail: ids(fail),
                warn: BTreeSet::new(),
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
        support::snapshot_client_report(&format!("acp_client_{name}"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn every_client_must_has_a_case_or_says_why_not() {
    let cases = conform::case::load::<conform::protocols::acp::ClientCases>(&[]).unwrap();
    let catalogue = conform::suite::Protocol::Acp.catalogue();
    let cited: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.requirements.iter().map(String::as_str))
        .collect();
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for r in catalogue
        .requirements
        .iter()
        .filter(|r| r.role == conform::suite::Role::Client)
    {
        let has = cited.contains(r.id.as_str());
        if r.level == conform::case::Level::Must && !has && r.no_case.is_none() {
            missing.push(r.id.as_str());
        }
        if has && r.no_case.is_some() {
            stale.push(r.id.as_str());
        }
    }
    assert!(missing.is_empty(), "client MUSTs with no case: {missing:?}");
    assert!(stale.is_empty(), "cited, yet marked no_case: {stale:?}");
}

#[test]
fn a_client_that_never_cancels_leaves_the_cancel_musts_unexercised_not_failed() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture client needs it");
        return;
    }
    let (code, report, stderr) = support::run_protocol_json(
        "acp",
        &client_fixture("never-cancels"),
        &["--role", "client", "--filter", "acp/client/cancel/*"],
    );
    assert_eq!(code, 3, "incomplete, not failed: {stderr}");
    assert_eq!(report["verdict"], "incomplete");
    let case = &report["cases"][0];
    assert_eq!(case["outcome"], "skip", "{case}");
    assert_eq!(case["skip_kind"], "outside", "{case}");
    let unexercised: BTreeSet<&str> = report["unexercised"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u["requirement"].as_str())
        .collect();
    assert_eq!(
        unexercised,
        BTreeSet::from([
            "acp.cancel.client-answer-permission",
            "acp.tool.client-cancelled-outcome"
        ])
    );
}

/// The never-cancelling client's two cancel MUSTs, waived with a reason, or
/// (`stale`) one of them together with a requirement the run does exercise.
fn cancel_waivers(stale: bool) -> serde_json::Value {
    let mut entries = vec![
        serde_json::json!({"requirement": "acp.cancel.client-answer-permission",
            "reason": "our client never cancels a turn"}),
        serde_json::json!({"requirement": "acp.tool.client-cancelled-outcome",
            "reason": "our client never cancels a turn"}),
    ];
    if stale {
        entries.push(
            serde_json::json!({"requirement": "acp.prompt.client-setup-first",
            "reason": "claimed untestable, yet the turn case checks it"}),
        );
    }
    serde_json::json!({ "expected_failures": entries })
}

#[test]
fn a_waived_unexercised_must_passes_and_a_waiver_the_run_exercises_is_stale() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture client needs it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (stale, want) in [(false, 0), (true, 1)] {
        let file = dir.path().join(format!("waivers-{stale}.json"));
        std::fs::write(&file, cancel_waivers(stale).to_string()).unwrap();
        let (code, report, stderr) = support::run_protocol_json(
            "acp",
            &client_fixture("never-cancels"),
            &[
                "--role",
                "client",
                "--filter",
                "acp/client/cancel/*,acp/client/prompt/turn",
                "--expected-failures",
                file.to_str().unwrap(),
            ],
        );
        assert_eq!(code, want, "stale={stale}: {stderr}\n{report:#}");
        assert_eq!(report["summary"]["unexercised"].as_u64().unwrap_or(0), 0);
        assert_eq!(report["summary"]["unexercised_waived"], 2);
        assert_eq!(
            report["unexercised"][0]["waiver"],
            "our client never cancels a turn"
        );
        if stale {
            assert_eq!(
                report["stale"],
                serde_json::json!(["acp.prompt.client-setup-first"])
            );
        }
    }
}
