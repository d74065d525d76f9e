//! Test support: run conform against the fixture server and compare.
#![allow(dead_code)]

use conform::report::schema::Document;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

pub fn conform() -> Command {
    Command::new(env!("CARGO_BIN_EXE_conform"))
}

/// `conform run --protocol agent-socket` with `args`, run to its end.
pub fn run_agent_socket(args: &[&str]) -> std::process::Output {
    conform()
        .args(["run", "--protocol", "agent-socket"])
        .args(args)
        .output()
        .expect("conform runs")
}

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_socket_server.py")
}

pub fn python_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The exec: target for the fixture with `args`.
pub fn fixture_target(args: &str) -> String {
    format!(
        "exec:python3 {} --listen {{socket}} {args}",
        fixture().display()
    )
}

/// One double and the outcome it must get.
pub struct Double {
    pub name: String,
    pub protocol: &'static str,
    /// The `--target` value.
    pub target: String,
    /// More arguments for `conform run` (a `--filter`).
    pub extra: Vec<String>,
    pub fail: BTreeSet<String>,
    pub warn: BTreeSet<String>,
    /// How many cases must be skipped, when it matters.
    pub skipped: Option<usize>,
}

/// Runs conform with JSON output; returns (exit code, report).
pub fn run_json(target: &str, extra: &[&str]) -> (i32, Value, String) {
    run_protocol_json("agent-socket", target, extra)
}

/// `conform run --protocol <protocol>` with JSON output; returns (exit code, report).
pub fn run_protocol_json(protocol: &str, target: &str, extra: &[&str]) -> (i32, Value, String) {
    run_protocol_json_env(protocol, target, extra, &[])
}

/// [`run_protocol_json`] with `env` added to conform's environment.
pub fn run_protocol_json_env(
    protocol: &str,
    target: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, Value, String) {
    let out = conform()
        .args([
            "run",
            "--protocol",
            protocol,
            "--format",
            "json",
            "--target",
            target,
        ])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .expect("conform runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = report_from(&out.stdout);
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// Every way `doc` breaks the schema of `document` (empty when it holds):
/// the contract of conform's JSON output (`schemas/`).
pub fn schema_violations(document: Document, doc: &Value) -> Vec<String> {
    document.violations(doc)
}

/// A `--format json` report read from `bytes`, checked against the report
/// schema (a report that breaks it fails the test); `Null` when `bytes`
/// hold no JSON (a run that wrote no report).
pub fn report_from(bytes: &[u8]) -> Value {
    let report: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if !report.is_null() {
        let broken = schema_violations(Document::Report, &report);
        assert!(
            broken.is_empty(),
            "the report breaks schemas/report.schema.json:\n{}",
            broken.join("\n")
        );
    }
    report
}

/// The verdict of each requirement in the certification bundle `conform
/// run --certify DIR` wrote, the bundle checked against its schema.
pub fn verdicts(dir: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("certification.json")).expect("a bundle");
    bundle_from(&text)["requirements"]
        .as_array()
        .expect("requirements")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap_or("?").to_owned(),
                r["verdict"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

/// The requirements a certification bundle in `dir` fails.
pub fn failed_requirements(dir: &std::path::Path) -> BTreeSet<String> {
    verdicts(dir)
        .into_iter()
        .filter(|(_, v)| v == "fail")
        .map(|(id, _)| id)
        .collect()
}

/// A certification bundle read from `text`, checked against its schema.
pub fn bundle_from(text: &str) -> Value {
    let bundle: Value = serde_json::from_str(text).expect("certification.json is JSON");
    let broken = schema_violations(Document::Certification, &bundle);
    assert!(
        broken.is_empty(),
        "certification.json breaks schemas/certification.schema.json:\n{}",
        broken.join("\n")
    );
    bundle
}

pub fn outcome_ids(report: &Value, outcome: &str) -> BTreeSet<String> {
    report["cases"]
        .as_array()
        .map(|cases| {
            cases
                .iter()
                .filter(|c| c["outcome"] == outcome)
                .filter_map(|c| c["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs every double, a few at a time, and returns what did not match and
/// each double's report.
pub fn run_doubles(doubles: &[Double]) -> (Vec<String>, Vec<(String, Value)>) {
    let problems = Arc::new(Mutex::new(Vec::new()));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let next = Arc::new(Mutex::new(0usize));
    std::thread::scope(|scope| {
        for _ in 0..6 {
            let problems = problems.clone();
            let reports = reports.clone();
            let next = next.clone();
            scope.spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(d) = doubles.get(i) else { break };
                    let (problem, report) = check(d);
                    if let Some(p) = problem {
                        problems.lock().unwrap().push(p);
                    }
                    reports.lock().unwrap().push((d.name.clone(), report));
                }
            });
        }
    });
    let mut out = problems.lock().unwrap().clone();
    out.sort();
    let mut reports = reports.lock().unwrap().clone();
    reports.sort_by(|a, b| a.0.cmp(&b.0));
    (out, reports)
}

fn check(d: &Double) -> (Option<String>, Value) {
    let extra: Vec<&str> = d.extra.iter().map(String::as_str).collect();
    let (code, report, stderr) = run_protocol_json(d.protocol, &d.target, &extra);
    let failed = outcome_ids(&report, "fail");
    let warned = outcome_ids(&report, "warn");
    let errors = outcome_ids(&report, "error");
    let skipped = outcome_ids(&report, "skip");
    let expected_code = if d.fail.is_empty() { 0 } else { 1 };
    let mut why = Vec::new();
    if code != expected_code {
        why.push(format!("exit {code}, expected {expected_code}"));
    }
    if failed != d.fail {
        why.push(format!(
            "failed: unexpected {:?}, missing {:?}",
            failed.difference(&d.fail).collect::<Vec<_>>(),
            d.fail.difference(&failed).collect::<Vec<_>>()
        ));
    }
    if warned != d.warn {
        why.push(format!(
            "warned: unexpected {:?}, missing {:?}",
            warned.difference(&d.warn).collect::<Vec<_>>(),
            d.warn.difference(&warned).collect::<Vec<_>>()
        ));
    }
    if !errors.is_empty() {
        why.push(format!("conform errors: {errors:?}"));
    }
    if let Some(n) = d.skipped
        && skipped.len() != n
    {
        why.push(format!(
            "{} skipped, expected {n}: {skipped:?}",
            skipped.len()
        ));
    }
    let problem = if why.is_empty() {
        None
    } else {
        Some(format!("{}: {}\nstderr: {stderr}", d.name, why.join("; ")))
    };
    (problem, report)
}

/// The outcome of every case, one per line, with the message of anything
/// but a pass: what a reviewer reads in a snapshot.
pub fn outcome_text(report: &Value) -> String {
    let mut out = String::new();
    for c in report["cases"].as_array().into_iter().flatten() {
        let outcome = c["outcome"].as_str().unwrap_or("?");
        out.push_str(&format!(
            "{outcome:<5} {}\n",
            c["id"].as_str().unwrap_or("?")
        ));
        if outcome != "pass" {
            for line in c["message"].as_str().unwrap_or("").lines() {
                out.push_str(&format!("      {line}\n"));
            }
        }
    }
    out.push_str(&format!("summary: {}\n", report["summary"]));
    out
}

/// Snapshots a report in `snapshots/`, with what varies from run to run
/// (temporary paths, process ids, the interpreter's path, sizes that follow
/// from them) redacted.
pub fn snapshot_report(name: &str, report: &Value) {
    report_settings().bind(|| insta::assert_snapshot!(name, outcome_text(report)));
}

/// Snapshots a whole rendered report, with what varies from run to run
/// (times, durations, the fixture's path) redacted.
#[allow(dead_code)]
pub fn snapshot_rendered(name: &str, text: &str) {
    let mut settings = report_settings();
    settings.add_filter(
        r"exec:python3 \S+/agent_socket_server\.py",
        "exec:python3 [fixture]",
    );
    settings.add_filter(
        r"exec:python3 \S+/tests/fixtures/(\w+\.py)",
        "exec:python3 [fixtures]/$1",
    );
    settings.add_filter(r#"time="[0-9.]+""#, r#"time="[s]""#);
    settings.add_filter(
        r#"\\"python\\":\\"[^\\"]*\\""#,
        r#"\"python\":\"[python]\""#,
    );
    settings.add_filter(
        r#"&quot;python&quot;:&quot;.*?&quot;"#,
        "&quot;python&quot;:&quot;[python]&quot;",
    );
    settings.add_filter(r#""(duration_ms|t_ms)": \d+"#, r#""$1": [ms]"#);
    settings.add_filter(r"\(\d+ ms\)", "([ms])");
    // Right-aligned times: the padding depends on the digits.
    settings.add_filter(r"(?m)(^|<pre>) *\d+ ms ", "$1   [ms] ");
    settings.add_filter(r"\d+(\.\d+)?s\b", "[s]");
    settings.bind(|| insta::assert_snapshot!(name, text));
}

/// Snapshots a `--role client` report: its times vary too ("after 0.3 s").
pub fn snapshot_client_report(name: &str, report: &Value) {
    let mut settings = report_settings();
    // A cwx core that keeps its host after a broken frame: how much it did
    // before conform's deadline, and whether it then ended, is scheduling.
    settings.add_filter(
        r"the core did not end the host: it was still running|after the host's broken frame the core went on sending: [^\n]*",
        "the core did not end the host [what it did then]",
    );
    settings.add_filter(
        r"(the core did not end the host \[what it did then\]\n\s*)What the core did: [^\n]*",
        "${1}What the core did: [timing]",
    );
    settings.add_filter(r"\b\d+\.\d s\b", "[t] s");
    settings.add_filter(r"\b\d+ ms after\b", "[ms] ms after");
    settings.bind(|| insta::assert_snapshot!(name, outcome_text(report)));
}

fn report_settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.add_filter(r#""python":"[^"]*""#, r#""python":"[python]""#);
    // Per-case tokens are `<slug>-<pid>-<n>`; request ids depend on scheduling.
    settings.add_filter(
        r"(\.conform-|call-|client_tool:|conform-id-)[a-z0-9-]*?-\d+-\d+",
        "$1[uniq]",
    );
    // The redactions keep a JSON report JSON: they never take a quote or the
    // backslash of an escape (tests/report_schema.rs reads the snapshots).
    settings.add_filter(
        r#"`id` is (\S+?)x?, the request's was (\\"[^"\\]*\\"|"[^"]*"|[^\s"\\]+)"#,
        "`id` is [other], the request's was [id]",
    );
    settings.add_filter(r#"(/tmp|/var/tmp)/[^\s"',\\]+"#, "[tmp]");
    settings.add_filter(r"\(\d+ bytes\)", "(N bytes)");
    // ACP: session ids of the fixture, the reference and the SDK agent; the
    // fixture's stderr log lines.
    settings.add_filter(r"sess-[0-9a-f]{32}", "sess-[id]");
    settings.add_filter(r"sess_[0-9a-f]{32}", "sess_[id]");
    // How many agent processes a run starts depends on which shared one is
    // idle when a case needs it: on scheduling.
    settings.add_filter(
        r"the run started \d+ agent process\(es\)(, \d+ of them to rerun a case[^\n<\x22]*)?",
        "the run started [n] agent process(es)",
    );
    // A directory read as a file: its listing names the cases' scratch
    // files, which depend on which cases ran before.
    settings.add_filter(
        r#"contentBase64: expected null, got "[A-Za-z0-9+/=]*""#,
        r#"contentBase64: expected null, got "[listing]""#,
    );
    // conform's own path, in the MCP server it hands an agent: where the
    // checkout is (a message cut short shows more or less of it).
    settings.add_filter(r#""command":"[^"\n]*…"#, r#""command":"[conform]…"#);
    // How long a liveness probe or a late answer took is the machine's.
    settings.add_filter(
        r"(answered [^\n]*? in |was answered after )\d+(\.\d+)?s",
        "$1[t]s",
    );
    // A server that stops a command early stops it when its scheduler says.
    settings.add_filter(
        r"came \d+\.\d+s after the request",
        "came [t]s after the request",
    );
    // Commands that must not exist are named after the process and case.
    settings.add_filter(r"(conform-no-such-command-[a-z-]+?)-\d+-\d+", "$1-[uniq]");
    // Which shared process served a case is scheduling too.
    settings.add_filter(r"the shared process #\d+", "the shared process #[n]");
    settings.add_filter(r"(ref|sdk)-\d+-\d+", "$1-[id]");
    settings.add_filter(r"acp-fixture: [^\n]*", "acp-fixture: [log]");
    // How much the agent logged before it died depends on timing.
    settings.add_filter(
        r"(?:( *)acp-fixture: \[log\]\n)+",
        "${1}acp-fixture: [log lines]\n",
    );
    // A dying target refuses or resets a connection depending on timing.
    settings.add_filter(
        r"(cannot connect to \[tmp\] )?[A-Z][a-z ]+ \(os error \d+\)",
        "[connection failed]",
    );
    settings
}
