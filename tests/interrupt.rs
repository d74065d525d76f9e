//! A run stopped by Ctrl-C (SIGINT) or SIGTERM keeps what it learned: it ends
//! its targets, writes the report of the cases that finished (every output
//! asked for: the report, the transcripts, the certification bundle), marks
//! the others not run, says it was interrupted, exits 128 + the signal, and
//! leaves no process and no temporary directory behind.
//!
//! The cases are slow on purpose (`--case` files whose steps sleep), so a
//! signal sent after the second case finished lands in the middle of the run.

mod support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::conform;

const SLOW_CASES: usize = 8;

/// A case file of slow agent-socket cases: each sleeps, then checks the
/// handshake, so each takes about `secs` against a conformant server.
fn slow_cases(dir: &Path, secs: f64) -> std::path::PathBuf {
    let cases: Vec<Value> = (0..SLOW_CASES)
        .map(|i| {
            json!({
                "id": format!("agent-socket/slow/{i}"),
                "title": "A slow case: a pause, then the handshake",
                "level": "MUST",
                "requirements": ["as.init.version"],
                "steps": [
                    {"sleep": secs},
                    {"send": {"method": "agent/initialize",
                              "params": {"protocolVersion": 2, "vibeVersion": "3.0.3"}},
                     "expect": {"result": {"protocolVersion": 2}}}
                ]
            })
        })
        .collect();
    let file = dir.join("slow.json");
    std::fs::write(&file, json!({ "cases": cases }).to_string()).unwrap();
    file
}

/// Starts `conform run` with `args`, its temporary files in `tmp`, and waits
/// until `finished` cases have finished (their progress lines on stderr);
/// returns the child and the progress lines read so far.
fn start_and_wait_for(args: &[String], tmp: &Path, finished: usize) -> (Child, Vec<String>) {
    let mut child = conform()
        .args(args)
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    // Reads stderr to its end (the child's exit), so the pipe never fills.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines
        .iter()
        .filter(|l: &&String| l.contains(" PASS "))
        .count()
        < finished
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("{finished} cases did not finish in time: {lines:?}");
            }
        }
    }
    // The rest of stderr, for the messages after the signal.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    (child, lines)
}

/// Waits, bounded, for `child` to exit; its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("conform did not exit within 60 s of the signal");
}

/// Live processes whose environment carries conform's target marker for
/// the conform process `pid`.
fn targets_left(pid: u32) -> Vec<String> {
    let marker = format!("CONFORM_TARGET_ID={pid}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let carries = env
            .split(|b| *b == 0)
            .any(|v| v.starts_with(marker.as_bytes()));
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if carries && !zombie {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `conform run` of the slow agent-socket cases, one at a time, on `target`.
fn slow_run(target: &str) -> Vec<String> {
    strings(&[
        "run",
        "--protocol",
        "agent-socket",
        "-j",
        "1",
        "--filter",
        "agent-socket/slow/",
        "--target",
        target,
    ])
}

#[test]
fn sigint_writes_the_report_transcripts_and_bundle_of_what_finished_and_exits_130() {
    let work = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cases = slow_cases(work.path(), 1.0);
    let report = work.path().join("report.json");
    let transcripts = work.path().join("transcripts");
    let certificate = work.path().join("certificate");
    // The target is a process of its own (conform's reference server), with
    // a workspace of the test's, so everything in TMPDIR is the run's.
    let target = format!(
        "exec:{} reference --protocol agent-socket --listen {{socket}} --workspace {}",
        env!("CARGO_BIN_EXE_conform"),
        work.path().display()
    );
    let mut args = slow_run(&target);
    args.extend(strings(&["--format", "json"]));
    for (flag, path) in [
        ("--case", &cases),
        ("--output", &report),
        ("--transcripts", &transcripts),
        ("--certify", &certificate),
    ] {
        args.push(flag.into());
        args.push(path.display().to_string());
    }
    let (mut child, _) = start_and_wait_for(&args, tmp.path(), 2);
    let pid = child.id();
    kill(Pid::from_raw(pid as i32), Signal::SIGINT).unwrap();
    assert_eq!(exit_code(&mut child), Some(130), "128 + SIGINT");

    let r = support::report_from(&std::fs::read(&report).expect("the report was written"));
    assert_eq!(r["interrupted"]["signal"], "SIGINT");
    assert_eq!(r["interrupted"]["exit_code"], 130);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), SLOW_CASES, "every selected case is reported");
    let passed: Vec<&str> = cases
        .iter()
        .filter(|c| c["outcome"] == "pass")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let not_run: Vec<&str> = r["interrupted"]["not_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        passed.len() >= 2,
        "the finished cases keep their outcome: {r:#}"
    );
    assert!(!not_run.is_empty(), "the signal came mid-run: {r:#}");
    assert_eq!(passed.len() + not_run.len(), SLOW_CASES, "{r:#}");
    for c in cases.iter().filter(|c| c["outcome"] != "pass") {
        assert!(not_run.contains(&c["id"].as_str().unwrap()), "{c:#}");
        assert_eq!(c["outcome"], "skip");
        assert_eq!(c["skip_kind"], "outside");
        assert!(c["message"].as_str().unwrap().starts_with("not run: "));
    }
    assert!(
        r["notes"][0]
            .as_str()
            .unwrap()
            .contains("interrupted by SIGINT"),
        "{r:#}"
    );
    // One transcript a finished case, none for the others.
    let mut written = entries(&transcripts);
    written.sort();
    let mut expected: Vec<String> = passed
        .iter()
        .map(|id| format!("{}.json", id.replace('/', ".")))
        .collect();
    expected.sort();
    assert_eq!(written, expected);
    // The certificate is refused, and says why.
    let bundle = support::bundle_from(
        &std::fs::read_to_string(certificate.join("certification.json")).unwrap(),
    );
    assert_eq!(bundle["verdict"], "not conformant");
    assert!(
        bundle["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|why| why.as_str().unwrap().contains("interrupted by SIGINT")),
        "{bundle:#}"
    );
    assert!(certificate.join("certification.md").exists());

    assert_eq!(
        targets_left(pid),
        Vec::<String>::new(),
        "a process outlived the run"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new(), "left in TMPDIR");
}

#[test]
fn sigterm_reports_every_target_of_a_matrix_and_exits_143() {
    let work = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cases = slow_cases(work.path(), 0.5);
    let report = work.path().join("report.json");
    let mut args = strings(&["run", "--protocol", "agent-socket", "-j", "1"]);
    args.extend(strings(&["--filter", "agent-socket/slow/"]));
    // Two targets: the signal comes during the first, so the second never
    // starts and all its cases are reported not run.
    args.extend(strings(&["--target", "builtin", "--target", "builtin"]));
    args.extend(strings(&["--format", "json", "--case"]));
    args.push(cases.display().to_string());
    args.push("--output".into());
    args.push(report.display().to_string());
    let (mut child, _) = start_and_wait_for(&args, tmp.path(), 2);
    let pid = child.id();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    assert_eq!(exit_code(&mut child), Some(143), "128 + SIGTERM");

    let m = support::report_from(&std::fs::read(&report).expect("the report was written"));
    assert_eq!(m["interrupted"]["signal"], "SIGTERM");
    assert_eq!(m["interrupted"]["exit_code"], 143);
    let runs = m["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let first_passed = runs[0]["summary"]["passed"].as_u64().unwrap();
    assert!(first_passed >= 2, "{:#}", runs[0]);
    assert_eq!(
        runs[1]["interrupted"]["not_run"].as_array().unwrap().len(),
        SLOW_CASES,
        "the second target never started: {:#}",
        runs[1]
    );
    assert_eq!(runs[1]["summary"]["skipped"], SLOW_CASES);
    assert_eq!(
        targets_left(pid),
        Vec::<String>::new(),
        "a process outlived the run"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new(), "left in TMPDIR");
}

/// A SIGKILL gives conform no chance to end its targets. The target here is
/// a shell whose program is its child, with a grandchild of its own in the
/// group: the parent-death signal reaches only the shell, the guard the rest.
#[test]
fn sigkill_leaves_no_target_process_behind() {
    let work = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cases = slow_cases(work.path(), 1.0);
    let target = format!(
        "exec:sleep 300 & {} reference --protocol agent-socket --listen {{socket}} --workspace {}; wait",
        env!("CARGO_BIN_EXE_conform"),
        work.path().display()
    );
    let mut args = slow_run(&target);
    let report = work.path().join("report.json");
    args.extend(strings(&["--case", &cases.display().to_string()]));
    // With the report in a file, the progress lines go to stderr.
    args.extend(strings(&["--output", &report.display().to_string()]));
    let (mut child, _) = start_and_wait_for(&args, tmp.path(), 2);
    let pid = child.id();
    assert!(!targets_left(pid).is_empty(), "the target runs mid-run");
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    assert_eq!(exit_code(&mut child), None, "killed by the signal");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut left = targets_left(pid);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = targets_left(pid);
    }
    assert!(left.is_empty(), "left behind after SIGKILL: {left:?}");
}
