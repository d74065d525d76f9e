//! Replays every stored cargo-fuzz input through the same functions the fuzz
//! targets call (`conform::fuzz::targets`): the seed corpora made from
//! `corpus/`, whatever a local run added, the crash artifacts, and the named
//! regressions. A CI without cargo-fuzz still guards every crash found.

use std::path::Path;

const KINDS: &[&str] = &["corpus", "artifacts", "regressions"];

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_file());
    out.sort();
    out
}

#[test]
fn every_stored_fuzz_input_replays_without_a_failure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failures = Vec::new();
    for (name, _) in conform::fuzz::targets::TARGETS {
        let seeds = files(&root.join("corpus").join(name));
        assert!(
            seeds.iter().any(|p| p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))),
            "{name} has no seed corpus (python3 fuzz/make-seeds.py writes them)"
        );
        for kind in KINDS {
            for path in files(&root.join(kind).join(name)) {
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| conform::fuzz::targets::run(name, &data));
                if outcome.is_err() {
                    failures.push(path.display().to_string());
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "these inputs fail their target: {failures:#?}"
    );
}

#[test]
fn every_stored_input_belongs_to_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for kind in KINDS {
        let Ok(dirs) = std::fs::read_dir(root.join(kind)) else {
            continue;
        };
        for d in dirs.filter_map(Result::ok) {
            let name = d.file_name().to_string_lossy().into_owned();
            assert!(
                conform::fuzz::targets::TARGETS
                    .iter()
                    .any(|(n, _)| *n == name),
                "fuzz/{kind}/{name} names no target"
            );
        }
    }
}

#[test]
fn every_target_has_its_cargo_fuzz_shim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (name, _) in conform::fuzz::targets::TARGETS {
        let shim = std::fs::read_to_string(root.join(format!("fuzz_targets/{name}.rs"))).unwrap();
        assert!(
            shim.contains(&format!("conform::fuzz::targets::{name}(data)")),
            "{name}"
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{name} in fuzz/Cargo.toml"
        );
    }
}

#[test]
fn an_unknown_target_is_not_run() {
    assert!(!conform::fuzz::targets::run("no_such_target", b""));
    assert!(conform::fuzz::targets::run("line_decoder", b""));
}
