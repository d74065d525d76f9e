//! Interop: the official Rust ACP SDK's example client
//! (`examples/yolo_one_shot_client.rs` of crate `agent-client-protocol`
//! 5.2.0, the version conform's tests already depend on) against conform's
//! scripted agent (`--role client`). The example is built from the crate's
//! registry source, with this project's lockfile, into the target
//! directory; where that cannot be done the test says why and skips.
//!
//! What the example does not do is not held against it: it advertises no
//! file system and no terminal (those cases are not applicable) and never
//! cancels a turn (the cancel case is skipped and its MUSTs reported as not
//! exercised, so the run is not a pass). Nothing may fail.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SDK: &str = "agent-client-protocol-5.2.0";

/// The registry source of the SDK crate, if cargo has it.
fn sdk_source() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))?;
    std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .flatten()
        .map(|d| d.path().join(SDK))
        .find(|p| p.join("examples/yolo_one_shot_client.rs").exists())
}

fn build_example() -> Result<PathBuf, String> {
    let src = sdk_source().ok_or(format!("cargo's registry holds no {SDK} source"))?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let work = target.join("acp-sdk-example");
    let copy = work.join(SDK);
    if !copy.exists() {
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        let status = Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(&work)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("cannot copy {}", src.display()));
        }
        // The crate's own lockfile pins a release crates.io has yanked;
        // this project's resolves the same dependencies.
        std::fs::copy(root.join("Cargo.lock"), copy.join("Cargo.lock"))
            .map_err(|e| e.to_string())?;
        // Its own workspace, not this project's (the copy lies under target/).
        let manifest = copy.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
        std::fs::write(&manifest, format!("{text}\n[workspace]\n")).map_err(|e| e.to_string())?;
    }
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--example",
            "yolo_one_shot_client",
            "--features",
            "process",
            "--target-dir",
        ])
        .arg(work.join("target"))
        .current_dir(&copy)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "cargo build of the example failed: {}",
            err.lines().find(|l| l.contains("error")).unwrap_or("")
        ));
    }
    Ok(work.join("target/debug/examples/yolo_one_shot_client"))
}

#[test]
fn the_sdk_example_client_fails_nothing() {
    let client = match build_example() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: the SDK's example client cannot be built here: {why}");
            return;
        }
    };
    let target = format!(
        "exec:{} --command \"$CONFORM_AGENT\" conform",
        conform::matcher::shell_quote(&client.display().to_string())
    );
    let (code, report, stderr) = support::run_protocol_json("acp", &target, &["--role", "client"]);
    let failed = support::outcome_ids(&report, "fail");
    let errors = support::outcome_ids(&report, "error");
    assert!(
        failed.is_empty() && errors.is_empty(),
        "failed {failed:?}, errors {errors:?}\nstderr: {stderr}"
    );
    let skipped = support::outcome_ids(&report, "skip");
    let expected: BTreeSet<String> = [
        "fs/read",
        "fs/write-creates",
        "terminal/truncation",
        "terminal/release-invalidates",
        "terminal/create-returns-at-once",
        "terminal/kill-keeps-terminal",
        "cancel/pending-permission",
    ]
    .iter()
    .map(|s| format!("acp/client/{s}"))
    .collect();
    assert_eq!(skipped, expected);
    // The cancel MUSTs were not exercised: incomplete, not failed.
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(report["summary"]["unexercised"], 2, "{}", report["summary"]);
}
