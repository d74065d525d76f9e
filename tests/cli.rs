//! The command line: exit codes, the builtin target, list, --case, --strict,
//! and nothing left behind.

mod support;

use support::{
    conform, fixture_target, outcome_ids, python_available, run_agent_socket, run_json,
    snapshot_rendered, snapshot_report,
};

#[test]
fn the_builtin_server_passes_every_case() {
    let (code, report, stderr) = run_json("builtin", &[]);
    assert_eq!(code, 0, "{stderr}");
    let s = &report["summary"];
    assert_eq!(s["failed"], 0, "{report:#}");
    assert_eq!(s["warned"], 0, "{report:#}");
    assert_eq!(s["errors"], 0);
    assert_eq!(s["skipped"], 0, "the reference serves both halves");
    assert!(s["passed"].as_u64().unwrap() >= 40);
    for key in [
        "protocol",
        "role",
        "target",
        "conform_version",
        "summary",
        "cases",
    ] {
        assert!(report.get(key).is_some(), "the JSON report has {key}");
    }
    snapshot_report("agent_socket_builtin", &report);
}

#[test]
fn list_prints_every_case_with_level_and_requirement() {
    let out = conform()
        .args(["list", "--protocol", "agent-socket"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MUST   agent-socket/sandbox/execute/timeout"));
    assert!(text.contains("as.exec.timeout [MUST server]"));
    assert!(text.contains(
        "A request that outlives its timeout is answered with the JSON-RPC error code -32001."
    ));
}

#[test]
fn zero_selected_cases_is_exit_2_not_a_green_run() {
    let out = run_agent_socket(&["--filter", "no-such-case/*"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no case selected"));
}

/// Issue 27: a suite owns its options. One another suite reads (`--tier`
/// on an ACP run, `--prompts` on cwx, `--isolate` on agent-socket) was
/// accepted and ignored; it is a usage error, and nothing runs.
#[test]
fn an_option_of_another_suite_is_exit_2() {
    for (args, flag) in [
        (
            &["run", "--protocol", "acp", "--tier", "builtin"][..],
            "--tier",
        ),
        (
            &["run", "--protocol", "acp", "--extension", "x.json#00"],
            "--extension",
        ),
        (
            &["run", "--protocol", "cwx", "--prompts", "/nonexistent.json"],
            "--prompts",
        ),
        (
            &["run", "--protocol", "agent-socket", "--isolate"],
            "--isolate",
        ),
        (
            &["run", "--protocol", "acp", "--role", "client", "--isolate"],
            "--isolate",
        ),
        (
            &[
                "run",
                "--protocol",
                "cwx",
                "--role",
                "core",
                "--tier",
                "plugin",
            ],
            "--tier",
        ),
        (
            &[
                "fuzz",
                "--protocol",
                "acp",
                "--tier",
                "plugin",
                "--cases",
                "1",
            ],
            "--tier",
        ),
        (
            &["reference", "--protocol", "acp", "--tier", "plugin"],
            "--tier",
        ),
    ] {
        let out = conform().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} is not an option of the")),
            "{args:?}: {stderr}"
        );
    }
    // The suite that owns it takes it.
    let out = conform()
        .args(["run", "--protocol", "cwx", "--tier", "builtin", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_target_that_cannot_start_or_be_reached_is_exit_2() {
    for target in [
        "exec:exit 7",
        "unix:/nonexistent/conform.sock",
        "tcp:nothing",
    ] {
        let out = run_agent_socket(&["--target", target]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run_agent_socket(&["--target", "exec:echo starting >&2; exit 7"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exited with status 7") && stderr.contains("starting"),
        "{stderr}"
    );
}

#[test]
fn a_role_or_protocol_without_a_suite_yet_is_exit_2() {
    for args in [
        ["--protocol", "agent-socket", "--role", "nope"],
        ["--protocol", "cwx", "--role", "client"],
    ] {
        let out = conform().arg("run").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_case_file_adds_cases_and_a_wrong_expectation_fails_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("extra.json");
    std::fs::write(
        &file,
        r#"{"id":"local/exit-four","title":"exit 3 is not exit 4","level":"MUST","requirements":["as.exec.nonzero"],"needs":["sandbox"],
            "steps":[{"send":{"method":"sandbox/execute","params":{"command":"exit 3","cwd":"${workspace}","timeout":10}},"expect":{"result":{"exitCode":4}}}]}"#,
    )
    .unwrap();
    let (code, report, _) = run_json(
        "builtin",
        &["--case", file.to_str().unwrap(), "--filter", "local/"],
    );
    assert_eq!(code, 1);
    let failed = outcome_ids(&report, "fail");
    assert_eq!(
        failed.into_iter().collect::<Vec<_>>(),
        vec!["local/exit-four"]
    );
    let message = report["cases"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("result.exitCode: expected 4, got 3"),
        "{message}"
    );
}

#[test]
fn a_bad_case_file_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    for body in [
        r#"{"id":"x","title":"t","level":"MUST","requirements":["as.exec.nonzero"],"steps":[{"sned":{}}]}"#,
        r#"{"id":"x","title":"t","level":"MUST","requirements":["no.such.requirement"],"steps":[]}"#,
        "not json",
    ] {
        std::fs::write(&file, body).unwrap();
        let out = run_agent_socket(&["--case", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{body}");
    }
}

#[test]
fn strict_makes_a_broken_should_fail_the_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not on PATH");
        return;
    }
    let target = fixture_target("--deviation spaced-json");
    let (code, _, _) = run_json(&target, &["--filter", "agent-socket/framing/compact"]);
    assert_eq!(code, 0, "a SHOULD is a warning");
    let (code, report, _) = run_json(
        &target,
        &["--filter", "agent-socket/framing/compact", "--strict"],
    );
    assert_eq!(code, 1);
    assert_eq!(outcome_ids(&report, "fail").len(), 1);
}

#[test]
fn every_format_renders_and_output_writes_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["human", "json", "junit", "markdown"] {
        let path = dir.path().join(format!("report.{format}"));
        let out = run_agent_socket(&[
            "--filter",
            "agent-socket/handshake/",
            "--format",
            format,
            "--output",
            path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{format}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("agent-socket/handshake/version"),
            "{format}: {text}"
        );
        if format == "json" {
            assert_eq!(support::report_from(text.as_bytes())["schema_version"], 1);
        }
    }
}

/// Processes whose environment carries `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(env) = std::fs::read(entry.path().join("environ"))
            && env.windows(marker.len()).any(|w| w == marker.as_bytes())
        {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[test]
fn a_spawned_target_and_its_children_are_gone_after_the_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not on PATH");
        return;
    }
    let marker = format!("CONFORM_TEST_MARKER_{}", std::process::id());
    // The target leaves a grandchild holding its pipes, and ignores SIGTERM.
    let target = format!(
        "exec:{marker}=1 sh -c 'trap \"\" TERM; sleep 300 & exec python3 {} --listen \"$0\"' {{socket}}",
        support::fixture().display()
    );
    let (code, report, stderr) = run_json(&target, &["--filter", "agent-socket/handshake/version"]);
    assert_eq!(code, 0, "{stderr} {report:#}");
    let left = processes_with(&format!("{marker}=1"));
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn an_acp_agent_that_cannot_start_or_speak_stdio_is_exit_2() {
    for target in ["exec:echo no agent here >&2; exit 3", "unix:/tmp/x.sock"] {
        let out = conform()
            .args(["run", "--protocol", "acp", "--target", target])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{target}");
    }
    let out = conform()
        .args([
            "run",
            "--protocol",
            "acp",
            "--target",
            "exec:echo no agent here >&2; exit 3",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no agent here"), "{stderr}");
}

#[test]
fn acp_list_names_every_case_with_its_requirements() {
    let out = conform()
        .args(["list", "--protocol", "acp", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let items: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = conform::case::load::<conform::protocols::acp::AgentCases>(&[])
        .unwrap()
        .len();
    assert_eq!(items.as_array().unwrap().len(), n);
    assert!(items.as_array().unwrap().iter().all(|c| {
        c["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["quote"].is_string())
    }));
}

#[test]
fn every_acp_agent_process_and_its_children_are_gone_after_the_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not on PATH");
        return;
    }
    let marker = format!("CONFORM_ACP_MARKER_{}", std::process::id());
    // Each case's agent leaves a grandchild holding its pipes, and ignores SIGTERM.
    let agent = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/acp_agent.py");
    let target =
        format!("exec:{marker}=1 sh -c 'trap \"\" TERM; sleep 300 & exec python3 {agent}'");
    let out = conform()
        .args([
            "run",
            "--protocol",
            "acp",
            "--format",
            "json",
            "--target",
            &target,
        ])
        .args(["--filter", "acp/prompt/text,acp/jsonrpc/id-number"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let left = processes_with(&format!("{marker}=1"));
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_cwx_host_that_cannot_start_is_exit_2_and_list_works() {
    let out = conform()
        .args([
            "run",
            "--protocol",
            "cwx",
            "--target",
            "exec:echo no host here >&2; exit 4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no host here"));
    let out = conform()
        .args(["run", "--protocol", "cwx", "--tier", "middle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a tier that does not exist");
    let out = conform()
        .args(["list", "--protocol", "cwx"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cwx/handshake/hello"));
}

/// Runs `conform run` with `args` and `--format F --output FILE` for every
/// format, and snapshots each rendering as `format_<F>_<name>`.
fn snapshot_every_format(name: &str, args: &[String]) {
    for format in ["human", "json", "junit", "markdown", "html"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report");
        let out = conform()
            .arg("run")
            .args(args)
            .args(["-j", "1", "--format", format])
            .arg("--output")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(0 | 1 | 3)),
            "{name} {format}: {out:?}"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        if format == "json" {
            support::report_from(text.as_bytes());
        }
        snapshot_rendered(&format!("format_{format}_{name}"), &text);
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn every_format_is_snapshotted_for_the_reference_and_a_broken_server() {
    let args = |target: &str| {
        let mut a = strings(&["--protocol", "agent-socket", "--target", target]);
        a.extend(strings(&["--filter", "agent-socket/framing/"]));
        a
    };
    snapshot_every_format("builtin", &args("builtin"));
    if python_available() {
        snapshot_every_format("wrong_id", &args(&fixture_target("--deviation wrong-id")));
    }
}

#[test]
fn every_format_is_snapshotted_for_the_acp_and_cwx_references_and_doubles() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let acp = |target: &str| {
        strings(&[
            "--protocol",
            "acp",
            "--target",
            target,
            "--filter",
            "acp/init/,acp/prompt/",
        ])
    };
    let cwx = |target: &str| {
        strings(&[
            "--protocol",
            "cwx",
            "--target",
            target,
            "--filter",
            "cwx/handshake/,cwx/ping/",
        ])
    };
    snapshot_every_format("acp_builtin", &acp("builtin"));
    snapshot_every_format("cwx_builtin", &cwx("builtin"));
    if !python_available() {
        eprintln!("skipped the doubles: python3 is not available");
        return;
    }
    snapshot_every_format(
        "acp_bad_stop_reason",
        &acp(&format!(
            "exec:python3 {fixtures}/acp_agent.py --deviation bad-stop-reason"
        )),
    );
    snapshot_every_format(
        "cwx_ping_silent",
        &cwx(&format!(
            "exec:python3 {fixtures}/cwx_host.py --tier plugin --deviation ping-silent"
        )),
    );
    // An agent without credentials: its session cases are all skipped, so
    // the MUSTs they check are reported unexercised and the run is
    // incomplete (exit 3).
    snapshot_every_format(
        "acp_needs_auth",
        &acp(&format!(
            "exec:python3 {fixtures}/acp_agent.py --variant needs-auth"
        )),
    );
}

#[test]
fn several_targets_make_a_matrix_in_every_format() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let mut args = strings(&["--protocol", "agent-socket", "--target", "builtin"]);
    args.extend(strings(&[
        "--target",
        &fixture_target("--deviation wrong-id"),
        "--filter",
        "agent-socket/framing/",
    ]));
    snapshot_every_format("matrix", &args);
    // The JSON matrix: one row a case, one cell a target, and each target's
    // own report under `runs`; the worst cell is the row's outcome.
    let out = conform()
        .arg("run")
        .args(&args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the broken column fails the run"
    );
    let m = support::report_from(&out.stdout);
    assert_eq!(m["targets"].as_array().unwrap().len(), 2);
    assert_eq!(m["runs"].as_array().unwrap().len(), 2);
    assert_eq!(m["runs"][0]["summary"]["failed"], 0, "builtin passes");
    let row = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "agent-socket/framing/handshake-envelope")
        .unwrap();
    assert_eq!(row["by_target"][0]["outcome"], "pass");
    assert_eq!(row["by_target"][1]["outcome"], "fail");
    assert_eq!(row["outcome"], "fail");
    let rows = m["cases"].as_array().unwrap().len() as u64;
    assert_eq!(m["summary"]["total"], rows * 2, "a cell a case and target");
    // Every target alone passing is a passing matrix.
    let out = conform()
        .args(["run", "--protocol", "agent-socket", "--target", "builtin"])
        .args(["--target", "builtin", "--filter", "agent-socket/framing/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // A certificate names one target.
    let out = conform()
        .arg("run")
        .args(&args)
        .args(["--certify", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_html_report_is_self_contained_and_renders_headless() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    let out = conform()
        .args([
            "run",
            "--protocol",
            "agent-socket",
            "--format",
            "html",
            "--output",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
    for external in ["<script", "<link", "src=", "href=\"http", "url(", "@import"] {
        assert!(
            !html.contains(external),
            "the page loads nothing: {external}"
        );
    }
    assert!(html.contains("Summary by level") && html.contains("Requirements"));
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        eprintln!("skipped the headless rendering: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let png = dir.path().join("report.png");
    let shot = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,1600",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "a rendered page"
    );
}

#[test]
fn completions_and_the_man_page_follow_the_command_line() {
    let out = conform().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8(out.stdout).unwrap();
    for word in [
        "_conform()",
        "complete -F _conform",
        "--protocol",
        "--shard",
        "completions",
    ] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("conform.bash");
    std::fs::write(&file, &script).unwrap();
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = conform().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("conform"));
    }
    let out = conform().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "not a shell clap_complete knows"
    );

    let out = conform().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH conform 1"), "{page}");
    assert!(page.contains("conform\\-run(1)"), "{page}");
    let pages = dir.path().join("man");
    let out = conform()
        .arg("man")
        .arg("--dir")
        .arg(&pages)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let run = std::fs::read_to_string(pages.join("conform-run.1")).unwrap();
    assert!(run.contains("\\-\\-expected\\-failures"), "{run}");
    assert!(
        !pages.join("conform-peer.1").exists(),
        "the internal command has no page"
    );
}

#[test]
fn one_run_writes_every_report_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let out = run_agent_socket(&[
        "--filter",
        "agent-socket/handshake/",
        "--format",
        "markdown",
        "--output",
        &path("r.md"),
        "--report",
        &format!("json={}", path("r.json")),
        "--report",
        &format!("junit={}", path("r.xml")),
        "--report",
        &format!("HTML={}", path("r.html")),
        "--report",
        &format!("human={}", path("r.txt")),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json = support::report_from(&std::fs::read(path("r.json")).unwrap());
    let total = json["summary"]["total"].as_u64().unwrap();
    assert!(total > 0);
    // The same run in every file: the same cases, counted the same way.
    let xml = std::fs::read_to_string(path("r.xml")).unwrap();
    assert!(xml.contains(&format!("tests=\"{total}\"")), "{xml}");
    let md = std::fs::read_to_string(path("r.md")).unwrap();
    let html = std::fs::read_to_string(path("r.html")).unwrap();
    let human = std::fs::read_to_string(path("r.txt")).unwrap();
    let counts = format!(
        "{total} cases, {} passed, {} failed",
        json["summary"]["passed"], json["summary"]["failed"]
    );
    for text in [&md, &html, &human] {
        assert!(text.contains(&counts), "{counts}: {text}");
    }
    assert!(
        human.contains(&format!("/{total}] PASS")),
        "a human report in a file lists its cases"
    );
    for bad in ["pdf=x", "json", "json="] {
        let out = run_agent_socket(&["--report", bad]);
        assert_eq!(out.status.code(), Some(2), "--report {bad}");
    }
}

/// A reader that went away (`| head`) ends conform's output quietly: no
/// panic (exit 101), no message. The pipe's read end is closed before
/// conform starts, so its first write meets the closed pipe.
#[test]
fn a_closed_stdout_pipe_is_not_a_panic() {
    use std::os::fd::OwnedFd;
    for args in [
        &["list", "--protocol", "acp", "--json"][..],
        &["list", "--protocol", "cwx"][..],
        &[
            "run",
            "--protocol",
            "agent-socket",
            "--filter",
            "agent-socket/handshake/version",
            "--format",
            "json",
        ][..],
    ] {
        let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
        drop(read);
        let out = conform()
            .args(args)
            .stdout(std::process::Stdio::from(write))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            out.status.code().is_some(),
            "{args:?} ends by itself, not by SIGPIPE"
        );
    }
}
