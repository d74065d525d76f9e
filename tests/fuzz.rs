//! `conform fuzz` end to end (issue 19).
//!
//! - No finding in a correct implementation: the builtin references and the
//!   independent fixtures of `tests/independent/` (run with no deviation),
//!   a few hundred to a few thousand inputs each from fixed seeds.
//! - The inputs the oracles once misjudged (`tests/fuzz_regressions/`) pass
//!   the references and the independent fixtures.
//! - A target that dies or hangs on some input is found, the finding shrunk
//!   and written as a case file with its provenance, and that file replays
//!   with `conform run --case`: failing the broken target, passing the
//!   builtin reference and the clean fixtures. A stdio target that dies
//!   only after a run of inputs on one process is found on a live target,
//!   and its reproducer keeps the inputs it needs before it.

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

impl Fuzzed {
    /// How many inputs the run says it ran.
    fn inputs(&self) -> u64 {
        let first = self.stdout.lines().next().unwrap_or("");
        first
            .split(": ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no input count in {first:?}"))
    }

    /// How many response states the run says it reached.
    fn states(&self) -> usize {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix("states reached: "))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no states in {}", self.stdout))
    }
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

fn replay(
    protocol: &str,
    target: &str,
    file: &Path,
    filter: &str,
    strict: bool,
) -> (Option<i32>, Value) {
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
        .args(["--filter", filter])
        .args(if strict { &["--strict"][..] } else { &[] })
        .output()
        .unwrap();
    let report = support::report_from(&o.stdout);
    (o.status.code(), report)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The independent fixture of `protocol`, with `args` (a deviation).
fn independent(protocol: &str, args: &str) -> String {
    let dir = root().join("tests/independent");
    match protocol {
        "agent-socket" => format!(
            "exec:python3 {} --listen {{socket}} {args}",
            dir.join("agent_socket/server.py").display()
        ),
        "acp" => format!("exec:python3 {} {args}", dir.join("acp/agent.py").display()),
        "cwx" => format!(
            "exec:python3 {} --tier plugin {args}",
            dir.join("cwx/host.py").display()
        ),
        other => panic!("no independent fixture for {other}"),
    }
}

/// Fuzzes `target` and requires that nothing was found: exit 0, every
/// input run, no reproducer, and a map of the states reached.
fn no_finding(protocol: &str, target: &str, cases: u64, seed: u64, extra: &[&str]) -> Fuzzed {
    let out = tempfile::tempdir().unwrap();
    let (cases_s, seed_s) = (cases.to_string(), seed.to_string());
    // A generous bound: a loaded CI machine must not turn a slow answer
    // into a finding.
    let mut args = vec!["--cases", &cases_s, "--seed", &seed_s, "--timeout", "20"];
    args.extend(extra);
    let f = fuzz(protocol, target, out.path(), &args);
    assert_eq!(f.code, Some(0), "{target}: {}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("no findings"), "{target}: {}", f.stdout);
    assert!(f.findings.is_empty(), "{target}: {:?}", f.findings);
    assert_eq!(f.inputs(), cases, "{target}: {}", f.stdout);
    assert!(
        f.stderr.contains(&format!("seed {seed}")),
        "the seed is printed"
    );
    assert!(
        f.states() >= 10,
        "{target}: a map of the states reached: {}",
        f.stdout
    );
    f
}

#[test]
fn the_builtin_server_shows_no_finding_in_5000_connections() {
    no_finding("agent-socket", "builtin", 5000, 1, &[]);
}

#[test]
fn the_builtin_agent_shows_no_finding() {
    let f = no_finding("acp", "builtin", 1500, 2, &[]);
    // Most inputs ran on live agents: many inputs per process.
    assert!(f.stdout.contains("persistent: "), "{}", f.stdout);
}

#[test]
fn the_builtin_host_shows_no_finding_on_either_tier() {
    let f = no_finding("cwx", "builtin", 1500, 2, &[]);
    assert!(f.stdout.contains("persistent: "), "{}", f.stdout);
    no_finding("cwx", "builtin", 500, 3, &["--tier", "builtin"]);
}

#[test]
fn the_independent_server_shows_no_finding() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    no_finding(
        "agent-socket",
        &independent("agent-socket", ""),
        2000,
        11,
        &[],
    );
}

#[test]
fn the_independent_host_shows_no_finding() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    // The host exits on any payload that is not JSON, as its README says,
    // so about half the inputs start a Python host: a few hundred.
    no_finding("cwx", &independent("cwx", ""), 250, 11, &[]);
}

/// The bytes of a case's write steps.
fn written(case: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for step in case["steps"].as_array().unwrap() {
        match (step.get("raw"), step.get("rawHex")) {
            (Some(Value::String(t)), _) => out.extend_from_slice(t.as_bytes()),
            (_, Some(Value::String(h))) => out.extend(
                (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()),
            ),
            _ => {}
        }
    }
    out
}

/// Whether some `"id":` member of `bytes` is a number no binary64 holds.
fn id_past_binary64(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.match_indices("\"id\":").any(|(at, m)| {
        let token: String = text[at + m.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
            .collect();
        token.parse::<f64>().is_ok_and(|f| f.is_infinite())
    })
}

/// tests/independent/acp/agent.py has one real deviation conform fuzz
/// finds: an id past binary64 (`1e400`) it reads as Python's infinity and
/// writes back as `Infinity`, which is not JSON (RFC 8259 6: "Numeric values
/// that cannot be represented in the grammar below (such as Infinity and
/// NaN) are not permitted"; ACP: "The agent MUST NOT write anything to its
/// stdout that is not a valid ACP message"). The fixture is not ours to
/// change, so this test accepts that finding and no other: each one is
/// checked to be it (the schema-invalid id in the input, the finding's
/// typed key, a reproducer that fails the fixture and passes the builtin
/// agent), and fuzzing goes on with the next seed until 600 inputs ran.
#[test]
fn the_independent_agent_shows_no_finding_but_its_known_deviation() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let agent = independent("acp", "");
    let mut ran = 0;
    let mut seed = 21u64;
    while ran < 600 {
        let out = tempfile::tempdir().unwrap();
        let left = (600 - ran).to_string();
        let seed_s = seed.to_string();
        let args = [
            "--cases",
            &left,
            "--seed",
            &seed_s,
            "--timeout",
            "20",
            "--shrink-limit",
            "0",
        ];
        let f = fuzz("acp", &agent, out.path(), &args);
        ran += f.inputs();
        if f.stdout.contains("no findings") {
            assert_eq!(f.code, Some(0), "{}\n{}", f.stdout, f.stderr);
            assert!(f.states() >= 10, "{}", f.stdout);
            break;
        }
        assert_eq!(f.code, Some(1), "{}\n{}", f.stdout, f.stderr);
        assert_eq!(f.findings.len(), 1, "{}", f.stdout);
        let written_file: Value =
            serde_json::from_str(&std::fs::read_to_string(&f.findings[0]).unwrap()).unwrap();
        let p = &written_file["provenance"];
        assert_eq!(
            p["finding"],
            serde_json::json!({"requirement": "acp.transport.stdout-only-messages", "kind": "malformed"}),
            "only the known deviation: {}",
            f.stdout
        );
        let case = &written_file["cases"][0];
        assert!(id_past_binary64(&written(case)), "{case:#}");
        let id = case["id"].as_str().unwrap();
        assert_eq!(replay("acp", &agent, &f.findings[0], id, false).0, Some(1));
        assert_eq!(
            replay("acp", "builtin", &f.findings[0], id, false).0,
            Some(0)
        );
        seed += 1;
        assert!(seed < 40, "the known deviation on every seed");
    }
}

#[test]
fn the_regression_cases_pass_the_references_and_the_independent_fixtures() {
    for protocol in ["agent-socket", "acp", "cwx"] {
        let file = root().join(format!("tests/fuzz_regressions/{protocol}.json"));
        let mut targets = vec!["builtin".to_owned()];
        if python_available() {
            targets.push(independent(protocol, ""));
        }
        for target in targets {
            let (code, report) = replay(
                protocol,
                &target,
                &file,
                &format!("{protocol}/fuzz-regression/*"),
                true,
            );
            assert_eq!(code, Some(0), "{target}: {report:#}");
            assert!(
                report["summary"]["total"].as_u64().unwrap() >= 4,
                "{report:#}"
            );
            assert_eq!(report["summary"]["failed"], 0, "{report:#}");
        }
    }
}

/// What a broken target's finding must look like.
struct Expect {
    /// The finding fails the run (a MUST), or only warns (a SHOULD).
    fails: bool,
    /// It needs inputs before it on one target.
    after_others: bool,
}

/// Fuzzes a broken target until it is found, and checks the reproducer:
/// shrunk, with its provenance, failing the broken target again (under
/// `--strict` for a SHOULD) and passing the builtin reference and the
/// conformant fixtures.
fn finds_and_replays(
    protocol: &str,
    broken: &str,
    good: &[String],
    seed: &str,
    extra: &[&str],
    expect: Expect,
    check: impl Fn(&Value),
) {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    // A Python target on a loaded machine can take over 2 s to start.
    let mut args = vec!["--seed", seed, "-j", "8", "--timeout", "5"];
    args.extend(extra);
    for (option, value) in [("--cases", "5000"), ("--shrink-time", "40")] {
        if !extra.contains(&option) {
            args.extend([option, value]);
        }
    }
    let f = fuzz(protocol, broken, out.path(), &args);
    let (code, word) = if expect.fails {
        (1, "FAIL")
    } else {
        (0, "WARN")
    };
    assert_eq!(f.code, Some(code), "{broken}: {}\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains(&format!("{word} {protocol}/fuzz/")),
        "{}",
        f.stdout
    );
    if expect.fails {
        assert_eq!(f.findings.len(), 1, "one reproducer: {:?}", f.findings);
    }
    // The first finding's (a run that only warned goes on, and may write more).
    let read = |f: &PathBuf| -> Value {
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()
    };
    let file = f
        .findings
        .iter()
        .min_by_key(|f| read(f)["provenance"]["input"].as_u64())
        .unwrap_or_else(|| panic!("a reproducer: {}", f.stdout));
    let written = read(file);
    let p = &written["provenance"];
    assert_eq!(p["seed"], seed.parse::<u64>().unwrap(), "{p:#}");
    assert_eq!(p["target"], broken);
    assert_eq!(p["protocol"], protocol);
    assert!(
        p["finding"]["kind"].is_string(),
        "the finding it keeps: {p:#}"
    );
    assert!(p["replays_to_confirm"].as_u64().unwrap() >= 1, "{p:#}");
    let before = p["preceding_inputs"].as_array().unwrap();
    assert_eq!(!before.is_empty(), expect.after_others, "{p:#}");
    assert_eq!(p["reproduced_alone"], before.is_empty(), "{p:#}");
    let case = &written["cases"][0];
    check(case);
    let id = case["id"].as_str().unwrap();
    let strict = !expect.fails;
    assert_eq!(
        p["replay"].as_str().unwrap().ends_with(" --strict"),
        strict,
        "{p:#}"
    );
    let (code, report) = replay(protocol, broken, file, id, strict);
    assert_eq!(
        code,
        Some(1),
        "the reproducer fails the broken target: {report:#}"
    );
    assert_eq!(report["summary"]["total"], 1);
    for good in std::iter::once(&"builtin".to_owned()).chain(good) {
        let (code, report) = replay(protocol, good, file, id, strict);
        assert_eq!(code, Some(0), "{good} passes the reproducer: {report:#}");
        assert_eq!(report["summary"]["failed"], 0, "{report:#}");
    }
}

fn acp_fixture(args: &str) -> String {
    let path = root().join("tests/fixtures/acp_agent.py");
    format!("exec:python3 {} {args}", path.display())
}

fn cwx_fixture(args: &str) -> String {
    let path = root().join("tests/fixtures/cwx_host.py");
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

const ALONE: Expect = Expect {
    fails: true,
    after_others: false,
};

#[test]
fn a_server_that_dies_on_array_params_is_found_and_replayed() {
    finds_and_replays(
        "agent-socket",
        &fixture_target("--deviation die-on-array-params"),
        &[fixture_target("")],
        "3",
        &[],
        ALONE,
        |case| {
            // Shrunk to what matters: a request whose params are an array.
            let bytes = String::from_utf8_lossy(&first_bytes(case)).into_owned();
            assert!(bytes.contains(r#""params":["#), "{bytes}");
            assert!(bytes.len() < 400, "shrunk: {bytes}");
        },
    );
}

#[test]
fn an_independent_server_that_dies_on_a_malformed_line_is_found_and_replayed() {
    finds_and_replays(
        "agent-socket",
        &independent("agent-socket", "--deviation die-on-malformed"),
        &[independent("agent-socket", "")],
        "7",
        &[],
        ALONE,
        |case| {
            // Shrunk to a short line that is not JSON.
            let bytes = first_bytes(case);
            let line = bytes.split(|b| *b == b'\n').next().unwrap();
            assert!(serde_json::from_slice::<Value>(line).is_err(), "{case:#}");
            assert!(bytes.len() < 400, "shrunk: {case:#}");
        },
    );
}

#[test]
fn a_server_that_hangs_on_a_split_line_is_found_and_replayed() {
    finds_and_replays(
        "agent-socket",
        &fixture_target("--deviation hang-on-split-line"),
        &[fixture_target("")],
        "4",
        &[],
        ALONE,
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
    finds_and_replays(
        "acp",
        &acp_fixture("--deviation die-on-big-id"),
        &[acp_fixture("")],
        "5",
        &[],
        ALONE,
        |case| {
            // A well-formed request, so its survival is a MUST.
            assert_eq!(case["level"], "MUST", "{case:#}");
        },
    );
}

/// The independent agent's `exit_on_parse_error` answers a line that is not
/// JSON, then exits: found on a live agent after its handshake. Serving on
/// after such a line is a MUST (JSON-RPC: "the Server MUST reply with a
/// Response" to every later request), so the finding fails the run and the
/// reproducer fails the agent.
#[test]
fn an_independent_agent_that_exits_after_a_parse_error_is_found_and_replayed() {
    finds_and_replays(
        "acp",
        &independent("acp", "--deviation exit_on_parse_error"),
        &[independent("acp", "")],
        "8",
        &["--cases", "200"],
        Expect {
            fails: true,
            after_others: false,
        },
        |case| {
            assert_eq!(case["level"], "MUST", "{case:#}");
            assert_eq!(
                case["config"]["setup"], "initialize",
                "after the handshake: {case:#}"
            );
        },
    );
}

/// tests/fixtures/acp_counting_agent.py dies at its fifth `session/...`
/// request after `initialize`: more than one input carries. Found on a live
/// agent; the reproducer keeps the inputs before it that it needs.
#[test]
fn an_agent_that_dies_after_a_run_of_inputs_is_found_with_the_inputs_it_needs() {
    let agent = format!(
        "exec:python3 {}",
        root()
            .join("tests/fixtures/acp_counting_agent.py")
            .display()
    );
    finds_and_replays(
        "acp",
        &agent,
        &[],
        "5",
        &["--shrink-time", "20"],
        Expect {
            fails: true,
            after_others: true,
        },
        |case| {
            let steps = case["steps"].as_array().unwrap();
            assert!(steps.len() >= 4, "two inputs at least: {case:#}");
            assert!(
                case["title"].as_str().unwrap().contains("on one target"),
                "{case:#}"
            );
        },
    );
}

#[test]
fn a_host_that_dies_on_a_large_id_is_found_and_replayed() {
    finds_and_replays(
        "cwx",
        &cwx_fixture("--deviation die-on-large-id"),
        &[cwx_fixture(""), independent("cwx", "")],
        "5",
        &[],
        ALONE,
        |case| {
            let bytes = first_bytes(case);
            let text = String::from_utf8_lossy(&bytes[8..]).into_owned();
            assert!(text.contains(r#""id":"#), "{text}");
        },
    );
}

#[test]
fn zero_inputs_is_a_usage_error() {
    let out = tempfile::tempdir().unwrap();
    let f = fuzz("agent-socket", "builtin", out.path(), &["--cases", "0"]);
    assert_eq!(f.code, Some(2));
    assert!(f.stderr.contains("zero inputs"), "{}", f.stderr);
}
