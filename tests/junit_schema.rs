//! `--format junit` validates against the JUnit schema Jenkins' xunit
//! plugin defines and pytest validates its own reports with (junit-10.xsd).
//! The schema comes from the pytest source distribution on PyPI and the
//! validator is the `xmlschema` package, both fetched into the test's
//! temporary directory; without them (no pip, no network) the test says so
//! and skips.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{conform, fixture_target, python_available};

const PYTEST_SDIST: &str = "pytest==8.3.4";

/// The schema and a directory holding `xmlschema`, fetched once.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("junit-schema");
    let xsd = dir.join("junit-10.xsd");
    let lib = dir.join("lib");
    let pip = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("python3")
            .args(["-m", "pip"])
            .args(args)
            .arg("-q")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    if !xsd.exists() {
        let dl = dir.join("dl");
        pip(&[
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            PYTEST_SDIST,
            "-d",
            dl.to_str().unwrap(),
        ])
        .map_err(|e| format!("could not download the {PYTEST_SDIST} sdist: {e}"))?;
        let script = format!(
            "import glob,tarfile\nt=tarfile.open(glob.glob({:?})[0])\nm=[x for x in t.getmembers() if x.name.endswith('testing/example_scripts/junit-10.xsd')][0]\nopen({:?},'wb').write(t.extractfile(m).read())",
            dl.join("pytest-*.tar.gz").display().to_string(),
            xsd.display().to_string()
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "could not fetch junit-10.xsd from the {PYTEST_SDIST} sdist: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    if !lib.join("xmlschema").exists() {
        pip(&["install", "--target", lib.to_str().unwrap(), "xmlschema"])
            .map_err(|e| format!("could not install xmlschema: {e}"))?;
    }
    Ok((xsd, lib))
}

fn errors(xsd: &Path, lib: &Path, report: &Path) -> String {
    let out = Command::new("python3")
        .env("PYTHONPATH", lib)
        .args([
            "-c",
            "import sys, xmlschema\ns = xmlschema.XMLSchema(sys.argv[1])\nfor e in s.iter_errors(sys.argv[2]): print(str(e).splitlines()[0], e.path)",
        ])
        .arg(xsd)
        .arg(report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn junit_reports_validate_against_the_jenkins_junit_schema() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let (xsd, lib) = match tools() {
        Ok(t) => t,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let acp_fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/acp_agent.py");
    let needs_auth = format!("exec:python3 {acp_fixture} --variant needs-auth");
    // Passes, failures with warnings and infos, skips; another protocol; MUSTs
    // left unexercised; several targets in one run (a suite each).
    let runs: Vec<(&str, Vec<String>)> = vec![
        ("agent-socket", vec!["builtin".to_owned()]),
        ("agent-socket", vec![fixture_target("--deviation wrong-id")]),
        ("agent-socket", vec![fixture_target("--variant tools-only")]),
        ("acp", vec!["builtin".to_owned()]),
        ("acp", vec![needs_auth]),
        (
            "agent-socket",
            vec!["builtin".to_owned(), fixture_target("--deviation wrong-id")],
        ),
    ];
    for (i, (protocol, targets)) in runs.iter().enumerate() {
        let file = dir.path().join(format!("{i}.xml"));
        let target = targets.join(" ");
        let out = conform()
            .args(["run", "--protocol", protocol, "--format", "junit"])
            // A loaded CI machine can take a while to start a Python target.
            .args(["--startup-timeout", "60"])
            .args(targets.iter().flat_map(|t| ["--target", t.as_str()]))
            .arg("--output")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(0 | 1 | 3)),
            "{target}: {out:?}"
        );
        let errs = errors(&xsd, &lib, &file);
        assert!(errs.is_empty(), "{protocol} against {target}:\n{errs}");
    }
    // The validator does catch a report that breaks the schema.
    let bad = dir.path().join("bad.xml");
    std::fs::write(
        &bad,
        "<testsuites><testsuite><testcase/></testsuite></testsuites>",
    )
    .unwrap();
    assert!(!errors(&xsd, &lib, &bad).is_empty());
}
