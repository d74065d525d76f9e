//! `--role core` for cwx, the IO half: the scripted host process the core
//! launches (`conform peer --protocol cwx`, serving [`ScriptedHost`] on
//! framed stdio and recording every frame), the per-case run that starts
//! the core with `{host}` replaced by that command, and conform's reference
//! core (the `builtin` target). Grading is sans-IO in [`scripted`].

use super::reference::{TOY_ENTRY, TOY_SHA256};
use super::scripted::{self, CoreEnd, Event, Script, ScriptedHost};
use super::table::Tier;
use crate::case::Case;
use crate::error::RunError;
use crate::evidence::Evidence;
use crate::matcher::truncate;
use crate::outcome::{
    CaseResult, Direction, RunReport, TRANSCRIPT_ENTRIES, TRANSCRIPT_ENTRY_LIMIT, TranscriptEntry,
};
use crate::runner;
use crate::target::Target;
use crate::transport::process;
use crate::transport::stdio::{LineStream, StreamEvent};
use crate::wire::frame::{FrameDecoder, encode};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Serves the scripted host of `script` on framed stdio, appending every
/// event to `record`, until stdin closes, a broken frame arrives, or
/// `host/shutdown`.
pub async fn serve_peer(script: PathBuf, record: PathBuf) -> std::io::Result<()> {
    let script: Script = serde_json::from_slice(&std::fs::read(script)?)
        .map_err(|e| std::io::Error::other(format!("the script: {e}")))?;
    let mut host = ScriptedHost::new(script);
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
    log(&Event::Pid {
        pid: std::process::id(),
    })?;
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    async fn write(
        out: &mut tokio::io::Stdout,
        messages: &[Value],
        log: &mut dyn FnMut(&Event) -> std::io::Result<()>,
        t_ms: u64,
    ) -> std::io::Result<()> {
        for m in messages {
            let payload = serde_json::to_vec(m).map_err(std::io::Error::other)?;
            log(&Event::Out {
                t_ms,
                payload: String::from_utf8_lossy(&payload).into_owned(),
            })?;
            if let Some(frame) = encode(&payload) {
                out.write_all(&frame).await?;
            }
        }
        out.flush().await
    }
    write(&mut stdout, &[host.hello()], &mut log, ms()).await?;
    let mut decoder = FrameDecoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    loop {
        let n = tokio::select! {
            r = stdin.read(&mut buf) => r?,
            _ = ticker.tick() => {
                let due = host.tick();
                if !due.is_empty() {
                    write(&mut stdout, &due, &mut log, ms()).await?;
                }
                continue;
            }
        };
        if n == 0 {
            log(&Event::Closed { t_ms: ms() })?;
            return Ok(());
        }
        let mut input = &buf[..n];
        while !input.is_empty() {
            let (used, got) = decoder.feed(input);
            input = &input[used..];
            match got {
                None => {}
                Some(Ok(payload)) => {
                    log(&Event::In {
                        t_ms: ms(),
                        payload: String::from_utf8_lossy(&payload).into_owned(),
                    })?;
                    let (out, broke) = host.handle(&payload);
                    write(&mut stdout, &out, &mut log, ms()).await?;
                    if broke {
                        stdout.write_all(scripted::BAD_FRAME).await?;
                        stdout.flush().await?;
                        log(&Event::BrokeFrame { t_ms: ms() })?;
                    }
                    if host.done() {
                        return Ok(());
                    }
                }
                Some(Err(e)) => {
                    log(&Event::BadFrame {
                        t_ms: ms(),
                        why: e.to_string(),
                    })?;
                    // A host whose framing is lost stops reading; it waits
                    // for the core to end it.
                    let mut sink = vec![0u8; 64 * 1024];
                    while stdin.read(&mut sink).await? > 0 {}
                    log(&Event::Closed { t_ms: ms() })?;
                    return Ok(());
                }
            }
        }
    }
}

pub async fn run(
    options: &crate::suite::RunOptions,
    cases: Vec<Case<super::CoreCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    if let Target::Unix(_) = options.target {
        return Err(RunError::Usage(
            "--role core tests a core conform starts: --target builtin or exec:<command line> with {host}".into(),
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| RunError::Conform(format!("cannot find conform's own executable: {e}")))?;
    let ctx = (options.target.clone(), exe, options.strict);
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
    Ok(super::CORE.report(options, results, vec![]))
}

async fn run_nth(
    ctx: Arc<(Target, PathBuf, bool)>,
    cases: Arc<Vec<Case<super::CoreCases>>>,
    i: usize,
) -> CaseResult {
    let (target, exe, strict) = &*ctx;
    run_case(&cases[i], target, exe, *strict).await
}

async fn run_case(
    case: &Case<super::CoreCases>,
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

fn transcript(events: &[Event], core_log: &str) -> Vec<TranscriptEntry> {
    let entry = |t_ms: u64, dir: Direction, data: &str| TranscriptEntry {
        t_ms,
        conn: "host".into(),
        dir,
        data: truncate(data, TRANSCRIPT_ENTRY_LIMIT),
    };
    let mut out: Vec<TranscriptEntry> = events
        .iter()
        .filter_map(|e| match e {
            Event::Pid { .. } => None,
            Event::In { t_ms, payload } => Some(entry(*t_ms, Direction::Received, payload)),
            Event::Out { t_ms, payload } => Some(entry(*t_ms, Direction::Sent, payload)),
            Event::BadFrame { t_ms, why } => Some(entry(
                *t_ms,
                Direction::Event,
                &format!("a broken frame from the core: {why}"),
            )),
            Event::BrokeFrame { t_ms } => Some(entry(
                *t_ms,
                Direction::Event,
                "the host wrote a frame with a bad magic",
            )),
            Event::Closed { t_ms } => Some(entry(
                *t_ms,
                Direction::Event,
                "the core closed the host's stdin",
            )),
        })
        .take(TRANSCRIPT_ENTRIES)
        .collect();
    if !core_log.trim().is_empty() && out.len() < TRANSCRIPT_ENTRIES {
        out.push(TranscriptEntry {
            t_ms: out.last().map_or(0, |e| e.t_ms),
            conn: "core".into(),
            dir: Direction::Event,
            data: truncate(core_log, TRANSCRIPT_ENTRY_LIMIT),
        });
    }
    out
}

async fn observe(
    case: &Case<super::CoreCases>,
    target: &Target,
    exe: &Path,
    started: Instant,
) -> Result<(Vec<Event>, CoreEnd, String), String> {
    let script = &case.config;
    let peer = crate::peer::prepare("conform-cwxc-", "cwx", exe, script)?;
    let host = peer.command.clone();
    let record = peer.record.clone();
    let deadline = started + Duration::from_secs_f64(script.deadline_seconds());
    let ms = || started.elapsed().as_millis() as u64;
    let builtin = {
        let (host, tier) = (host.clone(), script.tier);
        async move { reference_core(&host, tier).await }
    };
    let env = [
        ("CONFORM_HOST", std::ffi::OsStr::new(&host)),
        ("CONFORM_TIER", std::ffi::OsStr::new(script.tier.name())),
        ("CONFORM_SCENARIO", std::ffi::OsStr::new(&case.id)),
    ];
    let ended = crate::peer::launch(
        target,
        "core",
        builtin,
        |cmd| cmd.replace("{host}", &host),
        &env,
        started,
        deadline,
    )
    .await?;
    let (code, stopped, log) = (ended.code, ended.stopped, ended.log);
    let end_ms = ms();
    // Give the host a moment to see its stdin close, then check it is gone;
    // a host the core left behind is ended here, whatever the verdict.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut events = crate::peer::read_record::<Event>(&record)?;
    let pid = events.iter().find_map(|e| match e {
        Event::Pid { pid } => Some(*pid),
        _ => None,
    });
    let mut host_outlived = false;
    if let Some(pid) = pid
        && process::is_running(pid as i32)
    {
        host_outlived = true;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        events = crate::peer::read_record::<Event>(&record)?;
    }
    Ok((
        events,
        CoreEnd {
            code,
            stopped,
            ms: end_ms,
            host_outlived,
        },
        log,
    ))
}

/// conform's reference core: the workload of the README ("Testing a
/// core") against the host `host_cmd` of `tier`.
pub async fn reference_core(host_cmd: &str, tier: Tier) -> (i32, Vec<String>) {
    let mut log = Vec::new();
    let mut stream = match LineStream::spawn_framed(&format!("exec {host_cmd}"), &[]) {
        Ok(s) => s,
        Err(e) => {
            log.push(format!("cannot start the host: {e}"));
            return (1, log);
        }
    };
    let code = match workload(&mut stream, tier, &mut log).await {
        Ok(()) => 0,
        Err(why) => {
            log.push(why);
            3
        }
    };
    stream.close_stdin();
    let _ = stream.process.wait_for_exit(Duration::from_secs(2)).await;
    let _ = stream.process.shutdown(process::TERM_GRACE).await;
    (code, log)
}

const WAIT: Duration = Duration::from_secs(15);

async fn send(stream: &mut LineStream, msg: &Value) -> Result<(), String> {
    let payload = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
    let frame = encode(&payload).ok_or("a message over the frame limit")?;
    stream.send(&frame, WAIT).await
}

/// The next message from the host before `until`; a broken frame or a
/// message that is not JSON is a protocol error that ends the host.
async fn next(stream: &mut LineStream, until: Instant) -> Result<Option<Value>, String> {
    match stream.next(until).await {
        None => Ok(None),
        Some((_, StreamEvent::Line(payload))) => crate::jsonrpc::parse_json(&payload)
            .map(Some)
            .map_err(|e| format!("protocol error: a payload that is not JSON ({e})")),
        Some((_, StreamEvent::Closed { .. })) => Err("the host closed its stdout".into()),
        Some((_, other)) => Err(format!("protocol error: {other:?}")),
    }
}

/// Sends request `id` and answers the host until its answer, or until
/// `within` passes: then `$/cancel` and `Ok(None)`.
async fn call(
    stream: &mut LineStream,
    id: u64,
    method: &str,
    params: Value,
    within: Duration,
    handles: &mut Vec<(String, u64)>,
) -> Result<Option<Value>, String> {
    send(
        stream,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await?;
    let until = Instant::now() + within;
    loop {
        let Some(msg) = next(stream, until).await? else {
            send(
                stream,
                &json!({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": id}}),
            )
            .await?;
            return Ok(None);
        };
        match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
            (Some("registry/register"), Some(rid)) => {
                let handle = 100 + handles.len() as u64;
                let name = msg
                    .pointer("/params/spec/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                handles.push((name, handle));
                send(
                    stream,
                    &json!({"jsonrpc": "2.0", "id": rid, "result": {"handle": handle}}),
                )
                .await?;
            }
            (Some(m), Some(rid)) => {
                send(
                    stream,
                    &json!({"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32002, "message": format!("conform's core serves no {m}")}}),
                )
                .await?;
            }
            (Some(_), None) => {}
            (None, Some(got)) if *got == json!(id) => {
                return match msg.get("result") {
                    Some(r) => Ok(Some(r.clone())),
                    None => Err(format!("{method} failed: {}", msg["error"])),
                };
            }
            _ => {}
        }
    }
}

async fn workload(
    stream: &mut LineStream,
    tier: Tier,
    log: &mut Vec<String>,
) -> Result<(), String> {
    let hello = loop {
        match next(stream, Instant::now() + WAIT).await? {
            Some(m) if m["method"] == "host/hello" => break m,
            Some(_) => continue,
            None => return Err("no host/hello".into()),
        }
    };
    if hello.pointer("/params/tier") != Some(&json!(tier.name())) {
        return Err(format!(
            "the host serves tier {}, not the {tier} it was launched for",
            hello["params"]["tier"]
        ));
    }
    let mut handles = Vec::new();
    let limits = json!({"max_frame": crate::wire::frame::MAX_FRAME, "max_inflight": 256,
        "dispose_deadline_ms": 5000, "activate_deadline_ms": 10000});
    call(
        stream,
        1,
        "host/initialize",
        json!({"protocol": 1, "limits": limits}),
        WAIT,
        &mut handles,
    )
    .await?
    .ok_or("host/initialize was not answered")?;
    let activated = call(
        stream,
        2,
        "ext/activate",
        json!({"owner": {"plugin_id": "conform-toy", "generation": 1,
                "owner_token": "0123456789abcdef0123456789abcdef"},
            "plugin_name": "conform-toy",
            "entry": {"path": TOY_ENTRY, "sha256": TOY_SHA256}, "config": {}}),
        WAIT,
        &mut handles,
    )
    .await?
    .ok_or("ext/activate was not answered")?;
    log.push(format!("activated: {activated}"));
    let echo = handles
        .iter()
        .find(|(n, _)| n == "echo")
        .map(|(_, h)| *h)
        .ok_or("the extension registered no echo tool")?;
    let deadline_ms = 2000;
    match call(
        stream,
        3,
        "tool/call",
        json!({"handle": echo, "call_id": "conform-1", "input": {}, "deadline_ms": deadline_ms}),
        Duration::from_millis(deadline_ms),
        &mut handles,
    )
    .await?
    {
        Some(r) => log.push(format!("tool/call: {r}")),
        None => log.push("tool/call: no answer by its deadline; cancelled".into()),
    }
    Ok(())
}
