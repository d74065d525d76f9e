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
        for outcome in ["fail", "warn", "error"] {
            let got = support::outcome_ids(&report, outcome);
            assert!(got.is_empty(), "{tier} {outcome}: {got:?}");
        }
        // Only the other tier's case is not applicable.
        let skipped = support::outcome_ids(&report, "skip");
        let other_tier: BTreeSet<String> = if tier == "builtin" {
            ["cwx/tier/plugin-refuses-builtin".to_owned()].into()
        } else {
            BTreeSet::new()
        };
        assert_eq!(skipped, other_tier, "{tier}");
        assert_eq!(report["summary"]["total"], total);
    }
}

use std::collections::BTreeSet;
use support::{Double, run_doubles};

const TOY: &str = "/conform/toy-extension/index.js#5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592";

/// Deviations of `tests/fixtures/cwx_host.py` caught by some cases: the
/// case ids (without `cwx/`) each must fail and warn, and nothing else.
/// `EXTENSION` stands for every case that activates the extension.
const DEVIATIONS: &[(&str, &[&str], &[&str])] = &[
    // Found by conform fuzz first (tests/fuzz.rs); ids/large-request-id is its regression case.
    ("die-on-large-id", &["ids/large-request-id"], &[]),
    ("activate-missing-crash", &["activate/missing-entry"], &[]),
    ("activate-missing-error", &["activate/missing-entry"], &[]),
    ("bad-magic-ignored", &["frame/bad-magic-ends-host"], &[]),
    (
        "cancel-ignored",
        &["extension/cancel-in-flight", "extension/cancel-sweep"],
        &[],
    ),
    (
        "cancel-unknown-answered",
        &[
            "cancel/unknown-id",
            "extension/cancel-in-flight",
            "extension/cancel-sweep",
        ],
        &[],
    ),
    (
        "command-result-bad-kind",
        &["extension/command-run", "extension/command-sweep"],
        &[],
    ),
    (
        "deactivate-bad-shape",
        &[
            "activate/reactivate",
            "deactivate/never-activated",
            "extension/deactivate",
            "handle/revoked",
        ],
        &[],
    ),
    ("eof-ignored", &["eof"], &[]),
    ("hello-protocol-2", &["handshake/hello"], &[]),
    ("hello-wrong-tier", &["handshake/hello"], &[]),
    (
        "hook-verdict-extra",
        &["extension/hook-evaluate", "extension/hook-sweep"],
        &[],
    ),
    // Every case that calls the echo tool: its result is read as a ToolResultWire.
    (
        "tool-result-bad-shape",
        &[
            "activate/reactivate",
            "extension/cancel-sweep",
            "extension/tool-call",
            "extension/tool-sweep",
            "extension/tool-sweep-ticket",
            "handle/not-yet-active",
            "limits/max-frame",
        ],
        &[],
    ),
    (
        "unknown-handle-wrong-code",
        &[
            "command-run/unknown-handle",
            "handle/error-refused-activation",
            "handle/not-yet-active",
            "handle/refused-activation",
            "handle/revoked",
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
            "frame/length-counts-bytes",
            "frame/output",
            "ids/large-request-id",
            "ping",
            "tier/plugin-refuses-builtin",
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
            "frame/length-counts-bytes",
            "frame/output",
            "ids/large-request-id",
            "ping",
            "tier/plugin-refuses-builtin",
            "unknown-method",
        ],
        &[],
    ),
    // A registration the core refuses ends the exchange: every extension case.
    ("register-tool-no-schema", &["EXTENSION"], &[]),
    ("register-unknown-field", &["EXTENSION"], &[]),
    // Under a filter: no host/ready fails every case that waits for it.
    (
        "no-ready",
        &["handshake/ready", "ping"],
        &["handshake/ready-after-initialize"],
    ),
];

/// Deviations of issue 18 (what the host does with what it reads, with the
/// core's answers, with its handles and limits), each confined to the cases
/// that catch it: run on those alone (`--filter`), which keeps CI short;
/// each must fail and warn exactly them.
const LOCAL: &[(&str, &[&str], &[&str])] = &[
    ("hello-modules-unordered", &["handshake/hello"], &[]),
    ("hello-memory-limit", &[], &["handshake/hello"]),
    (
        "extra-result-field",
        &[],
        &[
            "activate/reactivate",
            "extension/cancel-sweep",
            "extension/tool-call",
            "extension/tool-sweep",
            "extension/tool-sweep-ticket",
            "handle/not-yet-active",
        ],
    ),
    (
        "ready-before-initialize",
        &[],
        &["handshake/ready-after-initialize"],
    ),
    (
        "accept-any-protocol",
        &[],
        &["handshake/protocol-outside-range"],
    ),
    ("params-array-served", &["params/array-refused"], &[]),
    (
        "params-missing-served",
        &["params/missing-field-refused"],
        &[],
    ),
    (
        "wrong-refusal-code",
        &["tier/plugin-refuses-builtin", "unknown-method"],
        &[
            "envelope/cancel-with-id-refused",
            "envelope/jsonrpc-refused",
            "params/array-refused",
            "params/missing-field-refused",
        ],
    ),
    ("jsonrpc-unchecked", &["envelope/jsonrpc-refused"], &[]),
    (
        "cancel-request-served",
        &["envelope/cancel-with-id-refused"],
        &[],
    ),
    (
        "plugin-serves-builtin",
        &["tier/plugin-refuses-builtin"],
        &[],
    ),
    // Multi-byte text in: the requests that carry it.
    (
        "read-length-as-chars",
        &[
            "extension/cancel-sweep",
            "extension/command-sweep",
            "extension/hook-sweep",
            "extension/tool-sweep",
            "extension/tool-sweep-ticket",
            "frame/length-counts-bytes",
        ],
        &["limits/max-frame"],
    ),
    ("no-utf8-check", &[], &["frame/non-utf8-not-served"]),
    ("ignore-max-frame", &[], &["limits/max-frame"]),
    ("ignore-max-inflight", &[], &["limits/inflight"]),
    (
        "live-before-activated",
        &[
            "handle/error-refused-activation",
            "handle/not-yet-active",
            "handle/refused-activation",
        ],
        &[],
    ),
    ("serve-revoked", &["handle/revoked"], &[]),
    (
        "ignore-refusals",
        &[
            "handle/error-refused-activation",
            "handle/refused-activation",
        ],
        &[],
    ),
    ("no-activate-deadline", &["activate/deadline"], &[]),
    ("stale-owner", &["activate/reactivate"], &[]),
    ("odd-error-code", &[], &["deactivate/never-activated"]),
    // The sweeps without a ticket call relay.
    (
        "core-call-without-ticket",
        &[
            "extension/cancel-sweep",
            "extension/tool-sweep",
            "limits/max-frame",
        ],
        &[],
    ),
    ("relay-drops-refusal", &["extension/tool-sweep-ticket"], &[]),
    ("shutdown-stays", &[], &["shutdown"]),
    (
        "waits-on-oversize",
        &[
            "frame/length-just-over-ends-host",
            "frame/oversized-length-ends-host",
        ],
        &[],
    ),
];

/// Deviations that break every exchange after the ones listed.
const EVERYWHERE: &[(&str, &[&str])] = &[
    ("hello-extra-field", &[]),
    ("hello-runtime-deno", &[]),
    ("frame-length-lies", &["handshake/hello"]),
    // The two cases that stop at host/hello pass: it comes after host/ready.
    (
        "builtin-method-from-plugin",
        &["handshake/hello", "handshake/protocol-outside-range"],
    ),
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
        // A loaded machine may take seconds to start a Python host: the
        // bound on its hello is not what these runs test.
        extra: vec![
            "--tier".into(),
            tier.into(),
            "--extension".into(),
            TOY.into(),
            "--startup-timeout".into(),
            "30".into(),
        ],
        fail,
        warn: BTreeSet::new(),
        // The plugin tier's one case does not apply to a builtin-tier host.
        skipped: Some(usize::from(tier == "builtin")),
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
    let extension: BTreeSet<String> =
        conform::case::load::<conform::protocols::cwx::HostCases>(&[])
            .unwrap()
            .into_iter()
            .filter(|c| {
                c.needs
                    .contains(&conform::protocols::cwx::steps::Need::Extension)
            })
            .map(|c| c.id)
            .collect();
    let expand = |list: &[&str]| -> BTreeSet<String> {
        if list == ["EXTENSION"] {
            extension.clone()
        } else {
            ids(list)
        }
    };
    let mut doubles = Vec::new();
    for (name, fail, warn) in DEVIATIONS {
        let mut d = double(
            &format!("cwx-deviation-{name}"),
            "plugin",
            &format!("--deviation {name}"),
            expand(fail),
        );
        d.warn = expand(warn);
        if *name == "no-ready" {
            d.extra
                .extend(["--filter".into(), "cwx/handshake,cwx/ping".into()]);
        }
        doubles.push(d);
    }
    for (name, fail, warn) in LOCAL {
        let mut d = double(
            &format!("cwx-deviation-{name}"),
            "plugin",
            &format!("--deviation {name}"),
            expand(fail),
        );
        d.warn = expand(warn);
        let filter: Vec<String> = d.fail.union(&d.warn).cloned().collect();
        d.extra.extend(["--filter".into(), filter.join(",")]);
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

/// A host that writes nothing at all, though it keeps running: the set-up
/// got nothing, which `cwx/handshake/hello` reports once; every other case
/// ends at once naming it (issue 26, item 6), not at its own bound.
#[test]
fn a_host_that_writes_nothing_fails_the_hello_case_once_and_ends_the_rest() {
    let (code, report, stderr) =
        support::run_protocol_json("cwx", "exec:sleep 600", &["--startup-timeout", "1"]);
    assert_eq!(code, 1, "{stderr}\n{}", support::outcome_text(&report));
    assert_eq!(
        support::outcome_ids(&report, "fail"),
        BTreeSet::from(["cwx/handshake/hello".to_owned()])
    );
    let cases = report["cases"].as_array().unwrap();
    for c in cases.iter().filter(|c| c["id"] != "cwx/handshake/hello") {
        assert_eq!(c["outcome"], "skip", "{c}");
    }
    // The cases that apply to this run stand on the hello case.
    let named = cases
        .iter()
        .filter(|c| {
            c["message"]
                .as_str()
                .unwrap()
                .contains("cwx/handshake/hello reports it")
        })
        .count();
    assert!(named > 20, "{}", support::outcome_text(&report));
}

/// A host slow to start (it writes its hello 2.5 s after each start, past
/// the start-up bound of 2 s) is slow, not silent: the probe's grace hears
/// it, and each case waits for its hello as long as it showed it needs.
#[test]
fn a_host_slow_to_start_gets_a_grace_and_passes() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture host needs it");
        return;
    }
    let host =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cwx_host.py");
    let target = format!(
        "exec:sleep 2.5; exec python3 {} --tier=plugin",
        host.display()
    );
    let (code, report, stderr) = support::run_protocol_json(
        "cwx",
        &target,
        &[
            "--startup-timeout",
            "2",
            "--filter",
            "cwx/handshake,cwx/ping",
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{}", support::outcome_text(&report));
    assert!(
        report["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().unwrap().contains("slow to start"))),
        "{}",
        report["notes"]
    );
}

/// Nothing in the seed orders an extension's registrations, nor says how
/// many go out at once: a host that registers its hook, then its command,
/// then its tools, all at once or each after the last is answered, passes
/// every case (issue 26, item 8: the handle cases took the first
/// registration as the tool, and a one-at-a-time host ended exit 3).
#[test]
fn a_host_that_registers_in_another_order_passes_every_case() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture host needs it");
        return;
    }
    let host =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cwx_host.py");
    for variant in ["hook-first", "one-at-a-time"] {
        let target = format!(
            "exec:python3 {} --tier=plugin --variant {variant}",
            host.display()
        );
        let (code, report, stderr) =
            support::run_protocol_json("cwx", &target, &["--extension", TOY]);
        assert_eq!(
            code,
            0,
            "{variant}: {stderr}\n{}",
            support::outcome_text(&report)
        );
        for outcome in ["fail", "warn", "error", "skip"] {
            let got = support::outcome_ids(&report, outcome);
            assert!(got.is_empty(), "{variant} {outcome}: {got:?}");
        }
    }
}
