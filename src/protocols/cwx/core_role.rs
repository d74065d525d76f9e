//! `--role core` for cwx, the IO half: the scripted host process the core
//! launches (`conform peer --protocol cwx`, serving [`ScriptedHost`] on
//! framed stdio and recording every frame), the per-case run that starts
//! the core with `{host}` replaced by that command, and conform's reference
//! core (the `builtin` target). Grading is sans-IO in [`scripted`].

use super::reference::{TOY_ENTRY, TOY_SHA256};
use super::scripted::{self, CoreEnd, Event, Script, ScriptedHost};
use super::table::Tier;
use crate::case::Case;
use crate::evidence::Evidence;
use crate::outcome::{CaseResult, Direction, Transcript, TranscriptEntry};
use crate::peer::{PeerScript, Record};
use crate::target::Target;
use crate::transport::process;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::transport::stdio::{Launcher, LineStream, StreamEvent};
use crate::wire::{Codec, Refused};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// The scripted host as a served peer, writing down every frame it
/// exchanges: its pid first, then its hello.
pub struct Peer {
    host: ScriptedHost,
    record: Record,
    started: Instant,
    /// Served by a process of its own, whose pid the record starts with.
    own_process: bool,
}

impl Peer {
    pub fn new(script: Script, record: Record) -> Peer {
        Peer {
            host: ScriptedHost::new(script),
            record,
            started: Instant::now(),
            own_process: true,
        }
    }

    /// The peer served inside conform, in memory.
    pub fn in_memory(script: Script, record: Record) -> Peer {
        Peer {
            own_process: false,
            ..Peer::new(script, record)
        }
    }

    fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The messages as served, each written down.
    fn out(&mut self, messages: Vec<Value>) -> Vec<Out> {
        for m in &messages {
            let t_ms = self.ms();
            self.record.write(&Event::Out {
                t_ms,
                payload: m.to_string(),
            });
        }
        messages.into_iter().map(Out::Message).collect()
    }
}

impl Served for Peer {
    fn codec(&self) -> Codec {
        Codec::Frames
    }

    fn greet(&mut self, _: std::time::Instant) -> Vec<Out> {
        if self.own_process {
            self.record.write(&Event::Pid {
                pid: std::process::id(),
            });
        }
        let hello = self.host.hello();
        self.out(vec![hello])
    }

    fn handle(&mut self, payload: &[u8], now: std::time::Instant) -> Vec<Out> {
        let t_ms = self.ms();
        if std::str::from_utf8(payload).is_err() {
            self.record.write(&Event::NotUtf8 { t_ms });
        }
        self.record.write(&Event::In {
            t_ms,
            payload: String::from_utf8_lossy(payload).into_owned(),
        });
        let known = self.host.provoked.len();
        let written = self.host.handle(payload, now);
        let t_ms = self.ms();
        for (id, method) in self.host.provoked[known..].iter().cloned() {
            self.record.write(&Event::Provoked { t_ms, id, method });
        }
        let mut out = self.out(written.messages);
        if let Some(broken) = written.broken {
            out.push(Out::Raw(broken.to_vec()));
            let t_ms = self.ms();
            self.record.write(&Event::BrokeFrame { t_ms });
        }
        out
    }

    /// A host whose framing is lost stops reading; it waits for the core to
    /// end it.
    fn refused(&mut self, why: &Refused, _: std::time::Instant) -> (Vec<Out>, AfterRefusal) {
        let t_ms = self.ms();
        let why = match why {
            Refused::Broken(why) => why.clone(),
            Refused::TooLong { limit } => format!("a frame over {limit} bytes"),
        };
        self.record.write(&Event::BadFrame { t_ms, why });
        (vec![], AfterRefusal::Drain)
    }

    fn next_deadline(&self) -> Option<std::time::Instant> {
        self.host.next_deadline()
    }

    fn tick(&mut self, now: std::time::Instant) -> Vec<Out> {
        let due = self.host.tick(now);
        self.out(due)
    }

    fn done(&self) -> bool {
        self.host.done()
    }

    fn closed(&mut self, _: std::time::Instant) {
        let t_ms = self.ms();
        self.record.write(&Event::Closed { t_ms });
    }
}

impl crate::peer::PeerRole for super::CoreCases {
    type Event = Event;
    type End = CoreEnd;
    type Peer = Peer;
    const ROLE: crate::suite::Role = crate::suite::Role::Core;
    const PLACEHOLDER: &'static str = "{host}";

    fn peer(script: Script, record: Record) -> Peer {
        Peer::new(script, record)
    }

    /// Runs the core against the case's scripted host; returns the host's
    /// record, how the core ended, and what it logged.
    async fn observe(
        case: &Case<Self>,
        target: &Target,
        exe: &Path,
        started: Instant,
    ) -> Result<(Vec<Event>, CoreEnd, String), String> {
        let script = &case.config;
        let peer = crate::peer::prepare("conform-cwxc-", "cwx", exe, script)?;
        let host = peer.command.clone();
        let record = peer.record.clone();
        let deadline = started + Duration::from_secs_f64(script.deadline_seconds());
        let builtin = {
            let launcher = Launcher::Command(format!("exec {host}"));
            let tier = script.tier;
            async move { reference_core(&launcher, tier).await }
        };
        let env = [
            ("CONFORM_HOST", std::ffi::OsStr::new(&host)),
            ("CONFORM_TIER", std::ffi::OsStr::new(script.tier.name())),
            ("CONFORM_SCENARIO", std::ffi::OsStr::new(&case.id)),
        ];
        let (ended, host_left_open) = match target {
            Target::Exec(cmd) => {
                launch_lingering(
                    &cmd.replace("{host}", &host),
                    &env,
                    &record,
                    started,
                    deadline,
                )
                .await?
            }
            _ => {
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
                (ended, false)
            }
        };
        let (code, stopped, log) = (ended.code, ended.stopped, ended.log);
        let end_ms = ended.ms;
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
                host_left_open,
            },
            log,
        ))
    }

    fn evidence(case: &Case<Self>, events: &[Event], end: CoreEnd) -> Evidence {
        scripted::evidence(case, events, end)
    }

    fn transcript(events: &[Event], core_log: &str, started: Instant) -> Vec<TranscriptEntry> {
        let mut t = Transcript::new(started);
        for e in events {
            let _ = match e {
                Event::Pid { .. } => None,
                Event::In { t_ms, payload } => {
                    t.log_at(*t_ms, "host", Direction::Received, payload)
                }
                Event::Out { t_ms, payload } => t.log_at(*t_ms, "host", Direction::Sent, payload),
                Event::BadFrame { t_ms, why } => t.log_at(
                    *t_ms,
                    "host",
                    Direction::Event,
                    &format!("a broken frame from the core: {why}"),
                ),
                Event::BrokeFrame { t_ms } => t.log_at(
                    *t_ms,
                    "host",
                    Direction::Event,
                    "the host wrote a frame with a bad magic",
                ),
                Event::Closed { t_ms } => t.log_at(
                    *t_ms,
                    "host",
                    Direction::Event,
                    "the core closed the host's stdin",
                ),
                Event::NotUtf8 { t_ms } => t.log_at(
                    *t_ms,
                    "host",
                    Direction::Event,
                    "the core's next payload is not UTF-8",
                ),
                Event::Provoked { t_ms, id, method } => t.log_at(
                    *t_ms,
                    "host",
                    Direction::Event,
                    &format!("the host's {method} (id {id}) asks for a refusal"),
                ),
            };
        }
        if !core_log.trim().is_empty() {
            t.log_at(t.last_ms(), "core", Direction::Event, core_log);
        }
        t.into_entries()
    }
}

/// Runs the core `line` (an `exec:` target) until it exits or `deadline`
/// passes. Once it has exited by itself, its host has
/// [`scripted::HOST_EOF_WITHIN_MS`] to see the end of its stdin (or end)
/// before conform ends the core's group: whether it did not is the second
/// value ("Production relies on stdin EOF at process exit").
async fn launch_lingering(
    line: &str,
    env: &[(&str, &std::ffi::OsStr)],
    record: &Path,
    started: Instant,
    deadline: Instant,
) -> Result<(crate::peer::Ended, bool), String> {
    use crate::transport::process::Stdio3;
    let mut spawned = process::spawn(line, env, Stdio3::CaptureOutput)
        .map_err(|e| format!("cannot start `{line}`: {e}"))?;
    let status = spawned
        .wait_for_exit(deadline.saturating_duration_since(Instant::now()))
        .await;
    let ms = started.elapsed().as_millis() as u64;
    let mut left_open = false;
    if status.is_some() {
        let until = Instant::now() + Duration::from_millis(scripted::HOST_EOF_WITHIN_MS);
        left_open = true;
        loop {
            let events = crate::peer::read_record::<Event>(record).unwrap_or_default();
            let closed = events.iter().any(|e| matches!(e, Event::Closed { .. }));
            let gone = events
                .iter()
                .find_map(|e| match e {
                    Event::Pid { pid } => Some(*pid),
                    _ => None,
                })
                .is_none_or(|pid| !process::is_running(pid as i32));
            if closed || gone {
                left_open = false;
                break;
            }
            if Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // The whole group, the scripted host it spawned included.
    let _ = spawned.shutdown(process::TERM_GRACE).await;
    Ok((
        crate::peer::Ended {
            code: status.and_then(|s| s.code()),
            stopped: status.is_none(),
            ms,
            log: spawned.stderr_tail(),
        },
        left_open,
    ))
}

/// Runs `core` in this process against the case's scripted host served over
/// in-memory pipes, bounded by the case's deadline, and grades it: the
/// driver with no process (the unit tests').
pub async fn run_in_memory<F, Fut>(
    case: &Case<super::CoreCases>,
    strict: bool,
    core: F,
) -> CaseResult
where
    F: FnOnce(Launcher) -> Fut,
    Fut: std::future::Future<Output = (i32, Vec<String>)>,
{
    let started = Instant::now();
    let script = case.config.clone();
    let host = crate::peer::InMemory::serve(move |record| Peer::in_memory(script.clone(), record));
    let deadline = started + Duration::from_secs_f64(case.config.deadline_seconds());
    let finished = crate::peer::until(deadline, core(host.launcher.clone())).await;
    let ms = started.elapsed().as_millis() as u64;
    // Give the host a moment to see its stdin close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, log) = match finished {
        Some((code, log)) => (Some(code), log),
        None => (None, String::new()),
    };
    let end = CoreEnd {
        code,
        stopped: code.is_none(),
        ms,
        host_outlived: !host.has_ended(),
        host_left_open: false,
    };
    crate::peer::graded(case, Ok((host.events(), end, log)), strict, started)
}

/// conform's reference core: the workload of docs/cwx.md ("Testing a
/// core") against the host of `tier` that `host` starts.
pub async fn reference_core(host: &Launcher, tier: Tier) -> (i32, Vec<String>) {
    crate::peer::run_reference(host, "host", Codec::Frames, 3, async |stream, log| {
        workload(stream, tier, log).await
    })
    .await
}

const WAIT: Duration = Duration::from_secs(15);

async fn send(stream: &mut LineStream, msg: &Value) -> Result<(), String> {
    stream.send_message(msg, WAIT).await
}

/// The next message from the host before `until`, read strictly the
/// seed's way for `tier`; a broken frame, or a message its parser refuses
/// ("both parsers admit nothing else"), is a protocol error that ends the host.
async fn next(
    stream: &mut LineStream,
    tier: Tier,
    until: Instant,
) -> Result<Option<Value>, String> {
    match stream.next(until).await {
        None => Ok(None),
        Some((_, StreamEvent::Line(payload))) => {
            let v = crate::jsonrpc::parse_json(&payload)
                .map_err(|e| format!("protocol error: a payload that is not JSON ({e})"))?;
            super::validate::parse_host_message(v.clone(), tier)
                .map_err(|e| format!("protocol error: {e}"))?;
            Ok(Some(v))
        }
        Some((_, StreamEvent::Closed { .. })) => Err("the host closed its stdout".into()),
        Some((_, other)) => Err(format!("protocol error: {other:?}")),
    }
}

/// Sends request `id` and answers the host until its answer, or until
/// `within` passes: then `$/cancel` and `Ok(None)`.
async fn call(
    stream: &mut LineStream,
    tier: Tier,
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
        let Some(msg) = next(stream, tier, until).await? else {
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
        match next(stream, tier, Instant::now() + WAIT).await? {
            Some(m) if m["method"] == "host/hello" => break m,
            Some(_) => continue,
            None => return Err("no host/hello".into()),
        }
    };
    // "The core refuses a host that reports any tier but the one it launched."
    if hello.pointer("/params/tier") != Some(&json!(tier.name())) {
        return Err(format!(
            "the host serves tier {}, not the {tier} it was launched for",
            hello["params"]["tier"]
        ));
    }
    // "The core refuses a host whose list is not the one its own table
    // pins": this core pins no built-in module.
    if hello.pointer("/params/builtin_modules") != Some(&json!([])) {
        return Err(format!(
            "the host lists built-in modules {}, and this core's table pins none",
            hello["params"]["builtin_modules"]
        ));
    }
    let mut handles = Vec::new();
    let limits = json!({"max_frame": crate::wire::frame::MAX_FRAME, "max_inflight": 256,
        "dispose_deadline_ms": 5000, "activate_deadline_ms": 10000});
    call(
        stream,
        tier,
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
        tier,
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
        tier,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Kind;
    use crate::outcome::Outcome;
    use crate::wire::frame::encode;

    fn case(id: &str) -> Case<super::super::CoreCases> {
        crate::case::embedded(id)
    }

    #[tokio::test(start_paused = true)]
    async fn the_reference_core_passes_over_the_in_memory_channel() {
        let c = case("cwx/core/workload/plugin");
        let r = run_in_memory(&c, false, |host| async move {
            reference_core(&host, Tier::Plugin).await
        })
        .await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_core_that_sends_a_method_of_no_table_breaks_a_typed_rule() {
        let c = case("cwx/core/workload/plugin");
        let r = run_in_memory(&c, false, |host| async move {
            let mut s = host.start(&[], Codec::Frames).unwrap();
            let _ = s.next(Instant::now() + WAIT).await;
            let frame = encode(br#"{"jsonrpc":"2.0","id":1,"method":"host/bogus","params":{}}"#);
            let _ = s.send(&frame.unwrap_or_default(), WAIT).await;
            let _ = s.next(Instant::now() + Duration::from_secs(1)).await;
            (0, vec![])
        })
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let f = r.finding(scripted::rules::FRAMES).expect("the frames rule");
        assert_eq!(f.kind, Kind::Shape);
    }

    #[tokio::test(start_paused = true)]
    async fn a_core_that_never_ends_is_stopped_at_the_case_deadline() {
        let c = case("cwx/core/workload/plugin");
        let r = run_in_memory(&c, false, |_| std::future::pending()).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert!(
            r.message.contains("never sent host/initialize"),
            "{}",
            r.message
        );
    }
}
