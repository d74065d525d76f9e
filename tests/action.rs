//! The GitHub Action (`action.yml`) and the script that does its work
//! (`scripts/action.py`): the action parses and declares the inputs and
//! outputs the script reads and writes, and the script, run as the action
//! runs it (inputs in the environment, a fake `GITHUB_OUTPUT` and
//! `GITHUB_STEP_SUMMARY`) against the built conform, reports a passing, a
//! failing, a waived and an impossible run: its exit status, outputs,
//! summary and report files.

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::python_available;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn action_yml() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("action.yml")).unwrap()
}

/// The keys of a top-level mapping of action.yml (`inputs:`, `outputs:`),
/// read from its two-space indented lines: enough to compare names, with no
/// YAML parser.
fn keys_of(yml: &str, section: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut inside = false;
    for line in yml.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() && !line.starts_with('#') {
            inside = line.trim_end() == format!("{section}:");
            continue;
        }
        if inside
            && let Some(key) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !key.starts_with(' ')
        {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// Each input's `default:` in action.yml (empty when it has none), as
/// GitHub hands an input that a workflow does not set.
fn defaults(yml: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut input = None;
    let mut inside = false;
    for line in yml.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() && !line.starts_with('#') {
            inside = line.trim_end() == "inputs:";
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(key) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !key.starts_with(' ')
        {
            out.insert(key.to_owned(), String::new());
            input = Some(key.to_owned());
        } else if let (Some(k), Some(v)) = (&input, line.trim().strip_prefix("default:")) {
            out.insert(k.clone(), v.trim().trim_matches('"').to_owned());
        }
    }
    out
}

/// action.yml parsed by PyYAML, as JSON; `Err` says why it could not be
/// (PyYAML neither importable nor installable).
fn parsed() -> Result<Value, String> {
    let lib = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pyyaml");
    let import = |path: &Path| {
        Command::new("python3")
            .env("PYTHONPATH", path)
            .args([
                "-c",
                "import json, sys, yaml\nprint(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            ])
            .arg(Path::new(ROOT).join("action.yml"))
            .output()
    };
    let mut out = import(&lib).map_err(|e| e.to_string())?;
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("No module named") {
        let pip = Command::new("python3")
            .args(["-m", "pip", "install", "-q", "--target"])
            .arg(&lib)
            .arg("pyyaml")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .output()
            .map_err(|e| e.to_string())?;
        if !pip.status.success() {
            return Err(format!(
                "PyYAML is not installed and pip could not install it: {}",
                String::from_utf8_lossy(&pip.stderr)
            ));
        }
        out = import(&lib).map_err(|e| e.to_string())?;
    }
    if !out.status.success() {
        // Not a missing parser: the file does not parse.
        panic!(
            "action.yml does not parse: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

const INPUTS: [&str; 7] = [
    "protocol",
    "role",
    "target",
    "args",
    "expected-failures",
    "formats",
    "report-dir",
];

#[test]
fn action_yml_parses_and_hands_every_input_to_the_script() {
    let yml = action_yml();
    assert_eq!(keys_of(&yml, "inputs"), INPUTS);
    let outputs = keys_of(&yml, "outputs");
    for o in [
        "verdict",
        "exit-code",
        "failed",
        "json-report",
        "junit-report",
    ] {
        assert!(outputs.iter().any(|x| x == o), "no output {o}");
    }
    if !python_available() {
        eprintln!("skipped the YAML parse: python3 is not available");
        return;
    }
    let a = match parsed() {
        Ok(a) => a,
        Err(why) => {
            eprintln!("skipped the YAML parse: {why}");
            return;
        }
    };
    assert_eq!(a["runs"]["using"], "composite");
    assert_eq!(a["inputs"]["protocol"]["required"], true);
    let parsed_inputs: Vec<&String> = a["inputs"].as_object().unwrap().keys().collect();
    assert_eq!(
        parsed_inputs, INPUTS,
        "the parser and the line reader agree"
    );
    for (input, default) in defaults(&yml) {
        let parsed = a["inputs"][&input]["default"].as_str().unwrap_or("");
        assert_eq!(parsed, default, "the default of {input}");
    }
    let steps = a["runs"]["steps"].as_array().unwrap();
    for s in steps {
        if s.get("run").is_some() {
            assert_eq!(
                s["shell"], "bash",
                "a composite run step names its shell: {s}"
            );
        }
    }
    assert!(
        steps.iter().any(|s| s["uses"]
            .as_str()
            .is_some_and(|u| u.starts_with("Swatinem/rust-cache@"))),
        "the build is cached"
    );
    let run = steps
        .iter()
        .find(|s| s["id"] == "run")
        .expect("a step `run`");
    assert!(run["run"].as_str().unwrap().contains("scripts/action.py"));
    for input in INPUTS {
        let var = format!("INPUT_{}", input.to_uppercase().replace('-', "_"));
        assert_eq!(
            run["env"][&var],
            format!("${{{{ inputs.{input} }}}}"),
            "{var} carries the input"
        );
        // Inputs never become shell text.
        assert!(!run["run"].as_str().unwrap().contains("inputs."));
    }
    for (name, o) in a["outputs"].as_object().unwrap() {
        assert_eq!(
            o["value"],
            format!("${{{{ steps.run.outputs.{name} }}}}"),
            "output {name}"
        );
        assert!(o["description"].is_string(), "output {name}");
    }
}

/// One run of the script as the action runs it.
struct Ran {
    code: Option<i32>,
    outputs: BTreeMap<String, String>,
    summary: String,
    stderr: String,
    dir: PathBuf,
}

/// The outputs written in GitHub's `name<<DELIMITER` form.
fn read_outputs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let (name, delimiter) = line.split_once("<<").expect("the multi-line form");
        let mut value = Vec::new();
        for l in lines.by_ref() {
            if l == delimiter {
                break;
            }
            value.push(l);
        }
        out.insert(name.to_owned(), value.join("\n"));
    }
    out
}

fn run_action(work: &Path, inputs: &[(&str, &str)]) -> Ran {
    let output = work.join("github_output");
    let summary = work.join("github_step_summary");
    std::fs::write(&output, "").unwrap();
    std::fs::write(&summary, "").unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(ROOT).join("scripts/action.py"))
        .current_dir(work)
        .env("CONFORM_BIN", env!("CARGO_BIN_EXE_conform"))
        .env("GITHUB_OUTPUT", &output)
        .env("GITHUB_STEP_SUMMARY", &summary);
    // As action.yml passes them: every input, its default when not given.
    let defaults = defaults(&action_yml());
    for input in INPUTS {
        let var = format!("INPUT_{}", input.to_uppercase().replace('-', "_"));
        let value = match inputs.iter().find(|(k, _)| *k == input) {
            Some((_, v)) => v.to_string(),
            None => defaults[input].clone(),
        };
        cmd.env(var, value);
    }
    let out = cmd.output().unwrap();
    Ran {
        code: out.status.code(),
        outputs: read_outputs(&std::fs::read_to_string(&output).unwrap()),
        summary: std::fs::read_to_string(&summary).unwrap(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        dir: work.join("conform-reports"),
    }
}

/// A case file whose one case expects what no conformant server answers.
fn wrong_case(dir: &Path) -> PathBuf {
    let file = dir.join("wrong.json");
    let case = json!({"cases": [{
        "id": "agent-socket/local/wrong-version",
        "title": "A case that expects protocol version 3",
        "level": "MUST",
        "requirements": ["as.init.version"],
        "steps": [{"send": {"method": "agent/initialize",
                            "params": {"protocolVersion": 2, "vibeVersion": "3.0.3"}},
                   "expect": {"result": {"protocolVersion": 3}}}]
    }]});
    std::fs::write(&file, case.to_string()).unwrap();
    file
}

#[test]
fn the_script_reports_a_passing_run_in_outputs_summary_and_files() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let r = run_action(
        work.path(),
        &[
            ("protocol", "agent-socket"),
            ("target", "builtin"),
            ("args", "--filter agent-socket/handshake/"),
            ("formats", "json, junit html"),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let report = support::report_from(&std::fs::read(r.dir.join("conform.json")).unwrap());
    let o = &r.outputs;
    assert_eq!(o["verdict"], "pass");
    assert_eq!(o["exit-code"], "0");
    for count in [
        "total", "passed", "failed", "warned", "info", "skipped", "errors",
    ] {
        assert_eq!(
            o[count],
            report["summary"][count].to_string(),
            "{count} is the report's"
        );
    }
    assert_ne!(o["total"], "0");
    assert_eq!(o["waived"], "0");
    // Every output action.yml declares is written (all four reports exist).
    for name in keys_of(&action_yml(), "outputs") {
        assert!(o.contains_key(&name), "output {name} not written: {o:?}");
    }
    assert_eq!(o["report-dir"], r.dir.display().to_string());
    for (output, file, starts) in [
        ("json-report", "conform.json", "{"),
        ("junit-report", "conform.xml", "<?xml"),
        ("html-report", "conform.html", "<!DOCTYPE html>"),
        (
            "markdown-report",
            "conform.md",
            "# conform: agent-socket server",
        ),
    ] {
        let path = r.dir.join(file);
        assert_eq!(o[output], path.display().to_string());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(starts), "{file}: {text}");
    }
    assert!(
        !r.dir.join("conform.txt").exists(),
        "human was not asked for"
    );
    assert!(r.summary.starts_with("**conform verdict: pass** (exit 0)"));
    assert!(
        r.summary
            .contains("| pass | MUST | `agent-socket/handshake/version` |"),
        "{}",
        r.summary
    );
}

#[test]
fn the_script_fails_as_conform_does_and_an_expected_failure_is_waived() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let case = wrong_case(work.path());
    let args = format!(
        "--case {} --filter agent-socket/local/",
        shlex_quote(&case.display().to_string())
    );
    let r = run_action(
        work.path(),
        &[("protocol", "agent-socket"), ("args", &args)],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.outputs["verdict"], "fail");
    assert_eq!(r.outputs["failed"], "1");
    assert_eq!(r.outputs["total"], "1");
    assert!(r.summary.starts_with("**conform verdict: fail** (exit 1)"));
    assert!(
        r.summary
            .contains("| fail | MUST | `agent-socket/local/wrong-version` |"),
        "{}",
        r.summary
    );
    let junit = std::fs::read_to_string(r.dir.join("conform.xml")).unwrap();
    assert!(junit.contains("<failure"), "{junit}");

    // The same failure, listed with a reason: waived, and the step passes.
    let baseline = work.path().join("expected.json");
    std::fs::write(
        &baseline,
        json!({"expected_failures": [{"id": "agent-socket/local/wrong-version",
                                       "reason": "version 3 lands later"}]})
        .to_string(),
    )
    .unwrap();
    let r = run_action(
        work.path(),
        &[
            ("protocol", "agent-socket"),
            ("args", &args),
            ("expected-failures", baseline.to_str().unwrap()),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.outputs["verdict"], "pass");
    assert_eq!(r.outputs["failed"], "1");
    assert_eq!(r.outputs["waived"], "1");
}

#[test]
fn the_script_says_why_conform_could_not_run() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let r = run_action(
        work.path(),
        &[
            ("protocol", "agent-socket"),
            (
                "target",
                "exec:/nonexistent/conform-server --listen {socket}",
            ),
        ],
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(r.outputs["verdict"], "error");
    assert_eq!(r.outputs["total"], "0");
    assert!(!r.outputs.contains_key("json-report"), "{:?}", r.outputs);
    assert!(r.summary.starts_with("## conform could not run (exit 2)"));
    assert!(
        r.summary.contains("conform:"),
        "conform's words: {}",
        r.summary
    );

    // An input the script refuses before anything runs.
    let r = run_action(
        work.path(),
        &[("protocol", "agent-socket"), ("formats", "json pdf")],
    );
    assert_eq!(r.code, Some(2));
    assert_eq!(r.outputs["verdict"], "error");
    assert!(r.summary.contains("pdf"), "{}", r.summary);
}

/// `s` quoted for a POSIX shell (and Python's shlex).
fn shlex_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
