//! `conform fuzz` end to end: the references survive generated inputs; a
//! server that dies on one and a server that hangs on a schedule are found,
//! shrunk, written as case files, and those files replay with `conform run
//! --case`: failing the broken server, passing the references.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use support::{conform, fixture_target, python_available};

struct Fuzzed {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    findings: Vec<PathBuf>,
}

fn fuzz(protocol: &str, target: &str, out: &Path, extra: &[&str]) -> Fuzzed {
    let o = conform()
        .args(["fuzz", "--protocol", protocol, "--target", target, "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let mut findings: Vec<PathBuf> = std::fs::read_dir(out)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    findings.sort();
    Fuzzed {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        findings,
    }
}

fn replay(protocol: &str, target: &str, file: &Path, id: &str) -> (Option<i32>, Value) {
    let o = conform()
        .args([
            "run",
            "--protocol",
            protocol,
            "--target",
            target,
            "--format",
            "json",
        ])
        .arg("--case")
        .arg(file)
        .args(["--filter", id])
        .output()
        .unwrap();
    let report = support::report_from(&o.stdout);
    (o.status.code(), report)
}

#[test]
fn the_builtin_server_survives_5000_generated_connections() {
    let out = tempfile::tempdir().unwrap();
    let f = fuzz(
        "agent-socket",
        "builtin",
        out.path(),
        // A generous bound: nothing here should hang, and a loaded CI
        // machine must not turn a slow answer into a finding.
        &["--cases", "5000", "--seed", "1", "--timeout", "20"],
    );
    assert_eq!(f.code, Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("5000 inputs"), "{}", f.stdout);
    assert!(f.stdout.contains("no findings"), "{}", f.stdout);
    assert!(f.findings.is_empty());
    assert!(f.stderr.contains("seed 1"), "the seed is printed");
}

#[test]
fn the_builtin_agent_and_host_survive_generated_inputs() {
    // 5000 each with the release binary is in the README; a debug build
    // spawns a reference per input, so the test takes fewer.
    for (protocol, extra) in [
        ("acp", vec![]),
        ("cwx", vec![]),
        ("cwx", vec!["--tier", "builtin"]),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--cases",
            "400",
            "--seed",
            "2",
            "-j",
            "8",
            "--timeout",
            "20",
        ];
        args.extend(extra);
        let f = fuzz(protocol, "builtin", out.path(), &args);
        assert_eq!(f.code, Some(0), "{protocol}: {}\n{}", f.stdout, f.stderr);
        assert!(f.stdout.contains("no findings"), "{protocol}: {}", f.stdout);
    }
}

/// Fuzzes a broken fixture until it is found, and checks the reproducer:
/// shrunk, with its provenance, failing the broken target again and passing
/// the builtin reference and the conformant fixture.
fn finds_and_replays(
    protocol: &str,
    fixture: impl Fn(&str) -> String,
    deviation: &str,
    seed: &str,
    check: impl Fn(&Value),
) {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let broken = fixture(&format!("--deviation {deviation}"));
    let f = fuzz(
        protocol,
        &broken,
        out.path(),
        &[
            "--cases",
            "5000",
            "--seed",
            seed,
            // A Python target on a loaded machine can take over 2 s to start.
            "--timeout",
            "5",
            "--shrink-time",
            "40",
            "-j",
            "8",
        ],
    );
    assert_eq!(f.code, Some(1), "{deviation}: {}\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains(&format!("FAIL {protocol}/fuzz/")),
        "{}",
        f.stdout
    );
    assert_eq!(f.findings.len(), 1, "one reproducer: {:?}", f.findings);
    let file = &f.findings[0];
    let written: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let p = &written["provenance"];
    assert_eq!(p["seed"], seed.parse::<u64>().unwrap(), "{p:#}");
    assert_eq!(p["target"], broken);
    assert_eq!(p["protocol"], protocol);
    assert_eq!(p["reproduced_alone"], true, "{p:#}");
    let case = &written["cases"][0];
    check(case);
    let id = case["id"].as_str().unwrap();
    let (code, report) = replay(protocol, &broken, file, id);
    assert_eq!(
        code,
        Some(1),
        "the reproducer fails the broken target: {report:#}"
    );
    assert_eq!(report["summary"]["total"], 1);
    for good in ["builtin".to_owned(), fixture("")] {
        let (code, report) = replay(protocol, &good, file, id);
        assert_eq!(code, Some(0), "{good} passes the reproducer: {report:#}");
        assert_eq!(report["summary"]["failed"], 0, "{report:#}");
    }
}

fn acp_fixture(args: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/acp_agent.py");
    format!("exec:python3 {} {args}", path.display())
}

fn cwx_fixture(args: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cwx_host.py");
    format!("exec:python3 {} --tier plugin {args}", path.display())
}

/// The bytes of the case's first step.
fn first_bytes(case: &Value) -> Vec<u8> {
    let step = &case["steps"][0];
    match (step.get("raw"), step.get("rawHex")) {
        (Some(Value::String(t)), _) => t.clone().into_bytes(),
        (_, Some(Value::String(h))) => (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect(),
        _ => panic!("no bytes in {case:#}"),
    }
}

#[test]
fn a_server_that_dies_on_array_params_is_found_and_replayed() {
    finds_and_replays(
        "agent-socket",
        fixture_target,
        "die-on-array-params",
        "3",
        |case| {
            // Shrunk to what matters: a request whose params are an array.
            let bytes = String::from_utf8_lossy(&first_bytes(case)).into_owned();
            assert!(bytes.contains(r#""params":["#), "{bytes}");
            assert!(bytes.len() < 400, "shrunk: {bytes}");
        },
    );
}

#[test]
fn a_server_that_hangs_on_a_split_line_is_found_and_replayed() {
    finds_and_replays(
        "agent-socket",
        fixture_target,
        "hang-on-split-line",
        "4",
        |case| {
            // What makes the line arrive in pieces: a pause, a connection left
            // open (or half-closed) before its newline.
            let step = &case["steps"][0];
            let bytes = first_bytes(case);
            let split =
                step.get("pauses").is_some() || !bytes.ends_with(b"\n") || bytes.len() > 64 * 1024;
            assert!(split, "{step:#}");
        },
    );
}

#[test]
fn an_agent_that_dies_on_a_large_id_is_found_and_replayed() {
    finds_and_replays("acp", acp_fixture, "die-on-big-id", "5", |case| {
        // A well-formed request, so its survival is a MUST.
        assert_eq!(case["level"], "MUST", "{case:#}");
    });
}

#[test]
fn a_host_that_dies_on_a_large_id_is_found_and_replayed() {
    finds_and_replays("cwx", cwx_fixture, "die-on-large-id", "5", |case| {
        let bytes = first_bytes(case);
        let text = String::from_utf8_lossy(&bytes[8..]).into_owned();
        assert!(text.contains(r#""id":"#), "{text}");
    });
}

#[test]
fn zero_inputs_is_a_usage_error() {
    let out = tempfile::tempdir().unwrap();
    let f = fuzz("agent-socket", "builtin", out.path(), &["--cases", "0"]);
    assert_eq!(f.code, Some(2));
    assert!(f.stderr.contains("zero inputs"), "{}", f.stderr);
}
