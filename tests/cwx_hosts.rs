//! The cwx suite proven by hosts: conform's builtin reference host passes
//! every case on both tiers.

mod support;

#[test]
fn the_builtin_reference_host_passes_every_case_on_both_tiers() {
    let total = conform::case::load::<conform::protocols::cwx::HostCases>(&[])
        .unwrap()
        .len();
    for tier in ["plugin", "builtin"] {
        let (code, report, stderr) =
            support::run_protocol_json("cwx", "builtin", &["--tier", tier]);
        assert_eq!(
            code,
            0,
            "{tier}: {stderr}\n{}",
            support::outcome_text(&report)
        );
        for outcome in ["fail", "warn", "error", "skip"] {
            let got = support::outcome_ids(&report, outcome);
            assert!(got.is_empty(), "{tier} {outcome}: {got:?}");
        }
        assert_eq!(report["summary"]["total"], total);
    }
}

use std::collections::BTreeSet;
use support::{Double, run_doubles};

const TOY: &str = "/conform/toy-extension/index.js#5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592";

/// Deviations of `tests/fixtures/cwx_host.py` caught by some cases: the
/// case ids (without `cwx/`) each must fail and warn, and nothing else.
const DEVIATIONS: &[(&str, &[&str], &[&str])] = &[
    // Found by conform fuzz first (tests/fuzz.rs); ids/large-request-id is its regression case.
    ("die-on-large-id", &["ids/large-request-id"], &[]),
    ("activate-missing-crash", &["activate/missing-entry"], &[]),
    ("activate-missing-error", &["activate/missing-entry"], &[]),
    ("bad-magic-ignored", &["frame/bad-magic-ends-host"], &[]),
    ("cancel-ignored", &["extension/cancel-in-flight"], &[]),
    (
        "cancel-unknown-answered",
        &["cancel/unknown-id", "extension/cancel-in-flight"],
        &[],
    ),
    ("command-result-bad-kind", &["extension/command-run"], &[]),
    (
        "deactivate-bad-shape",
        &["deactivate/never-activated", "extension/deactivate"],
        &[],
    ),
    ("eof-ignored", &["eof"], &[]),
    ("hello-protocol-2", &["handshake/hello"], &[]),
    ("hello-wrong-tier", &["handshake/hello"], &[]),
    ("hook-verdict-extra", &["extension/hook-evaluate"], &[]),
    ("tool-result-bad-shape", &["extension/tool-call"], &[]),
    (
        "unknown-handle-wrong-code",
        &[
            "command-run/unknown-handle",
            "hook-evaluate/unknown-handle",
            "tool-call/unknown-handle",
        ],
        &[],
    ),
    ("unknown-method-crash", &["unknown-method"], &[]),
    // Every case that pings the host (a probe or the ping case).
    (
        "ping-silent",
        &[
            "activate/missing-entry",
            "cancel/unknown-id",
            "extension/activate",
            "frame/output",
            "ids/large-request-id",
            "ping",
            "unknown-method",
        ],
        &[],
    ),
    (
        "response-both",
        &[
            "activate/missing-entry",
            "cancel/unknown-id",
            "extension/activate",
            "frame/output",
            "ids/large-request-id",
            "ping",
            "unknown-method",
        ],
        &[],
    ),
    // A registration the core refuses ends the exchange: every extension case.
    (
        "register-tool-no-schema",
        &[
            "extension/activate",
            "extension/cancel-in-flight",
            "extension/command-run",
            "extension/deactivate",
            "extension/hook-evaluate",
            "extension/tool-call",
        ],
        &[],
    ),
    (
        "register-unknown-field",
        &[
            "extension/activate",
            "extension/cancel-in-flight",
            "extension/command-run",
            "extension/deactivate",
            "extension/hook-evaluate",
            "extension/tool-call",
        ],
        &[],
    ),
    // Under a filter: no host/ready fails every case that waits for it.
    ("no-ready", &["handshake/ready", "ping"], &[]),
];

/// Deviations that break every exchange after the ones listed.
const EVERYWHERE: &[(&str, &[&str])] = &[
    ("hello-extra-field", &[]),
    ("hello-runtime-deno", &[]),
    ("frame-length-lies", &["handshake/hello"]),
    ("builtin-method-from-plugin", &["handshake/hello"]),
];

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("cwx/{s}")).collect()
}

fn host(tier: &str, args: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cwx_host.py");
    format!("exec:python3 {path} --tier={tier} {args}")
}

fn double(name: &str, tier: &str, args: &str, fail: BTreeSet<String>) -> Double {
    Double {
        name: name.into(),
        protocol: "cwx",
        target: host(tier, args),
        extra: vec![
            "--tier".into(),
            tier.into(),
            "--extension".into(),
            TOY.into(),
        ],
        fail,
        warn: BTreeSet::new(),
        skipped: Some(0),
    }
}

#[test]
fn every_broken_host_fails_exactly_its_cases_and_the_fixture_passes_on_both_tiers() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture host needs it");
        return;
    }
    let all: BTreeSet<String> = conform::case::load::<conform::protocols::cwx::HostCases>(&[])
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let mut doubles = Vec::new();
    for (name, fail, warn) in DEVIATIONS {
        let mut d = double(
            &format!("cwx-deviation-{name}"),
            "plugin",
            &format!("--deviation {name}"),
            ids(fail),
        );
        d.warn = ids(warn);
        if *name == "no-ready" {
            d.extra
                .extend(["--filter".into(), "cwx/handshake,cwx/ping".into()]);
        }
        doubles.push(d);
    }
    for (name, spared) in EVERYWHERE {
        let fail = all.difference(&ids(spared)).cloned().collect();
        doubles.push(double(
            &format!("cwx-deviation-{name}"),
            "plugin",
            &format!("--deviation {name}"),
            fail,
        ));
    }
    for tier in ["plugin", "builtin"] {
        doubles.push(double(
            &format!("cwx-conformant-{tier}"),
            tier,
            "",
            BTreeSet::new(),
        ));
    }
    // A builtin-tier host may send builtin-only methods: the same host passes.
    doubles.push(double(
        "cwx-builtin-tier-sends-a-builtin-method",
        "builtin",
        "--deviation builtin-method-from-plugin",
        BTreeSet::new(),
    ));
    let (problems, reports) = run_doubles(&doubles);
    for (name, report) in &reports {
        support::snapshot_report(&name.replace('-', "_"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
