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

/// The MUST layer of conform's result shapes (`validate::vibe_read`)
/// against the real Vibe's pydantic models (`tests/fixtures/vibe_reads.py`):
/// for every field of every reply model, left out, null and given values of
/// every JSON type, conform refuses exactly what Vibe refuses, and reads
/// what it accepts as Vibe does ("3" as 3, "30" as 30.0, true as 1).
#[test]
fn conform_reads_replies_as_the_real_vibe_does() {
    use conform::protocols::agent_socket::{table, validate};
    use serde_json::{Value, json};
    use std::io::Write;
    let python = match vibe_python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: the real Vibe cannot be installed here: {why}");
            return;
        }
    };
    let tool = json!({"namespace": "n", "name": "t", "description": "d", "inputSchema": {},
                      "outputSchema": null, "modelAccess": "both"});
    let models: Vec<(&str, &[table::Field], Value)> = vec![
        (
            "_InitializeResult",
            table::INITIALIZE_RESULT,
            json!({"protocolVersion": 2, "workspace": "/w", "python": "/p", "tools": [tool],
                   "toolTimeoutSeconds": 30, "instructions": "i"}),
        ),
        (
            "_ExecuteResult",
            table::EXECUTE_RESULT,
            json!({"exitCode": 0, "stdout": "o", "stderr": "e"}),
        ),
        (
            "_ReadFileResult",
            table::READ_FILE_RESULT,
            json!({"contentBase64": "aGk="}),
        ),
        (
            "_ToolCallResult",
            table::TOOL_CALL_RESULT,
            json!({"output": 1, "annotations": {}, "error": {"message": "m", "code": "c", "details": null}}),
        ),
        (
            "_ErrorBody",
            table::ERROR_BODY,
            json!({"code": -32001, "message": "m", "data": null}),
        ),
    ];
    let values = [
        json!(0),
        json!(3),
        json!(-1),
        json!(2.0),
        json!(2.5),
        json!(1e20),
        json!("2"),
        json!(" 2 "),
        json!("2.0"),
        json!("2.5"),
        json!("x"),
        json!(""),
        json!(true),
        json!(false),
        json!([]),
        json!([1]),
        json!({}),
        json!({"a": 1}),
        json!("both"),
    ];
    // Every field left out, null, or given each value; nested fields too.
    let mut samples: Vec<(&str, &[table::Field], Value)> = Vec::new();
    let mut vary = |model: &'static str, fields: &'static [table::Field], base: &Value| {
        samples.push((model, fields, base.clone()));
        for f in fields {
            let mut without = base.clone();
            without.as_object_mut().unwrap().remove(f.name);
            samples.push((model, fields, without));
            for v in std::iter::once(&Value::Null).chain(&values) {
                let mut with = base.clone();
                with[f.name] = v.clone();
                samples.push((model, fields, with));
            }
        }
    };
    for (model, fields, base) in &models {
        vary(model, fields, base);
    }
    // Inside a tool definition and a tool error.
    for f in table::TOOL_DEFINITION {
        for v in std::iter::once(None)
            .chain(std::iter::once(Some(Value::Null)))
            .chain(values.iter().cloned().map(Some))
        {
            let mut t = tool.clone();
            match &v {
                None => {
                    t.as_object_mut().unwrap().remove(f.name);
                }
                Some(v) => t[f.name] = v.clone(),
            }
            let mut base = models[0].2.clone();
            base["tools"] = json!([t]);
            samples.push(("_InitializeResult", table::INITIALIZE_RESULT, base));
        }
    }
    for f in table::TOOL_ERROR {
        for v in std::iter::once(Value::Null).chain(values.iter().cloned()) {
            let mut base = models[3].2.clone();
            base["error"][f.name] = v;
            samples.push(("_ToolCallResult", table::TOOL_CALL_RESULT, base));
        }
    }
    let mut child = Command::new(&python)
        .arg(format!(
            "{}/tests/fixtures/vibe_reads.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the venv's python runs");
    {
        let mut stdin = child.stdin.take().unwrap();
        for (model, _, value) in &samples {
            writeln!(stdin, "{}", json!({"model": model, "value": value})).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "vibe_reads.py failed");
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), samples.len());
    let mut differ = Vec::new();
    for ((model, fields, value), answer) in samples.iter().zip(&answers) {
        let ours = validate::vibe_read(value, fields, "result");
        let vibe_accepts = answer["accepted"] == true;
        match (&ours, vibe_accepts) {
            (Ok(read), true) => {
                // Every field given is read as Vibe reads it.
                for f in fields.iter() {
                    if let Some(given) = value.get(f.name)
                        && !given.is_null()
                        && !same_reading(&read[f.name], &answer["read"][f.name])
                    {
                        differ.push(format!(
                            "{model} {value}: {} read as {}, Vibe reads {}",
                            f.name, read[f.name], answer["read"][f.name]
                        ));
                    }
                }
            }
            (Err(why), true) => differ.push(format!(
                "{model} {value}: Vibe accepts, conform refuses: {why:?}"
            )),
            (Ok(_), false) => {
                differ.push(format!("{model} {value}: Vibe refuses, conform accepts"))
            }
            (Err(_), false) => {}
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} samples read otherwise than Vibe reads them:\n{}",
        differ.len(),
        samples.len(),
        differ.join("\n")
    );
}

/// Two readings of a value agree: numbers by value, objects on the keys
/// conform keeps (Vibe adds its defaults), the rest exactly.
fn same_reading(ours: &serde_json::Value, vibe: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (ours, vibe) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .all(|(k, v)| v.is_null() || b.get(k).is_some_and(|w| same_reading(v, w))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_reading(x, y))
        }
        _ => ours == vibe,
    }
}
