//! `--role client` for ACP, the IO half: the scripted agent process the
//! client spawns (`conform peer --protocol acp`, serving [`ScriptedAgent`]
//! on stdio and recording every line), the per-case run that starts the
//! client with `{agent}` replaced by that command, and conform's reference
//! client (the `builtin` target). Grading is sans-IO in [`scripted`].

use super::editor::{Answer, Editor};
use super::scripted::{self, ClientEnd, Event, Script, ScriptedAgent};
use super::steps::Permission;
use crate::case::Case;
use crate::evidence::Evidence;
use crate::matcher::shell_quote;
use crate::outcome::{CaseResult, Direction, Transcript, TranscriptEntry};
use crate::peer::{PeerScript, Record};
use crate::target::Target;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::transport::stdio::{Launcher, LineStream, StreamEvent};
use crate::wire::{Codec, Refused};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// The longest line either side reads.
const LINE_LIMIT: usize = 16 * 1024 * 1024;

/// The scripted agent as a served peer, writing down every line it
/// exchanges and every file it checks.
pub struct Peer {
    agent: ScriptedAgent,
    record: Record,
    started: Instant,
}

impl Peer {
    pub fn new(script: Script, record: Record) -> Peer {
        Peer {
            agent: ScriptedAgent::new(script),
            record,
            started: Instant::now(),
        }
    }

    fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

impl Served for Peer {
    fn codec(&self) -> Codec {
        Codec::Lines { limit: LINE_LIMIT }
    }

    fn handle(&mut self, line: &[u8], _: std::time::Instant) -> Vec<Out> {
        let t_ms = self.ms();
        self.record.write(&Event::In {
            t_ms,
            line: String::from_utf8_lossy(line).into_owned(),
            utf8: std::str::from_utf8(line).is_ok(),
        });
        let (out, files) = self.agent.handle(line);
        for (name, ok, detail) in files {
            self.record.write(&Event::File {
                t_ms,
                name,
                ok,
                detail,
            });
        }
        for msg in &out {
            self.record.write(&Event::Out {
                t_ms: self.ms(),
                line: msg.to_string(),
            });
        }
        out.into_iter().map(Out::Message).collect()
    }

    /// What the client wrote after its last newline, when it closed its
    /// output: no message, but not nothing (the client ran).
    fn unterminated(&mut self, head: &[u8], count: usize, _: std::time::Instant) {
        self.record.write(&Event::Cut {
            t_ms: self.ms(),
            bytes: count,
            head: String::from_utf8_lossy(head).into_owned(),
        });
    }

    /// A line over the limit is no message of the client's: read past it.
    fn refused(&mut self, _: &Refused, _: std::time::Instant) -> (Vec<Out>, AfterRefusal) {
        (vec![], AfterRefusal::Go)
    }
}

impl crate::peer::PeerRole for super::ClientCases {
    type Event = Event;
    type End = ClientEnd;
    type Peer = Peer;
    const ROLE: crate::suite::Role = crate::suite::Role::Client;
    const PLACEHOLDER: &'static str = "{agent}";

    fn peer(script: Script, record: Record) -> Peer {
        Peer::new(script, record)
    }

    /// Runs the client against the case's scripted agent; returns the
    /// agent's record, how the client ended, and what it logged.
    async fn observe(
        case: &Case<Self>,
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
            let launcher = Launcher::Command(format!(
                "cd {} && exec {agent}",
                shell_quote(&work.display().to_string())
            ));
            let (work, id) = (work.clone(), case.id.clone());
            async move { reference_client(&launcher, &work, &id).await }
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

    fn evidence(case: &Case<Self>, events: &[Event], end: ClientEnd) -> Evidence {
        scripted::evidence(case, events, end)
    }

    fn transcript(events: &[Event], client_log: &str, started: Instant) -> Vec<TranscriptEntry> {
        let mut t = Transcript::new(started);
        for e in events {
            // From the agent's side: what the client sent is received.
            let _ = match e {
                Event::In { t_ms, line, .. } => t.log_at(*t_ms, "agent", Direction::Received, line),
                Event::Out { t_ms, line } => t.log_at(*t_ms, "agent", Direction::Sent, line),
                Event::Cut { t_ms, head, bytes } => t.log_at(
                    *t_ms,
                    "agent",
                    Direction::Received,
                    &format!(
                        "{head} [{bytes} bytes with no newline, then the client closed its output]"
                    ),
                ),
                Event::File {
                    t_ms, name, detail, ..
                } => t.log_at(
                    *t_ms,
                    "agent",
                    Direction::Event,
                    &format!("checkFile {name}: {detail}"),
                ),
            };
        }
        if !client_log.trim().is_empty() {
            t.log_at(t.last_ms(), "client", Direction::Event, client_log);
        }
        t.into_entries()
    }
}

/// Runs `client` in this process against the case's scripted agent served
/// over in-memory pipes, bounded by the case's deadline, and grades it: the
/// driver with no process (the unit tests').
pub async fn run_in_memory<F, Fut>(
    case: &Case<super::ClientCases>,
    strict: bool,
    client: F,
) -> CaseResult
where
    F: FnOnce(Launcher, PathBuf) -> Fut,
    Fut: std::future::Future<Output = (i32, Vec<String>)>,
{
    let started = Instant::now();
    let script = case.config.clone();
    let agent = crate::peer::InMemory::serve(move |record| Peer::new(script.clone(), record));
    let observed = match tempfile::tempdir() {
        Err(e) => Err(format!("cannot create the client's cwd: {e}")),
        Ok(work) => {
            let deadline = started + Duration::from_secs_f64(case.config.deadline_seconds());
            let ended = crate::peer::until(
                deadline,
                client(agent.launcher.clone(), work.path().to_path_buf()),
            )
            .await;
            let ms = started.elapsed().as_millis() as u64;
            let (end, log) = match ended {
                Some((code, log)) => (
                    ClientEnd::Exited {
                        code: Some(code),
                        ms,
                    },
                    log,
                ),
                None => (ClientEnd::Stopped { ms }, String::new()),
            };
            Ok((agent.events(), end, log))
        }
    };
    crate::peer::graded(case, observed, strict, started)
}

/// conform's reference client: the workload of docs/acp.md ("Testing an ACP
/// client") against the agent `agent` starts, in `cwd`. Returns the exit
/// status and a log.
pub async fn reference_client(agent: &Launcher, cwd: &Path, scenario: &str) -> (i32, Vec<String>) {
    let cancel = scenario.contains("/cancel/");
    let mut editor = Editor::new(PathBuf::from(cwd), Permission::Allow);
    let codec = Codec::Lines { limit: LINE_LIMIT };
    crate::peer::run_reference(agent, "agent", codec, 1, async |stream, log| {
        workload(stream, &mut editor, cwd, cancel, log).await
    })
    .await
}

const WAIT: Duration = Duration::from_secs(15);

async fn send(stream: &mut LineStream, msg: &Value) -> Result<(), String> {
    stream.send_message(msg, WAIT).await
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
        1,
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
        2,
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
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "conform"}]}),
        cancel,
        log,
    )
    .await?;
    log.push(format!("the turn ended: {}", done["stopReason"]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Kind;
    use crate::outcome::{Outcome, SkipKind};

    fn case(id: &str) -> Case<super::super::ClientCases> {
        crate::case::embedded(id)
    }

    #[tokio::test(start_paused = true)]
    async fn the_reference_client_passes_over_the_in_memory_channel() {
        let c = case("acp/client/prompt/turn");
        let r = run_in_memory(&c, false, |agent, cwd| async move {
            reference_client(&agent, &cwd, "t").await
        })
        .await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_skips_initialize_breaks_a_typed_rule() {
        let c = case("acp/client/prompt/turn");
        let r = run_in_memory(&c, false, |agent, _| async move {
            let mut s = agent.start(&[], Codec::Lines { limit: LINE_LIMIT }).unwrap();
            let new = br#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}"#;
            let _ = s.send(&[&new[..], b"\n"].concat(), WAIT).await;
            let _ = s.next(Instant::now() + WAIT).await;
            (0, vec![])
        })
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let f = r
            .finding(scripted::rules::INITIALIZE_FIRST)
            .expect("the initialize-first rule");
        assert_eq!(f.kind, Kind::Rule);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_ends_is_stopped_at_the_case_deadline() {
        let c = case("acp/client/prompt/turn");
        let r = run_in_memory(&c, false, |_, _| std::future::pending()).await;
        assert_eq!(r.outcome, Outcome::Skip, "{}", r.message);
        assert_eq!(r.skip_kind, Some(SkipKind::Outside));
        assert!(r.message.contains("conform stopped it"), "{}", r.message);
    }
}
