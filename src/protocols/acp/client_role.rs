//! `--role client` for ACP, the IO half: the scripted agent process the
//! client spawns (`conform peer --protocol acp`, serving [`ScriptedAgent`]
//! on stdio and recording every line), the per-case run that starts the
//! client with `{agent}` replaced by that command, and conform's reference
//! client (the `builtin` target). Grading is sans-IO in [`scripted`].

use super::editor::{Answer, Editor};
use super::scripted::{self, ClientEnd, Event, Script, ScriptedAgent};
use super::steps::Permission;
use crate::case::Case;
use crate::error::RunError;
use crate::evidence::Evidence;
use crate::matcher::{shell_quote, truncate};
use crate::outcome::{
    CaseResult, Direction, RunReport, TRANSCRIPT_ENTRIES, TRANSCRIPT_ENTRY_LIMIT, TranscriptEntry,
};
use crate::runner;
use crate::target::Target;
use crate::transport::process;
use crate::transport::stdio::{LineStream, StreamEvent};
use crate::wire::line::LineDecoder;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// The longest line either side reads.
const LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Serves the scripted agent of `script` on stdio, appending every event to
/// `record` (JSON lines), until stdin closes.
pub async fn serve_peer(script: PathBuf, record: PathBuf) -> std::io::Result<()> {
    let script: Script = serde_json::from_slice(&std::fs::read(script)?)
        .map_err(|e| std::io::Error::other(format!("the script: {e}")))?;
    let mut agent = ScriptedAgent::new(script);
    let mut rec = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record)?;
    let started = Instant::now();
    let ms = || started.elapsed().as_millis() as u64;
    let mut log = |e: &Event| -> std::io::Result<()> {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        rec.write_all(&line)
    };
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let mut decoder = LineDecoder::new(LINE_LIMIT);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stdin.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let mut input = &buf[..n];
        while !input.is_empty() {
            let (used, item) = decoder.feed(input);
            input = &input[used..];
            let Some(Ok(line)) = item else { continue };
            log(&Event::In {
                t_ms: ms(),
                line: String::from_utf8_lossy(&line).into_owned(),
                utf8: std::str::from_utf8(&line).is_ok(),
            })?;
            let (out, files) = agent.handle(&line);
            for (name, ok, detail) in files {
                log(&Event::File {
                    t_ms: ms(),
                    name,
                    ok,
                    detail,
                })?;
            }
            for msg in out {
                let mut bytes = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
                log(&Event::Out {
                    t_ms: ms(),
                    line: String::from_utf8_lossy(&bytes).into_owned(),
                })?;
                bytes.push(b'\n');
                stdout.write_all(&bytes).await?;
                stdout.flush().await?;
            }
        }
    }
}

/// Runs the client `cases` and reports.
pub async fn run(
    options: &crate::suite::RunOptions,
    cases: Vec<Case<super::ClientCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    if let Target::Unix(_) = options.target {
        return Err(RunError::Usage(
            "--role client tests a client conform starts: --target builtin or exec:<command line> with {agent}".into(),
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| RunError::Conform(format!("cannot find conform's own executable: {e}")))?;
    let ctx = (options.target.clone(), exe, options.strict);
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
    Ok(super::CLIENT.report(options, results, vec![]))
}

async fn run_nth(
    ctx: Arc<(Target, PathBuf, bool)>,
    cases: Arc<Vec<Case<super::ClientCases>>>,
    i: usize,
) -> CaseResult {
    let (target, exe, strict) = &*ctx;
    run_case(&cases[i], target, exe, *strict).await
}

async fn run_case(
    case: &Case<super::ClientCases>,
    target: &Target,
    exe: &Path,
    strict: bool,
) -> CaseResult {
    let started = Instant::now();
    let (evidence, transcript) = match observe(case, target, exe, started).await {
        Err(why) => (Evidence::failed_to_run(why), vec![]),
        Ok((events, end, log)) => (
            scripted::evidence(case, &events, end),
            transcript(&events, &log),
        ),
    };
    CaseResult::graded(case, evidence, strict, started, transcript)
}

fn transcript(events: &[Event], client_log: &str) -> Vec<TranscriptEntry> {
    let entry = |t_ms: u64, dir: Direction, data: &str| TranscriptEntry {
        t_ms,
        conn: "agent".into(),
        dir,
        data: truncate(data, TRANSCRIPT_ENTRY_LIMIT),
    };
    let mut out: Vec<TranscriptEntry> = events
        .iter()
        .take(TRANSCRIPT_ENTRIES)
        .map(|e| match e {
            // From the agent's side: what the client sent is received.
            Event::In { t_ms, line, .. } => entry(*t_ms, Direction::Received, line),
            Event::Out { t_ms, line } => entry(*t_ms, Direction::Sent, line),
            Event::File {
                t_ms, name, detail, ..
            } => entry(
                *t_ms,
                Direction::Event,
                &format!("checkFile {name}: {detail}"),
            ),
        })
        .collect();
    if !client_log.trim().is_empty() && out.len() < TRANSCRIPT_ENTRIES {
        out.push(TranscriptEntry {
            t_ms: out.last().map_or(0, |e| e.t_ms),
            conn: "client".into(),
            dir: Direction::Event,
            data: truncate(client_log, TRANSCRIPT_ENTRY_LIMIT),
        });
    }
    out
}

/// Runs the client against the case's scripted agent; returns the agent's
/// record, how the client ended, and what it logged.
async fn observe(
    case: &Case<super::ClientCases>,
    target: &Target,
    exe: &Path,
    started: Instant,
) -> Result<(Vec<Event>, ClientEnd, String), String> {
    let script = &case.config;
    let peer = crate::peer::prepare("conform-acpc-", "acp", exe, script)?;
    let work = peer.dir.path().join("work");
    std::fs::create_dir(&work).map_err(|e| format!("cannot create the client's cwd: {e}"))?;
    let agent = peer.command.clone();
    let deadline = started + Duration::from_secs_f64(script.deadline_seconds());
    let builtin = {
        let (agent, work, id) = (agent.clone(), work.clone(), case.id.clone());
        async move { reference_client(&agent, &work, &id).await }
    };
    let line = |cmd: &str| {
        format!(
            "cd {} && {}",
            shell_quote(&work.display().to_string()),
            cmd.replace("{agent}", &agent)
        )
    };
    let env = [
        ("CONFORM_AGENT", std::ffi::OsStr::new(&agent)),
        ("CONFORM_SCENARIO", std::ffi::OsStr::new(&case.id)),
    ];
    let ended =
        crate::peer::launch(target, "client", builtin, line, &env, started, deadline).await?;
    let end = if ended.stopped {
        ClientEnd::Stopped { ms: ended.ms }
    } else {
        ClientEnd::Exited {
            code: ended.code,
            ms: ended.ms,
        }
    };
    let (log, record) = (ended.log, peer.record);
    let events = crate::peer::read_record::<Event>(&record)?;
    Ok((events, end, log))
}

/// conform's reference client: the workload of the README ("Testing an ACP
/// client") against the agent `agent_cmd`, in `cwd`. Returns the exit
/// status and a log.
pub async fn reference_client(agent_cmd: &str, cwd: &Path, scenario: &str) -> (i32, Vec<String>) {
    let mut log = Vec::new();
    let line = format!(
        "cd {} && exec {agent_cmd}",
        shell_quote(&cwd.display().to_string())
    );
    let mut stream = match LineStream::spawn(&line, &[], LINE_LIMIT) {
        Ok(s) => s,
        Err(e) => {
            log.push(format!("cannot start the agent: {e}"));
            return (1, log);
        }
    };
    let cancel = scenario.contains("/cancel/");
    let mut editor = Editor::new(PathBuf::from(cwd), Permission::Allow);
    let code = match workload(&mut stream, &mut editor, cwd, cancel, &mut log).await {
        Ok(()) => 0,
        Err(why) => {
            log.push(why);
            1
        }
    };
    stream.close_stdin();
    let _ = stream.process.wait_for_exit(Duration::from_secs(2)).await;
    let _ = stream.process.shutdown(process::TERM_GRACE).await;
    (code, log)
}

const WAIT: Duration = Duration::from_secs(15);

async fn send(stream: &mut LineStream, msg: &Value) -> Result<(), String> {
    let mut bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    stream.send(&bytes, WAIT).await
}

/// Sends request `id` and answers the agent until its response comes.
async fn call(
    stream: &mut LineStream,
    editor: &mut Editor,
    id: i64,
    method: &str,
    params: Value,
    cancel: bool,
    log: &mut Vec<String>,
) -> Result<Value, String> {
    send(
        stream,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await?;
    let until = Instant::now() + WAIT;
    let mut pending_permissions: Vec<Value> = Vec::new();
    loop {
        let Some((_, event)) = stream.next(until).await else {
            return Err(format!(
                "no response to {method} within {}s",
                WAIT.as_secs()
            ));
        };
        let line = match event {
            StreamEvent::Line(l) => l,
            StreamEvent::Closed { .. } => return Err(format!("the agent closed during {method}")),
            other => return Err(format!("the agent's output broke: {other:?}")),
        };
        let Ok(msg) = crate::jsonrpc::parse_json(&line) else {
            log.push("the agent wrote a line that is not JSON".into());
            continue;
        };
        match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
            (Some(m), Some(req_id)) => {
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                if m == "session/request_permission" && cancel {
                    // The cancel scenario: cancel the turn while the
                    // permission is pending, then answer it as cancelled.
                    pending_permissions.push(req_id.clone());
                    send(
                        stream,
                        &json!({"jsonrpc": "2.0", "method": "session/cancel",
                            "params": {"sessionId": scripted::SESSION_ID}}),
                    )
                    .await?;
                    for p in pending_permissions.drain(..) {
                        send(
                            stream,
                            &Answer::Result(json!({"outcome": {"outcome": "cancelled"}}))
                                .to_message(&p),
                        )
                        .await?;
                    }
                    continue;
                }
                let answer = editor.answer(m, &params, WAIT).await;
                send(stream, &answer.to_message(req_id)).await?;
            }
            (Some(_), None) => {} // a notification: session/update
            (None, Some(got)) if *got == json!(id) => {
                return match msg.get("result") {
                    Some(r) => Ok(r.clone()),
                    None => Err(format!("{method} failed: {}", msg["error"])),
                };
            }
            _ => {}
        }
    }
}

async fn workload(
    stream: &mut LineStream,
    editor: &mut Editor,
    cwd: &Path,
    cancel: bool,
    log: &mut Vec<String>,
) -> Result<(), String> {
    let init = call(
        stream,
        editor,
        0,
        "initialize",
        json!({"protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
            "clientInfo": {"name": "conform-reference-client", "version": env!("CARGO_PKG_VERSION")}}),
        cancel,
        log,
    )
    .await?;
    if init.get("protocolVersion") != Some(&json!(1)) {
        return Err(format!(
            "the agent speaks protocol version {}",
            init["protocolVersion"]
        ));
    }
    let session = call(
        stream,
        editor,
        1,
        "session/new",
        json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        cancel,
        log,
    )
    .await?;
    let id = session["sessionId"].clone();
    let done = call(
        stream,
        editor,
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "conform"}]}),
        cancel,
        log,
    )
    .await?;
    log.push(format!("the turn ended: {}", done["stopReason"]));
    Ok(())
}
