//! The cwx fuzzer: each input is a fresh host (set up to `ready`, to
//! `hello`, or not at all), then frames conform writes as the core: golden
//! core messages from the corpus and the table's core-to-host methods,
//! changed (see `fuzz::strategies`), with method names from both directions
//! and both tiers; and headers that lie (a bad magic, a length over the
//! 32 MiB limit or up to `u32::MAX`, a length shorter or longer than the
//! payload).
//!
//! What the host must do next is read from conform's own frame decoder
//! (the core's, `wire::frame`) run over the same bytes, a model of what the
//! host reads:
//! - a header the decoder refuses: "bad magic or length ends the host",
//!   so the host exits (`cwx.frame.bad-frame-ends-host`);
//! - bytes that end inside a frame: the host waits for the rest, and the end
//!   of its stdin ends it (`cwx.eof`);
//! - whole frames: the host still answers `host/ping`. That is a MUST when
//!   each payload is a message the core could send this host after the
//!   handshake, or a request for a method the host has no handler for
//!   (`cwx.error.method-not-found`); otherwise the source says nothing, and
//!   a host that stops is reported as information.
//!
//! Every frame the host writes is checked by the case's watch, always.

use super::driver::{Context, Extension};
use super::table::{self, Direction, Tier};
use super::{launcher_for, preflight, reference, validate};
use crate::error::RunError;
use crate::fuzz::strategies::{self as strat, Message, Pause};
use crate::fuzz::{self, ResetFuture};
use crate::runner::CaseFuture;
use crate::target::Target;
use crate::wire::frame::{FrameDecoder, MAX_FRAME};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A frame's header: true, or lying.
#[derive(Debug, Clone)]
pub enum Header {
    True,
    /// Another magic: one byte changed, lower case, or another protocol's.
    BadMagic(Index),
    /// A length with nothing behind it: the limit, one over, `u32::MAX`.
    Claims(u32),
    /// A length this much shorter than the payload.
    Short(u32),
    /// A length this much longer than the payload.
    Long(u32),
}

#[derive(Debug, Clone)]
pub struct Frame {
    pub message: Message,
    pub header: Header,
}

#[derive(Debug, Clone)]
pub struct Input {
    pub setup: &'static str,
    pub frames: Vec<Frame>,
    pub pauses: Vec<Pause>,
}

const MAGICS: &[&[u8; 4]] = &[b"CWX2", b"cwx1", b"CWX\0", b"\0\0\0\0", b"{\"js", b"Cont"];

/// What the core's decoder makes of the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Whole frames, with their payloads.
    Whole(Vec<Vec<u8>>),
    /// The decoder refuses a header (after these whole frames).
    Refused { oversized: bool },
    /// The bytes end inside a frame.
    Partial,
}

/// Reads `bytes` as the core's decoder would.
pub fn model(bytes: &[u8]) -> Read {
    let mut decoder = FrameDecoder::new(MAX_FRAME);
    let mut frames = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.is_empty() {
            return if decoder.at_boundary() {
                Read::Whole(frames)
            } else {
                Read::Partial
            };
        }
        let (used, item) = decoder.feed(rest);
        rest = &rest[used..];
        match item {
            Some(Ok(payload)) => frames.push(payload),
            Some(Err(e)) => {
                return Read::Refused {
                    oversized: matches!(e, crate::wire::frame::FrameError::TooLarge(_)),
                };
            }
            None if used == 0 => return Read::Partial,
            None => {}
        }
    }
}

pub struct Harness {
    ctx: Arc<Context>,
    tier: Tier,
    timeout: f64,
    golden: Vec<Value>,
    methods: Vec<String>,
}

/// Ids conform's own requests take in a case (the set-up, the probe).
const OWN_IDS: u64 = 64;

fn golden() -> Result<Vec<Value>, RunError> {
    let cases =
        crate::case::load::<super::HostCases>(&[]).map_err(|e| RunError::Conform(e.to_string()))?;
    let mut out: Vec<Value> = Vec::new();
    let mut id = 100;
    let mut push = |out: &mut Vec<Value>, method: &str, params: Value, request: bool| {
        id += 1;
        let mut m = serde_json::Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        if request {
            m.insert("id".into(), json!(id));
        }
        m.insert("method".into(), json!(method));
        m.insert("params".into(), params);
        let v = Value::Object(m);
        if !out.contains(&v) {
            out.push(v);
        }
    };
    for case in &cases {
        for step in &case.steps {
            let crate::step::Action::Send(send) = &step.action else {
                continue;
            };
            if send.params.to_string().contains("${") || send.method == "host/shutdown" {
                continue;
            }
            push(
                &mut out,
                &send.method,
                send.params.clone(),
                !send.notification,
            );
        }
    }
    for m in table::METHODS {
        if m.direction == Direction::CoreToHost
            && m.name != "host/shutdown"
            && !out.iter().any(|g| g["method"] == m.name)
        {
            push(&mut out, m.name, json!({}), m.request);
        }
    }
    Ok(out)
}

fn method_names() -> Vec<String> {
    let mut m: Vec<String> = table::METHODS.iter().map(|m| m.name.to_owned()).collect();
    m.dedup();
    m.extend(["conform/unknown", "", "HOST/PING", "ext/", "rpc.discover"].map(String::from));
    m
}

/// Keeps generated ids clear of conform's own.
fn clear_ids(v: &mut Value) {
    if let Some(id) = v.get_mut("id")
        && id.as_u64().is_some_and(|n| n < OWN_IDS)
    {
        *id = json!(id.as_u64().unwrap_or(0) + 1000);
    }
}

/// `conform fuzz --protocol cwx`: a fresh host per input.
pub fn start<'a>(
    setup: crate::suite::FuzzSetup,
    options: &'a fuzz::Options,
    progress: &'a mut dyn FnMut(&str),
) -> crate::suite::BoxFuture<'a, crate::suite::FuzzOutcome> {
    Box::pin(async move {
        let h = Harness::new(setup.target, setup.tier, setup.startup, setup.timeout).await?;
        Ok((fuzz::fuzz(Arc::new(h), options, progress).await?, vec![]))
    })
}

impl Harness {
    pub async fn new(
        target: Target,
        tier: Tier,
        startup: Duration,
        timeout: f64,
    ) -> Result<Self, RunError> {
        let launcher = launcher_for(&target, tier)?;
        preflight(&launcher, startup).await?;
        let extension = matches!(target, Target::Builtin).then(|| Extension {
            path: reference::TOY_ENTRY.into(),
            sha256: reference::TOY_SHA256.into(),
        });
        Ok(Harness {
            ctx: Arc::new(Context {
                launcher,
                tier,
                strict: false,
                extension,
                startup,
            }),
            tier,
            timeout,
            golden: golden()?,
            methods: method_names(),
        })
    }

    /// One frame's bytes; `ids` are those of the frames before it, which it
    /// does not repeat (two requests with one id cannot be told apart).
    fn frame(&self, f: &Frame, ids: &mut Vec<Value>) -> Vec<u8> {
        let mut v = f.message.value(&self.golden);
        clear_ids(&mut v);
        if let Some(id) = v.get_mut("id") {
            if ids.contains(id) {
                *id = json!(5000 + ids.len());
            }
            ids.push(id.clone());
        }
        let (payload, _) = f.message.encode(v);
        let len = payload.len() as u32;
        let mut out = Vec::with_capacity(payload.len() + 8);
        match &f.header {
            Header::True => {
                out.extend_from_slice(b"CWX1");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&payload);
            }
            Header::BadMagic(i) => {
                out.extend_from_slice(MAGICS[i.index(MAGICS.len())]);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&payload);
            }
            Header::Claims(n) => {
                out.extend_from_slice(b"CWX1");
                out.extend_from_slice(&n.to_le_bytes());
            }
            Header::Short(d) => {
                out.extend_from_slice(b"CWX1");
                out.extend_from_slice(&len.saturating_sub(*d).to_le_bytes());
                out.extend_from_slice(&payload);
            }
            Header::Long(d) => {
                out.extend_from_slice(b"CWX1");
                out.extend_from_slice(&len.saturating_add(*d).to_le_bytes());
                out.extend_from_slice(&payload);
            }
        }
        out
    }

    /// A payload the host must survive: a message the core could send this
    /// host, or a request for a method no host handles.
    fn must_survive(&self, payload: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<Value>(payload) else {
            return false;
        };
        if v.get("method").and_then(Value::as_str) == Some("host/shutdown") {
            return false;
        }
        if validate::parse_core_message(v.clone(), self.tier).is_ok() {
            return true;
        }
        let unknown = v
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| table::METHODS.iter().all(|s| s.name != m));
        unknown
            && v.get("jsonrpc") == Some(&json!("2.0"))
            && v.get("id").is_some_and(Value::is_u64)
            && v.get("params").is_none_or(Value::is_object)
    }
}

impl fuzz::Harness for Harness {
    type Input = Input;

    fn strategy(&self) -> BoxedStrategy<Input> {
        let header = prop_oneof![
            30 => Just(Header::True),
            2 => any::<Index>().prop_map(Header::BadMagic),
            2 => prop::sample::select(vec![MAX_FRAME as u32, MAX_FRAME as u32 + 1, u32::MAX])
                .prop_map(Header::Claims),
            1 => (1u32..16).prop_map(Header::Short),
            1 => (1u32..16).prop_map(Header::Long),
        ];
        let frame = (
            strat::message(self.methods.clone(), &[64 * 1024, 1024 * 1024]),
            header,
        )
            .prop_map(|(message, header)| Frame { message, header });
        (
            prop_oneof![8 => Just("ready"), 1 => Just("hello"), 1 => Just("none")],
            prop::collection::vec(frame, 1..4),
            strat::pauses(),
        )
            .prop_map(|(setup, frames, pauses)| Input {
                setup,
                frames,
                pauses,
            })
            .boxed()
    }

    fn case(&self, input: &Input, id: &str) -> Value {
        let mut bytes = Vec::new();
        let mut ids = Vec::new();
        for f in &input.frames {
            bytes.extend(self.frame(f, &mut ids));
        }
        let read = model(&bytes);
        let write = Value::Object(strat::write_step(bytes, &input.pauses, false));
        let timeout = self.timeout;
        let (level, requirements, then) = match read {
            Read::Refused { oversized } => {
                let mut r = vec!["cwx.frame.bad-frame-ends-host"];
                if oversized {
                    r.push("cwx.frame.max");
                }
                ("MUST", json!(r), vec![json!({"exitsWithin": timeout})])
            }
            Read::Partial => (
                "MUST",
                json!(["cwx.eof"]),
                vec![json!({"closeStdin": true}), json!({"exitsWithin": 5})],
            ),
            Read::Whole(payloads) => {
                let must = input.setup == "ready" && payloads.iter().all(|p| self.must_survive(p));
                (
                    if must { "MUST" } else { "INFO" },
                    json!([
                        "cwx.error.method-not-found",
                        "cwx.cancel.unknown-ignored",
                        "cwx.ping"
                    ]),
                    vec![json!({"probe": true, "deadline": timeout})],
                )
            }
        };
        let mut steps = vec![write];
        steps.extend(then);
        json!({
            "id": id,
            "title": "Generated frames: the host's output stays valid, and it ends or answers as the core's reading of the bytes says",
            "level": level,
            "requirements": requirements,
            "phase": "disruptive",
            "config": {"setup": input.setup},
            "steps": steps,
        })
    }

    fn run(self: Arc<Self>, case: Value) -> CaseFuture {
        Box::pin(async move {
            match fuzz::parse_generated::<super::HostCases>(case) {
                Ok(case) => self.ctx.run_case(&case).await,
                Err(conform_error) => *conform_error,
            }
        })
    }

    fn reset(self: Arc<Self>) -> ResetFuture {
        // Every case starts its own host.
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        crate::wire::frame::encode(payload).unwrap()
    }

    #[test]
    fn the_model_reads_frames_as_the_core_does() {
        let mut two = frame(b"{}");
        two.extend(frame(b"[]"));
        assert_eq!(
            model(&two),
            Read::Whole(vec![b"{}".to_vec(), b"[]".to_vec()])
        );
        assert_eq!(model(&two[..5]), Read::Partial);
        assert_eq!(
            model(b"CWX2\x02\0\0\0{}"),
            Read::Refused { oversized: false }
        );
        assert_eq!(
            model(b"CWX1\xff\xff\xff\xff"),
            Read::Refused { oversized: true }
        );
        let mut at_limit = b"CWX1".to_vec();
        at_limit.extend((MAX_FRAME as u32).to_le_bytes());
        assert_eq!(model(&at_limit), Read::Partial);
    }
}
