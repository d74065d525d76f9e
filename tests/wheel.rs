//! The Python wheel (`pyproject.toml`, maturin's `bindings = "bin"`): built,
//! installed into a fresh virtual environment, and the `conform` it installs
//! runs the builtin agent-socket suite.
//!
//! Cost: maturin is installed once into this target directory's `tmp/` (a
//! few seconds from PyPI's wheel; the test says why it skips when it cannot
//! be installed), and the wheel is built with the dev profile into this same
//! target directory, so cargo reuses everything `cargo test` compiled and
//! only links conform again (seconds). A release wheel (`--release`, built
//! in a manylinux container) compiles the whole crate again, about four
//! minutes here: that is the release workflow's cost (README), not CI's.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::python_available;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const MATURIN: &str = "maturin>=1.5,<2";

/// Runs `cmd` to its end or `limit`; (success, what it wrote).
fn run_bounded(mut cmd: Command, limit: Duration) -> (bool, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(s) => (s.success(), text),
        None => (false, format!("{text}\n(killed after {limit:?})")),
    }
}

/// A virtual environment at `dir`, made with python3.
fn venv(dir: &Path) -> Result<(), String> {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "venv"]).arg(dir);
    match run_bounded(cmd, Duration::from_secs(300)) {
        (true, _) => Ok(()),
        (false, out) => Err(format!("python3 -m venv failed: {out}")),
    }
}

/// maturin, installed once into the target directory's tmp/.
fn maturin(work: &Path) -> Result<PathBuf, String> {
    let env = work.join("maturin-venv");
    let bin = env.join("bin/maturin");
    if bin.exists() {
        return Ok(bin);
    }
    let _ = std::fs::remove_dir_all(&env);
    venv(&env)?;
    let mut pip = Command::new(env.join("bin/pip"));
    pip.args(["install", "-q", MATURIN])
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    match run_bounded(pip, Duration::from_secs(600)) {
        (true, _) if bin.exists() => Ok(bin),
        (_, out) => {
            let _ = std::fs::remove_dir_all(&env);
            Err(format!("pip could not install {MATURIN}: {out}"))
        }
    }
}

#[test]
fn the_wheel_installs_a_conform_that_passes_the_builtin_suite() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let work = tmp.join("wheel");
    std::fs::create_dir_all(&work).unwrap();
    let maturin = match maturin(&work) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("skipped: maturin cannot be installed here, so no wheel is built: {why}");
            return;
        }
    };
    // The target directory `cargo test` built into: CARGO_TARGET_TMPDIR is
    // its tmp/.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.parent().unwrap().to_path_buf());
    let run = work.join(format!("run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    let dist = run.join("dist");
    let mut build = Command::new(&maturin);
    build
        .args([
            "build",
            "--profile",
            "dev",
            "--compatibility",
            "linux",
            "--out",
        ])
        .arg(&dist)
        .current_dir(ROOT)
        .env("CARGO_TARGET_DIR", &target);
    let (built, log) = run_bounded(build, Duration::from_secs(1800));
    assert!(built, "maturin build failed:\n{log}");
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    let [wheel] = wheels.as_slice() else {
        panic!("one wheel expected: {wheels:?}\n{log}");
    };
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        name.starts_with(&format!("conform_harness-{version}-py3-none-")),
        "{name}"
    );
    // The binary is the wheel's script, and there is no Python package.
    let listing = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nprint('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
        ])
        .arg(wheel)
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&listing.stdout);
    let script = format!("conform_harness-{version}.data/scripts/conform");
    assert!(files.lines().any(|f| f == script), "{files}");
    assert!(
        files.lines().all(|f| f.starts_with("conform_harness-")),
        "nothing but the binary and its metadata: {files}"
    );

    // A fresh environment, with nothing but the wheel and no index.
    let env = run.join("venv");
    venv(&env).unwrap();
    let mut pip = Command::new(env.join("bin/pip"));
    pip.args(["install", "-q", "--no-index", "--no-deps"])
        .arg(wheel)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    let (installed, out) = run_bounded(pip, Duration::from_secs(300));
    assert!(installed, "pip install of the wheel failed: {out}");
    let conform = env.join("bin/conform");
    assert!(conform.is_file(), "pip installed no bin/conform");
    let out = Command::new(&conform).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("conform {version}")
    );
    let out = Command::new(&conform)
        .args(["run", "--protocol", "agent-socket", "--format", "json"])
        .output()
        .unwrap();
    let report = support::report_from(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the installed conform against its builtin server: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["summary"]["failed"], 0);
    assert!(
        report["summary"]["total"].as_u64().unwrap() > 40,
        "the whole suite ran"
    );
    let _ = std::fs::remove_dir_all(&run);
}
