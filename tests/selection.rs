//! Selecting and waiving for CI: `--shard K/N` covers every case exactly
//! once; `--dry-run` runs nothing; `--expected-failures` waives listed
//! failures, fails on unlisted ones and on stale entries.

mod support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::{conform, fixture_target, python_available};

fn listed(protocol: &str, extra: &[&str]) -> Vec<String> {
    let out = conform()
        .args(["list", "--protocol", protocol, "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let items: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    items
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn shards_cover_every_case_exactly_once() {
    for protocol in ["agent-socket", "acp", "cwx"] {
        let all = listed(protocol, &[]);
        for n in [1, 2, 3, 7] {
            let mut seen: Vec<String> = Vec::new();
            let mut sizes = Vec::new();
            for k in 1..=n {
                let shard = listed(protocol, &["--shard", &format!("{k}/{n}")]);
                sizes.push(shard.len());
                seen.extend(shard);
            }
            let unique: BTreeSet<&String> = seen.iter().collect();
            assert_eq!(
                unique.len(),
                seen.len(),
                "{protocol} {n}: a case in two shards"
            );
            assert_eq!(
                unique,
                all.iter().collect::<BTreeSet<_>>(),
                "{protocol} {n}: the shards together are the suite"
            );
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{protocol} {n}: balanced, {sizes:?}");
        }
    }
}

#[test]
fn a_bad_shard_is_a_usage_error() {
    for bad in ["0/3", "4/3", "1/0", "x/2", "3"] {
        let out = conform()
            .args(["list", "--protocol", "acp", "--shard", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

#[test]
fn a_dry_run_lists_the_selection_and_starts_nothing() {
    // A target that cannot start would be exit 2 if conform tried.
    let out = conform()
        .args([
            "run",
            "--protocol",
            "agent-socket",
            "--target",
            "exec:exit 7",
            "--dry-run",
            "--filter",
            "agent-socket/handshake/",
            "--shard",
            "1/2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let want = listed(
        "agent-socket",
        &["--filter", "agent-socket/handshake/", "--shard", "1/2"],
    );
    for id in &want {
        assert!(text.contains(id.as_str()), "{id} in {text}");
    }
    assert!(text.contains(&format!("{} cases", want.len())), "{text}");
}

fn run_with_baseline(target: &str, filter: &str, entries: Value) -> (Option<i32>, Value, String) {
    run_targets_with_baseline(&[target], filter, entries)
}

fn run_targets_with_baseline(
    targets: &[&str],
    filter: &str,
    entries: Value,
) -> (Option<i32>, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("expected.json");
    std::fs::write(&file, json!({"expected_failures": entries}).to_string()).unwrap();
    let out = conform()
        .args(["run", "--protocol", "agent-socket", "--format", "json"])
        .args(targets.iter().flat_map(|t| ["--target", t]))
        .args(["--filter", filter, "--expected-failures"])
        .arg(&file)
        .output()
        .unwrap();
    let report = support::report_from(&out.stdout);
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The cases the `wrong-id` fixture fails among the framing cases (every
/// reply: JSON-RPC's id MUST, docs/levels.md).
const WRONG_ID_FAILS: &[&str] = &[
    "agent-socket/framing/error-envelope",
    "agent-socket/framing/string-id",
    "agent-socket/framing/handshake-envelope",
    "agent-socket/framing/execute-envelope",
    "agent-socket/framing/read-file-envelope",
    "agent-socket/framing/tools-call-envelope",
];

fn entries(ids: &[&str]) -> Value {
    json!(
        ids.iter()
            .map(|id| json!({"id": id, "reason": "ids are off by one until 1.2"}))
            .collect::<Vec<_>>()
    )
}

#[test]
fn listed_failures_do_not_fail_the_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let target = fixture_target("--deviation wrong-id");
    let (code, report, stderr) =
        run_with_baseline(&target, "agent-socket/framing/", entries(WRONG_ID_FAILS));
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(report["summary"]["failed"], WRONG_ID_FAILS.len());
    assert_eq!(report["summary"]["waived"], WRONG_ID_FAILS.len());
    for id in WRONG_ID_FAILS {
        assert_eq!(report["waivers"][id], "ids are off by one until 1.2");
    }
}

#[test]
fn an_unlisted_failure_fails_the_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let target = fixture_target("--deviation wrong-id");
    let (code, report, stderr) = run_with_baseline(
        &target,
        "agent-socket/framing/",
        entries(&WRONG_ID_FAILS[1..]),
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(report["summary"]["waived"], WRONG_ID_FAILS.len() - 1);
    assert!(report["waivers"].get(WRONG_ID_FAILS[0]).is_none());
}

#[test]
fn a_listed_case_that_passes_is_stale_and_fails_the_run() {
    let (code, report, stderr) = run_with_baseline(
        "builtin",
        "agent-socket/framing/compact",
        entries(&["agent-socket/framing/compact"]),
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(report["summary"]["failed"], 0);
    assert_eq!(report["summary"]["stale"], 1);
    assert_eq!(report["stale"], json!(["agent-socket/framing/compact"]));
}

#[test]
fn a_baseline_naming_no_case_or_without_a_reason_is_a_usage_error() {
    for bad in [
        json!([{"id": "agent-socket/no-such-case", "reason": "typo"}]),
        json!([{"id": "agent-socket/framing/compact", "reason": " "}]),
        json!([{"id": "agent-socket/framing/compact"}]),
        json!([{"requirement": "as.no-such-requirement", "reason": "typo"}]),
        // A SHOULD cannot leave a run incomplete: nothing to waive.
        json!([{"requirement": "as.framing.compact", "reason": "not a MUST"}]),
        json!([{"id": "agent-socket/framing/compact", "requirement": "as.init.version",
            "reason": "one or the other"}]),
    ] {
        let (code, _, stderr) = run_with_baseline("builtin", "agent-socket/framing/", bad.clone());
        assert_eq!(code, Some(2), "{bad}: {stderr}");
    }
}

#[test]
fn transcripts_are_written_for_every_case_with_secrets_redacted() {
    let secret = "conform-s3cret-value-0987";
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("echo.json");
    std::fs::write(
        &case,
        json!({"cases": [{
            "id": "agent-socket/local/echo-secret",
            "title": "The sandbox echoes a value of the environment",
            "level": "MUST",
            "requirements": ["as.exec.result"],
            "needs": ["sandbox"],
            "steps": [{"send": {"method": "sandbox/execute", "params": {
                "command": "printf '%s Bearer abcdefghijklmnopqrstu' \"$CONFORM_TEST_API_KEY\"",
                "cwd": "${workspace}", "timeout": 30}},
                "expect": {"reply": "result"}}]
        }]})
        .to_string(),
    )
    .unwrap();
    let transcripts = dir.path().join("transcripts");
    let out = conform()
        .env("CONFORM_TEST_API_KEY", secret)
        .args([
            "run",
            "--protocol",
            "agent-socket",
            "--format",
            "json",
            "--case",
        ])
        .arg(&case)
        .args([
            "--filter",
            "agent-socket/local/,agent-socket/handshake/version",
        ])
        .arg("--transcripts")
        .arg(&transcripts)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(secret));
    let mut names: Vec<String> = std::fs::read_dir(&transcripts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "agent-socket.handshake.version-answer.json",
            "agent-socket.handshake.version.json",
            "agent-socket.local.echo-secret.json"
        ]
    );
    let text =
        std::fs::read_to_string(transcripts.join("agent-socket.local.echo-secret.json")).unwrap();
    assert!(!text.contains(secret), "{text}");
    assert!(!text.contains("abcdefghijklmnopqrstu"), "{text}");
    assert!(text.contains("[redacted:CONFORM_TEST_API_KEY]"), "{text}");
    let written: Value = serde_json::from_str(&text).unwrap();
    let dirs: Vec<&str> = written["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["dir"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, ["sent", "received"], "{written:#}");
    assert_eq!(written["outcome"], "pass");
}

fn certify(target: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    certify_protocol("agent-socket", target, extra)
}

fn certify_protocol(protocol: &str, target: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = conform()
        .args([
            "run",
            "--protocol",
            protocol,
            "--target",
            target,
            "--format",
            "json",
        ])
        .args(extra)
        .arg("--certify")
        .arg(dir.path())
        .output()
        .unwrap();
    let bundle = support::bundle_from(
        &std::fs::read_to_string(dir.path().join("certification.json")).unwrap(),
    );
    let md = std::fs::read_to_string(dir.path().join("certification.md")).unwrap();
    (out.status.code(), bundle, md)
}

#[test]
fn the_reference_server_is_certified_with_every_requirement_and_the_corpus_digest() {
    let (code, b, md) = certify("builtin", &[]);
    assert_eq!(code, Some(0));
    assert_eq!(b["verdict"], "conformant", "{:#}", b["reasons"]);
    let digest = b["corpus_sha256"].as_str().unwrap();
    assert!(digest.len() == 64 && digest.bytes().all(|c| c.is_ascii_hexdigit()));
    let reqs = b["requirements"].as_array().unwrap();
    let catalogue: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/corpus/agent-socket/requirements.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let server = catalogue["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["role"] == "server")
        .count();
    assert_eq!(reqs.len(), server, "every requirement of the role");
    for r in reqs {
        let v = r["verdict"].as_str().unwrap();
        assert!(["pass", "info", "no-case"].contains(&v), "{}: {v}", r["id"]);
    }
    assert!(md.contains("**Verdict: conformant**"), "{md}");
}

#[test]
fn a_broken_or_partial_run_is_not_conformant_and_says_why() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let (code, b, md) = certify(
        &fixture_target("--deviation wrong-id"),
        &["--filter", "agent-socket/framing/"],
    );
    assert_eq!(code, Some(1));
    assert_eq!(b["verdict"], "not conformant");
    let reasons = b["reasons"].to_string();
    assert!(reasons.contains("only part of the suite"), "{reasons}");
    assert!(reasons.contains("the run failed"), "{reasons}");
    let id = b["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "as.jsonrpc.id")
        .unwrap();
    assert_eq!(id["verdict"], "fail");
    assert!(
        id["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["outcome"] == "fail")
    );
    assert!(md.contains("not conformant because"), "{md}");
}

fn requirement<'a>(bundle: &'a Value, id: &str) -> &'a Value {
    bundle["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{id} in the bundle"))
}

#[test]
fn musts_whose_cases_were_all_skipped_outside_the_declaration_are_not_a_pass() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    // An agent without credentials: session/new answers auth_required, so
    // every case that needs a session is skipped. Nothing failed, yet the
    // MUSTs only those cases check were never tested: the run is not a pass.
    let target = format!(
        "exec:python3 {}/tests/fixtures/acp_agent.py --variant needs-auth",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, b, md) = certify_protocol("acp", &target, &[]);
    assert_eq!(code, Some(3), "incomplete: not a pass, not a failure");
    assert_eq!(b["verdict"], "not conformant");
    assert_eq!(b["summary"]["failed"], 0);
    assert!(b["summary"]["unexercised"].as_u64().unwrap() > 0, "{b:#}");
    assert_eq!(
        requirement(&b, "acp.prompt.respond-stop-reason")["verdict"],
        "not-exercised"
    );
    // Checked on every line of every case, and cases that need no session ran.
    assert_eq!(
        requirement(&b, "acp.jsonrpc.envelope")["verdict"],
        "watched"
    );
    assert!(md.contains("not exercised"), "{md}");
    let out = conform()
        .args([
            "run",
            "--protocol",
            "acp",
            "--target",
            &target,
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let report = support::report_from(&out.stdout);
    let unexercised: Vec<&str> = report["unexercised"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["requirement"].as_str().unwrap())
        .collect();
    assert!(
        unexercised.contains(&"acp.prompt.respond-stop-reason"),
        "{unexercised:?}"
    );
    assert!(!unexercised.contains(&"acp.jsonrpc.envelope"));
    // Skipped for want of credentials: outside; for a capability the agent
    // does not advertise (authMethods here): declared.
    for c in report["cases"].as_array().unwrap() {
        if c["outcome"] == "skip" {
            let outside = c["message"]
                .as_str()
                .unwrap()
                .contains("requires authentication");
            let kind = if outside { "outside" } else { "declared" };
            assert_eq!(c["skip_kind"], kind, "{c:#}");
        }
    }
    // The same agent, but it offers a login in authMethods and refuses an
    // unauthenticated session with -32603 of its own (claude-code-acp does):
    // the sources define -32000 for it without requiring it, so this is read
    // as authentication needed too, not as a failed session/new.
    let target = format!(
        "exec:python3 {}/tests/fixtures/acp_agent.py --variant needs-login",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, b, _) = certify_protocol("acp", &target, &[]);
    assert_eq!(code, Some(3), "{b:#}");
    assert_eq!(b["summary"]["failed"], 0, "{b:#}");
    let session = requirement(&b, "acp.session.unique-session-id");
    assert_eq!(session["verdict"], "not-exercised", "{session:#}");
    assert!(
        session.to_string().contains("offers authMethods"),
        "{session:#}"
    );
}

#[test]
fn musts_the_target_declared_out_are_not_applicable_not_unexercised() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    // A tools-only server declares no sandbox: the sandbox cases do not
    // apply, which is neither a failure nor a gap.
    let (code, b, _) = certify(&fixture_target("--variant tools-only"), &[]);
    assert_eq!(code, Some(0), "{b:#}");
    assert_eq!(b["summary"].get("unexercised"), None, "{b:#}");
    assert_eq!(
        requirement(&b, "as.exec.result")["verdict"],
        "not-applicable"
    );
    assert_eq!(b["verdict"], "conformant", "{:#}", b["reasons"]);
    let evidence = &requirement(&b, "as.exec.result")["evidence"];
    assert!(
        evidence
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["outcome"] == "skip")
    );
}

#[test]
fn a_baseline_entry_can_name_its_target_in_a_matrix() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let broken = fixture_target("--deviation wrong-id");
    let targets = ["builtin", broken.as_str()];
    let for_broken: Vec<Value> = WRONG_ID_FAILS
        .iter()
        .map(|id| json!({"id": id, "reason": "off by one", "target": broken}))
        .collect();
    let listed = for_broken.clone();
    // Waived on the broken target only: the matrix passes.
    let (code, m, stderr) =
        run_targets_with_baseline(&targets, "agent-socket/framing/", json!(listed));
    assert_eq!(code, Some(0), "{stderr}\n{m:#}");
    // Every case the wrong id fails is waived.
    assert_eq!(m["runs"][1]["summary"]["waived"], WRONG_ID_FAILS.len());
    assert_eq!(m["runs"][0]["summary"].get("stale"), None);
    // The same entries for every target: the builtin passes them, stale.
    let (code, m, _) =
        run_targets_with_baseline(&targets, "agent-socket/framing/", entries(WRONG_ID_FAILS));
    assert_eq!(code, Some(1));
    assert_eq!(m["runs"][0]["summary"]["stale"], WRONG_ID_FAILS.len());
    // A target the run does not test is a usage error.
    let (code, _, stderr) = run_targets_with_baseline(
        &targets,
        "agent-socket/framing/",
        json!([{"id": WRONG_ID_FAILS[0], "reason": "x", "target": "exec:other"}]),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("does not test"), "{stderr}");
}
