//! conform as a CWX extension host (`--role core`), sans-IO: the scripted
//! host the core under test launches (through `{host}`), the record of every
//! frame it exchanged, and the grading of the core from that record.
//!
//! The scripted host is conform's reference host (its toy extension, its
//! answers) with what a case's `config` changes: the tier it serves, a
//! `tool/call` it never answers, a broken frame after `host/ready`.

use super::reference::Host;
use super::table::Tier;
use super::validate;
use crate::case::Case;
use crate::evidence::{Evidence, Kind};
use crate::peer::{Check, ExitWant};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub const CASES_DIR: &str = "cwx/core/cases";
/// How late past a call's `deadline_ms` the `$/cancel` may come: scheduling
/// on a shared machine, not leniency about the deadline.
pub const CANCEL_MARGIN_MS: u64 = 1500;
/// How soon after a broken frame the core must have ended the host.
pub const END_WITHIN_MS: u64 = 5000;
/// A frame whose magic is not `CWX1`, as a host that lost its framing writes.
pub const BAD_FRAME: &[u8] = b"XWC1\x05\x00\x00\x00hello";

/// The requirements every case checks on every frame.
pub mod rules {
    pub const FRAMES: &str = "cwx.core.frames";
    pub const TIER_SEND: &str = "cwx.core.tier-send";
    pub const EVERY_MESSAGE: &[&str] = &[FRAMES, TIER_SEND];
}

/// A core case's `config`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Script {
    /// The tier the host serves: `plugin` (the default) or `builtin`.
    #[serde(default = "plugin")]
    pub tier: Tier,
    /// Never answer `tool/call`.
    #[serde(default)]
    pub silent_tool_call: bool,
    /// Write a frame with a bad magic right after `host/ready`.
    #[serde(default)]
    pub bad_frame_after_ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<f64>,
}

fn plugin() -> Tier {
    Tier::Plugin
}

impl Default for Script {
    fn default() -> Script {
        Script {
            tier: plugin(),
            silent_tool_call: false,
            bad_frame_after_ready: false,
            deadline: None,
        }
    }
}

impl crate::peer::PeerScript for Script {
    const MAX_DEADLINE: f64 = 600.0;

    fn deadline(&self) -> Option<f64> {
        self.deadline
    }
}

/// One check of a case.
pub type CoreStep = crate::peer::PeerStep<CoreCheck>;

/// What a core case checks the core did.
#[derive(Debug, Clone, PartialEq)]
pub enum CoreCheck {
    /// The core sent this method (the workload).
    Sends(String),
    /// The core sent `$/cancel` for its unanswered request of this method,
    /// once the request's `deadline_ms` had passed (within conform's margin).
    Cancels(String),
    /// After the host's broken frame, the core sent nothing more and ended
    /// the host (closed its stdin or killed it).
    EndsHost,
    /// The core's exit status.
    Exit(ExitWant),
}

/// A core step as the case file writes it: exactly one of `sends`,
/// `cancels`, `endsHost`, `exit` (`exitZero` is `exit: "zero"`).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCoreStep {
    sends: Option<String>,
    cancels: Option<String>,
    ends_host: bool,
    exit: Option<ExitWant>,
    exit_zero: bool,
    info: bool,
}

impl crate::peer::CheckKeys for CoreCheck {
    type Raw = RawCoreStep;
    const ONE_OF: &'static str = "sends, cancels, endsHost, exit";

    fn read(r: RawCoreStep) -> Result<(Vec<CoreCheck>, bool), String> {
        let zero = ExitWant::Named(crate::peer::ExitClass::Zero);
        let checks: Vec<CoreCheck> = [
            r.sends.map(CoreCheck::Sends),
            r.cancels.map(CoreCheck::Cancels),
            r.ends_host.then_some(CoreCheck::EndsHost),
            r.exit.map(CoreCheck::Exit),
            r.exit_zero.then_some(CoreCheck::Exit(zero)),
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok((checks, r.info))
    }
}

/// One event of the scripted host's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Event {
    /// The host's process id, first.
    Pid { pid: u32 },
    /// A payload from the core.
    In { t_ms: u64, payload: String },
    /// What the core wrote that is not a frame; the host stops reading.
    BadFrame { t_ms: u64, why: String },
    /// A message the host wrote.
    Out { t_ms: u64, payload: String },
    /// The host wrote its broken frame.
    BrokeFrame { t_ms: u64 },
    /// The core closed the host's stdin.
    Closed { t_ms: u64 },
}

/// The scripted host: conform's reference host with the script's changes.
pub struct ScriptedHost {
    host: Host,
    script: Script,
}

impl ScriptedHost {
    pub fn new(script: Script) -> ScriptedHost {
        ScriptedHost {
            host: Host::new(script.tier),
            script,
        }
    }

    pub fn hello(&self) -> Value {
        self.host.hello()
    }

    /// The messages to write for one payload from the core, and whether to
    /// write the broken frame after them.
    pub fn handle(&mut self, payload: &[u8], now: std::time::Instant) -> (Vec<Value>, bool) {
        let method = crate::jsonrpc::parse_json(payload)
            .ok()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned));
        if self.script.silent_tool_call && method.as_deref() == Some("tool/call") {
            return (vec![], false);
        }
        let out = self.host.handle_at(payload, now);
        let broke = self.script.bad_frame_after_ready
            && out
                .iter()
                .any(|m| m.get("method") == Some(&json!("host/ready")));
        (out, broke)
    }

    pub fn tick(&mut self, now: std::time::Instant) -> Vec<Value> {
        self.host.tick(now)
    }

    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.host.next_deadline()
    }

    pub fn done(&self) -> bool {
        self.host.done
    }
}

/// How the core ended, and whether the host it launched outlived it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreEnd {
    pub code: Option<i32>,
    /// The core was still running at the deadline and conform stopped it.
    pub stopped: bool,
    pub ms: u64,
    /// The scripted host was still alive after the core ended (conform killed it).
    pub host_outlived: bool,
}

fn parsed(payload: &str) -> Option<Value> {
    serde_json::from_str(payload).ok()
}

/// What the core did in `case`, as evidence for the grader.
pub fn evidence(case: &Case<super::CoreCases>, events: &[Event], end: CoreEnd) -> Evidence {
    crate::peer::evidence(
        every_message(events, case.config.tier),
        &case.steps,
        |s| s.info,
        |s| check_step(&s.check, events, end),
        "core",
        describe(events, end),
    )
}

fn check_step(check: &CoreCheck, events: &[Event], end: CoreEnd) -> Check {
    let from_core: Vec<(u64, Value)> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { t_ms, payload } => parsed(payload).map(|v| (*t_ms, v)),
            _ => None,
        })
        .collect();
    match check {
        CoreCheck::Sends(m) => {
            if from_core.iter().any(|(_, v)| v["method"] == json!(m)) {
                Check::Holds
            } else {
                Check::Broken(Kind::Missing, format!("the core never sent {m}"))
            }
        }
        CoreCheck::Cancels(m) => cancels(m, &from_core),
        CoreCheck::EndsHost => ends_host(events, end),
        CoreCheck::Exit(want) => match (end.code, end.stopped) {
            (code, false) if want.holds(code) => Check::Holds,
            (_, true) => Check::Broken(
                Kind::Process,
                "the core was still running at the deadline".into(),
            ),
            (c, _) => Check::Broken(
                Kind::Process,
                format!("the core exited with {c:?}, not {want}"),
            ),
        },
    }
}

/// Whether the core cancelled its unanswered request of `m` once its
/// `deadline_ms` had passed, within conform's margin.
fn cancels(m: &str, from_core: &[(u64, Value)]) -> Check {
    let Some((sent, request)) = from_core
        .iter()
        .find(|(_, v)| v["method"] == json!(m) && v.get("id").is_some())
    else {
        return Check::Unseen(format!("the core never sent {m}"));
    };
    let id = request["id"].clone();
    let deadline = request
        .pointer("/params/deadline_ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let cancel = from_core
        .iter()
        .find(|(_, v)| v["method"] == json!("$/cancel") && v.pointer("/params/id") == Some(&id));
    match cancel {
        None => Check::Broken(
            Kind::Missing,
            format!("the core never sent $/cancel for its {m} (id {id}, deadline_ms {deadline})"),
        ),
        Some((t, _)) => {
            let after = t.saturating_sub(*sent);
            if after + 50 < deadline {
                Check::Broken(
                    Kind::Rule,
                    format!(
                        "the core cancelled its {m} {after} ms after sending it, before its deadline_ms {deadline}"
                    ),
                )
            } else if after > deadline + CANCEL_MARGIN_MS {
                Check::Broken(
                    Kind::Rule,
                    format!(
                        "the core cancelled its {m} {after} ms after sending it, past its deadline_ms {deadline} and conform's {CANCEL_MARGIN_MS} ms margin"
                    ),
                )
            } else {
                Check::Holds
            }
        }
    }
}

/// Whether, after the host's broken frame, the core sent nothing more and
/// ended the host.
fn ends_host(events: &[Event], end: CoreEnd) -> Check {
    let Some(broke) = events.iter().find_map(|e| match e {
        Event::BrokeFrame { t_ms } => Some(*t_ms),
        _ => None,
    }) else {
        return Check::Unseen("the host never got to break its framing".into());
    };
    let mut problems = Vec::new();
    let later: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { t_ms, payload } if *t_ms > broke + 1000 => Some(
                parsed(payload)
                    .and_then(|v| v["method"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "an answer".into()),
            ),
            _ => None,
        })
        .collect();
    if !later.is_empty() {
        problems.push(format!(
            "after the host's broken frame the core went on sending: {}",
            later.join(", ")
        ));
    }
    let closed = events.iter().find_map(|e| match e {
        Event::Closed { t_ms } => Some(*t_ms),
        _ => None,
    });
    if let Some(t) = closed
        && t > broke + END_WITHIN_MS
        && !end.stopped
    {
        problems.push(format!(
            "the core closed the host's stdin {} ms after the broken frame, not within {END_WITHIN_MS} ms",
            t - broke
        ));
    }
    if end.host_outlived || (closed.is_none() && end.stopped) {
        problems.push("the core did not end the host: it was still running".into());
    }
    if problems.is_empty() {
        Check::Holds
    } else {
        Check::Broken(Kind::Process, problems.join("; "))
    }
}

fn describe(events: &[Event], end: CoreEnd) -> String {
    let sent: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { payload, .. } => Some(
                parsed(payload)
                    .map(|v| match v["method"].as_str() {
                        Some(m) => m.to_owned(),
                        None => format!("an answer to {}", v["id"]),
                    })
                    .unwrap_or_else(|| "(not JSON)".into()),
            ),
            Event::BadFrame { .. } => Some("(a broken frame)".into()),
            _ => None,
        })
        .collect();
    let how = if end.stopped {
        format!(
            "was still running after {:.1} s and conform stopped it",
            end.ms as f64 / 1000.0
        )
    } else {
        match end.code {
            Some(c) => format!(
                "exited with status {c} after {:.1} s",
                end.ms as f64 / 1000.0
            ),
            None => format!("was killed after {:.1} s", end.ms as f64 / 1000.0),
        }
    };
    format!(
        "it sent {}; it {how}",
        if sent.is_empty() {
            "nothing".into()
        } else {
            sent.join(", ")
        }
    )
}

/// The rules every frame of every case is held to, as (requirement, kind, why).
fn every_message(events: &[Event], tier: Tier) -> Vec<(String, Kind, String)> {
    let mut out = Vec::new();
    let mut n = 0;
    for e in events {
        match e {
            Event::BadFrame { why, .. } => out.push((
                rules::FRAMES.into(),
                Kind::Framing,
                format!("the core wrote bytes that are not a CWX1 frame: {why}"),
            )),
            Event::In { payload, .. } => {
                n += 1;
                let Some(v) = parsed(payload) else {
                    out.push((
                        rules::FRAMES.into(),
                        Kind::Malformed,
                        format!("frame {n}'s payload is not JSON"),
                    ));
                    continue;
                };
                if let Err(refused) = validate::parse_core_message(v, tier) {
                    let (rule, kind) = if refused.tier {
                        (rules::TIER_SEND, Kind::Unexpected)
                    } else {
                        (rules::FRAMES, Kind::Shape)
                    };
                    out.push((rule.into(), kind, format!("frame {n}: {refused}")));
                }
            }
            _ => {}
        }
    }
    out
}
