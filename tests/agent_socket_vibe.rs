//! Interop: the real Vibe client code (PyPI `mistral-vibe`, its
//! `vibe.app_server._agent_socket`, driven without a model by
//! `tests/fixtures/vibe_as_client.py`) against conform's scripted server
//! (`--role client`). Skips, saying why, where Vibe cannot be installed.

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The venv's python, set up (once, idempotently) under the target directory.
fn vibe_python() -> Result<PathBuf, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out = Command::new("bash")
        .arg(root.join("tests/fixtures/vibe_venv.sh"))
        .arg(target.join("vibe-venv"))
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .last()
        .map(PathBuf::from)
        .ok_or_else(|| "vibe_venv.sh printed no python".into())
}

#[test]
fn the_real_vibe_client_passes_every_client_case() {
    let python = match vibe_python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: the real Vibe client cannot be installed here: {why}");
            return;
        }
    };
    let target = format!(
        "exec:{} {}/tests/fixtures/vibe_as_client.py {{socket}}",
        python.display(),
        env!("CARGO_MANIFEST_DIR")
    );
    // Importing Vibe costs seconds of CPU (vibe_venv.sh's import check has
    // compiled its bytecode): one client at a time, so a loaded machine
    // does not push an import past a case's 20 s.
    let (code, report, stderr) = support::run_json(&target, &["--role", "client", "-j", "1"]);
    let not_passed: Vec<String> = report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !matches!(c["outcome"].as_str(), Some("pass" | "info")))
        .map(|c| format!("{} {}: {}", c["outcome"], c["id"], c["message"]))
        .collect();
    assert!(
        code == 0 && not_passed.is_empty(),
        "exit {code}\n{}\nstderr: {stderr}",
        not_passed.join("\n")
    );
    support::snapshot_client_report("agent_socket_client_vibe", &report);
}
