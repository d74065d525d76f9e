//! The ACP suite proven by test doubles: the Python fixture agent
//! (`tests/fixtures/acp_agent.py`, written from the spec independently of
//! conform's reference) conformant and in conformant variations that must
//! pass, and with one deviation each that the suite must catch with exactly
//! the cases named here.

mod support;

use std::collections::BTreeSet;
use support::{Double, run_doubles};

/// Deviations caught by some cases: the case ids (without `acp/`) each must
/// fail (MUST) and warn (SHOULD), and nothing else.
const DEVIATIONS: &[(&str, &[&str], &[&str])] = &[
    // Found by conform fuzz first (tests/fuzz.rs).
    ("die-on-big-id", &["jsonrpc/id-large"], &[]),
    (
        "answer-notifications",
        &[
            "cancel/cancel-request-answered",
            "cancel/during-fs-read",
            "cancel/during-permission",
            "cancel/during-turn",
            "ext/unknown-notification-ignored",
            "jsonrpc/notification-unanswered",
            "mode/set-during-turn",
        ],
        &[],
    ),
    (
        "cancel-end-turn",
        &[
            "cancel/during-fs-read",
            "cancel/during-permission",
            "cancel/during-turn",
        ],
        &[],
    ),
    (
        "crash-on-cancel",
        &[
            "cancel/during-fs-read",
            "cancel/during-permission",
            "cancel/during-turn",
            "jsonrpc/notification-unanswered",
            "mode/set-during-turn",
        ],
        &[],
    ),
    (
        "fs-ignores-capabilities",
        &[
            "fs/no-read-fs-empty",
            "fs/no-read-when-false",
            "fs/no-read-with-write-only",
            "fs/no-read-without-capability",
            "fs/no-write-with-read-only",
            "init/omitted-capabilities",
        ],
        &[],
    ),
    (
        "invalid-params-internal",
        &[],
        &[
            "jsonrpc/invalid-params-new",
            "jsonrpc/invalid-params-prompt",
        ],
    ),
    ("load-replay-after-response", &["load/replay"], &[]),
    ("load-unsupported", &["load/replay"], &[]),
    // Survival is a MUST: an agent that exits after a malformed line
    // leaves every later request unanswered.
    (
        "malformed-exit",
        &[
            "jsonrpc/parse-error-survived",
            "jsonrpc/invalid-utf8-survived",
        ],
        &[],
    ),
    // It asks, then completes the tool without waiting: a rejection comes
    // too late, and the rejected edit ran.
    (
        "no-permission-wait",
        &["cancel/during-permission", "permission/rejected"],
        &[],
    ),
    (
        "relative-path",
        &[
            "cancel/during-fs-read",
            "fs/read-advertised",
            "fs/read-from-line",
            "fs/read-relative",
            "fs/write-advertised",
            "terminal/released",
        ],
        &[],
    ),
    ("same-session-id", &["session/ids-unique"], &[]),
    (
        "tool-call-no-title",
        // Every case whose turn has a tool call: the permission flows, and
        // the tools the fixture reports failed for want of a capability.
        &[
            "cancel/during-permission",
            "fs/no-read-fs-empty",
            "fs/no-read-when-false",
            "fs/no-read-with-write-only",
            "fs/no-read-without-capability",
            "fs/no-write-with-read-only",
            "init/omitted-capabilities",
            "mode/set-during-turn",
            "permission/allowed",
            "permission/rejected",
            "prompt/tool-in-progress",
            "terminal/no-call-without-capability",
            "tool/ids-unique",
        ],
        &[],
    ),
    (
        "unknown-method-result",
        // stdout-only asks for an error object too, with an unknown method.
        &["jsonrpc/unknown-method", "transport/stdout-only"],
        &[
            "ext/unknown-request-not-found",
            "jsonrpc/unknown-method-code",
        ],
    ),
    ("version-echo-any", &["init/version-unsupported"], &[]),
];

/// Cases whose turn ends normally: a turn ended with `end_turn` by a fake
/// model, which `bad-stop-reason` replaces and after which
/// `update-after-response` sends one more update.
const NORMAL_TURNS: &[&str] = &[
    "ext/result-root-fields",
    "fs/no-read-fs-empty",
    "fs/no-read-when-false",
    "fs/no-read-with-write-only",
    "fs/no-read-without-capability",
    "fs/no-write-with-read-only",
    "fs/read-advertised",
    "fs/read-from-line",
    "fs/read-relative",
    "fs/write-advertised",
    "init/omitted-capabilities",
    "load/replay",
    "permission/allowed",
    "permission/rejected",
    "prompt/no-update-after-response",
    "prompt/plan",
    "prompt/resource-link",
    "prompt/text",
    "prompt/tool-in-progress",
    "session/updates-name-the-session",
    "terminal/no-call-without-capability",
    "terminal/released",
    "tool/ids-unique",
    "transport/stdout-only",
];

/// Cases where the fake model sends a session/update for the session, so a
/// wrong session id in updates shows (every normal turn that says something,
/// the permission flow, mode changes and the load replay).
const TURNS_WITH_UPDATES: &[&str] = &[
    "cancel/during-permission",
    "ext/result-root-fields",
    "fs/no-read-fs-empty",
    "fs/no-read-when-false",
    "fs/no-read-with-write-only",
    "fs/no-read-without-capability",
    "fs/no-write-with-read-only",
    "fs/read-advertised",
    "fs/read-from-line",
    "fs/read-relative",
    "fs/write-advertised",
    "init/omitted-capabilities",
    "load/replay",
    "mode/set",
    "mode/set-during-turn",
    "permission/allowed",
    "permission/rejected",
    "prompt/no-update-after-response",
    "prompt/plan",
    "prompt/resource-link",
    "prompt/text",
    "prompt/tool-in-progress",
    "session/updates-name-the-session",
    "terminal/no-call-without-capability",
    "terminal/released",
    "tool/ids-unique",
    "transport/stdout-only",
];

/// Deviations that break every exchange: every case that runs fails but
/// those listed, with the `--filter` the double runs under (these are slow
/// to fail, so some run a part of the suite).
const EVERYWHERE: &[(&str, &[&str], Option<&str>)] = &[
    ("stdout-noise", &[], None),
    ("stderr-flood-stdout", &[], None),
    ("capabilities-bad-type", &[], None),
    (
        "id-as-string",
        &["jsonrpc/id-string", "jsonrpc/id-empty-string"],
        None,
    ),
    ("pretty-json", &[], Some("acp/init,acp/transport")),
];

/// What the fixture agent advertises, as case `needs`: cases needing anything
/// else are skipped.
const FIXTURE_OFFERS: &[&str] = &["loadSession", "modes"];

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| format!("acp/{s}")).collect()
}

fn fixture(args: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/acp_agent.py");
    format!("exec:python3 {path} {args}")
}

/// The cases a run under `filter` does not skip when the agent offers `offers`.
fn applicable(filter: Option<&str>, offers: &[&str]) -> BTreeSet<String> {
    conform::case::load::<conform::protocols::acp::AgentCases>(&[])
        .unwrap()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| conform::case::filter_matches(f, &c.id)))
        .filter(|c| {
            c.needs
                .iter()
                .all(|n| offers.contains(&n.to_string().as_str()))
        })
        .map(|c| c.id)
        .collect()
}

fn skipped_count(offers: &[&str]) -> usize {
    let all = conform::case::load::<conform::protocols::acp::AgentCases>(&[])
        .unwrap()
        .len();
    all - applicable(None, offers).len()
}

/// Whether case `id` does its own handshake (set-up `none`).
fn handshake_case(id: &str) -> bool {
    conform::case::load::<conform::protocols::acp::AgentCases>(&[])
        .unwrap()
        .iter()
        .any(|c| c.id == id && c.config.setup == conform::protocols::acp::steps::Setup::None)
}

fn double(name: &str, args: &str, fail: BTreeSet<String>, warn: BTreeSet<String>) -> Double {
    Double {
        name: name.into(),
        protocol: "acp",
        target: fixture(args),
        // A loaded machine (CI runs the doubles six at a time) can take
        // seconds to start a Python agent: conform's start-up bound is
        // raised so a slow start is never a failure.
        extra: vec!["--startup-timeout".into(), "30".into()],
        fail,
        warn,
        skipped: None,
    }
}

#[test]
fn every_broken_agent_fails_exactly_its_cases_and_every_variation_passes() {
    if !support::python_available() {
        eprintln!("skipped: python3 is not on PATH; the fixture agent needs it");
        return;
    }
    let mut doubles: Vec<Double> = DEVIATIONS
        .iter()
        .map(|(name, fail, warn)| {
            double(
                &format!("acp-deviation-{name}"),
                &format!("--deviation {name}"),
                ids(fail),
                ids(warn),
            )
        })
        .collect();
    doubles.push(double(
        "acp-deviation-bad-stop-reason",
        "--deviation bad-stop-reason",
        ids(NORMAL_TURNS),
        BTreeSet::new(),
    ));
    // One more update after every response: every case with a turn.
    let mut late = ids(NORMAL_TURNS);
    late.extend(ids(&[
        "cancel/cancel-request-answered",
        "cancel/during-fs-read",
        "cancel/during-permission",
        "cancel/during-turn",
        "mode/set-during-turn",
    ]));
    doubles.push(double(
        "acp-deviation-update-after-response",
        "--deviation update-after-response",
        late,
        BTreeSet::new(),
    ));
    doubles.push(double(
        "acp-deviation-wrong-session-in-update",
        "--deviation wrong-session-in-update",
        ids(TURNS_WITH_UPDATES),
        BTreeSet::new(),
    ));
    for (name, spared, filter) in EVERYWHERE {
        // A bad `loadSession` type advertises nothing: the load case skips.
        let offers: &[&str] = if *name == "capabilities-bad-type" {
            &["modes"]
        } else {
            FIXTURE_OFFERS
        };
        let mut fail: BTreeSet<String> = applicable(*filter, offers)
            .difference(&ids(spared))
            .cloned()
            .collect();
        // No initialize answer conform can read: the handshake cases fail,
        // and the cases that build on a handshake are skipped, naming
        // acp/init/version-1, rather than failed for it again.
        let unreadable = *name == "pretty-json";
        if unreadable {
            fail.retain(|id| handshake_case(id));
        }
        let mut d = double(
            &format!("acp-deviation-{name}"),
            &format!("--deviation {name}"),
            fail,
            BTreeSet::new(),
        );
        if unreadable {
            // Every answer it writes is waited for to the bound: the default.
            d.extra.clear();
        }
        if let Some(f) = filter {
            d.extra.extend(["--filter".into(), (*f).into()]);
        }
        doubles.push(d);
    }
    for (variant, offers) in [
        ("", FIXTURE_OFFERS),
        ("string-ids", FIXTURE_OFFERS),
        ("parse-error-survive", FIXTURE_OFFERS),
        ("no-load", &["modes"][..]),
        ("no-modes", &["loadSession"][..]),
    ] {
        let (name, args) = if variant.is_empty() {
            ("acp-conformant".to_owned(), String::new())
        } else {
            (
                format!("acp-variant-{variant}"),
                format!("--variant {variant}"),
            )
        };
        let mut d = double(&name, &args, BTreeSet::new(), BTreeSet::new());
        d.skipped = Some(skipped_count(offers));
        doubles.push(d);
    }
    let (problems, reports) = run_doubles(&doubles);
    for (name, report) in &reports {
        support::snapshot_report(&name.replace('-', "_"), report);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_builtin_reference_agent_passes_every_case() {
    let (code, report, stderr) = support::run_protocol_json("acp", "builtin", &[]);
    assert_eq!(code, 0, "{stderr}\n{}", support::outcome_text(&report));
    for outcome in ["fail", "warn", "error", "skip"] {
        let got = support::outcome_ids(&report, outcome);
        assert!(got.is_empty(), "{outcome}: {got:?}");
    }
    let total = conform::case::load::<conform::protocols::acp::AgentCases>(&[])
        .unwrap()
        .len();
    assert_eq!(report["summary"]["total"], total);
}
