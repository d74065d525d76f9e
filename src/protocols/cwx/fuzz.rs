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

use super::driver::{self, Context, Extension, HostWatch};
use super::table::{self, Direction, Tier};
use super::{launcher_for, preflight, reference, validate};
use crate::drive::stdio::{AnswerFuture, Answerer, Incoming, Session, Watch};
use crate::error::RunError;
use crate::fuzz::live::{Live, Probe, Slot, StdioLive};
use crate::fuzz::readings::Id;
use crate::fuzz::seeds::{Seeds, without_templates};
use crate::fuzz::states::Framing;
use crate::fuzz::strategies::{self as strat, Message, Pause, Pool};
use crate::fuzz::{self, ResetFuture};
use crate::runner::CaseFuture;
use crate::target::Target;
use crate::transport::stdio::Launcher;
use crate::wire::Codec;
use crate::wire::frame::{FrameDecoder, MAX_FRAME};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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

/// Ids conform's own requests take in a case, or in a live host's inputs
/// run as one (the set-up, the probes: see `fuzz::live::EVERY`).
const OWN_IDS: u64 = 64;

fn golden() -> Result<Vec<Value>, RunError> {
    let cases =
        crate::case::load::<super::HostCases>(&[]).map_err(|e| RunError::Conform(e.to_string()))?;
    let mut seeds = Seeds::new(100);
    seeds.sends(&cases, |send| {
        if send.method == "host/shutdown" {
            return None;
        }
        without_templates(&send.params, &[])
    });
    for m in table::METHODS {
        if m.direction == Direction::CoreToHost && m.name != "host/shutdown" && !seeds.has(m.name) {
            seeds.push(m.name, json!({}), None, !m.request);
        }
    }
    Ok(seeds.into_messages())
}

fn method_names() -> Vec<String> {
    let mut m: Vec<String> = table::METHODS.iter().map(|m| m.name.to_owned()).collect();
    m.dedup();
    m.extend(["conform/unknown", "", "HOST/PING", "ext/", "rpc.discover"].map(String::from));
    m
}

/// Keeps generated ids clear of conform's own, by value (`7.0` is 7 to a
/// host that reads numbers as JavaScript does).
fn clear_ids(v: &mut Value) {
    if let Some(id) = v.get_mut("id")
        && let Id::Num(n) = Id::from_value(id)
        && n.as_u64().is_some_and(|n| n < OWN_IDS)
    {
        *id = json!(n.as_u64().unwrap_or(0) + 1000);
    }
}

/// Methods whose request leaves the host changed for the inputs after it:
/// a second `host/initialize` may set other limits (a `max_frame` under
/// what the model of the core's reading allows). A live host takes no
/// input after one.
const LEAVES_STATE: &[&str] = &["host/initialize"];

/// `conform fuzz --protocol cwx`: persistent hosts, each set up to `ready` once.
pub fn start<'a>(
    setup: crate::suite::FuzzSetup,
    options: &'a fuzz::Options,
    progress: &'a mut dyn FnMut(&str),
) -> crate::suite::BoxFuture<'a, crate::suite::FuzzOutcome> {
    fuzz::start(
        Harness::new(setup.target, setup.tier, setup.startup, setup.timeout),
        options,
        progress,
    )
}

/// How conform answers a live host's requests, as the driver's core does:
/// a handle for each registration, the rest refused.
#[derive(Default)]
struct Core {
    next_handle: u64,
}

impl Answerer for Core {
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        _params: &'a Value,
        _within: Duration,
    ) -> AnswerFuture<'a> {
        let answer = match method {
            "registry/register" => {
                self.next_handle += 1;
                json!({"jsonrpc": "2.0", "id": id, "result": {"handle": self.next_handle}})
            }
            "registry/unregister" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
            _ => json!({"jsonrpc": "2.0", "id": id, "error": {"code": table::code::REFUSED,
                "message": format!("conform's core serves no {method}")}}),
        };
        Box::pin(async move { Some(answer) })
    }
}

/// The host's watch, and whether it has said `host/hello` and `host/ready`
/// (notifications the watch admitted), for a live host's set-up.
struct Watching {
    inner: HostWatch,
    said: Vec<String>,
}

impl Watch for Watching {
    fn sent(&mut self, message: &Value) -> Option<String> {
        self.inner.sent(message)
    }
    fn sent_raw(&mut self, bytes: &[u8]) {
        self.inner.sent_raw(bytes)
    }
    fn received(&mut self, payload: &[u8]) -> Incoming {
        let incoming = self.inner.received(payload);
        if self.said.len() < 2
            && !self.inner.halted()
            && let Ok(v) = crate::jsonrpc::parse_json(payload)
            && let Some(m) = v.get("method").and_then(Value::as_str)
        {
            self.said.push(m.to_owned());
        }
        incoming
    }
    fn broke(&mut self, why: &str) -> bool {
        self.inner.broke(why)
    }
    fn ended_inside(&mut self, partial: &[u8]) -> Option<crate::evidence::Finding> {
        self.inner.ended_inside(partial)
    }
    fn halted(&self) -> bool {
        self.inner.halted()
    }
    fn findings(&self) -> Vec<crate::evidence::Finding> {
        self.inner.findings()
    }
    fn kept_note(&self) -> Option<String> {
        self.inner.kept_note()
    }
}

/// "| `host/initialize` | `HANDSHAKE_DEADLINE` (30 s) |"
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(30);
/// "| `host/ping` | `PING_DEADLINE` (10 s) |"
const PING_DEADLINE: Duration = Duration::from_secs(10);
/// How long a live host has to end once its stdin closes.
const EXIT_GRACE: Duration = Duration::from_millis(500);

impl Harness {
    pub async fn new(
        target: Target,
        tier: Tier,
        startup: Duration,
        timeout: f64,
    ) -> Result<Self, RunError> {
        let extension = matches!(target, Target::Builtin).then(|| Extension {
            path: reference::TOY_ENTRY.into(),
            sha256: reference::TOY_SHA256.into(),
        });
        Self::on(
            launcher_for(&target, tier)?,
            tier,
            extension,
            startup,
            timeout,
        )
        .await
    }

    /// The harness on the hosts `launcher` starts.
    pub async fn on(
        launcher: Launcher,
        tier: Tier,
        extension: Option<Extension>,
        startup: Duration,
        timeout: f64,
    ) -> Result<Self, RunError> {
        preflight(&launcher, startup).await?;
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

    /// One frame's message, its id clear of conform's and of `ids`, those
    /// of the frames before it (two requests with one id, by value, cannot
    /// be told apart). An integer id the mutations left as it was becomes
    /// one of its own, from the input's number, so a live host that answers
    /// late never meets it again in a later input.
    fn value(&self, f: &Frame, pool: &Pool, ids: &mut Vec<Id>, index: u64) -> Value {
        let mut v = f.message.value(pool);
        strat::own_id(&mut v, &f.message, index, ids.len());
        clear_ids(&mut v);
        if let Some(id) = v.get_mut("id") {
            if ids.contains(&Id::from_value(id)) {
                *id = json!(5000 + ids.len());
            }
            ids.push(Id::from_value(id));
        }
        v
    }

    /// The bytes of input number `index`'s frames.
    fn bytes(&self, input: &Input, pool: &Pool, index: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut ids = Vec::new();
        for f in &input.frames {
            bytes.extend(self.frame(f, pool, &mut ids, index));
        }
        bytes
    }

    /// One frame's bytes (see [`Harness::value`]).
    fn frame(&self, f: &Frame, pool: &Pool, ids: &mut Vec<Id>, index: u64) -> Vec<u8> {
        let v = self.value(f, pool, ids, index);
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

    /// Whether the core reads input's bytes as whole frames. Frames with
    /// true headers always are: no message the strategy makes comes near
    /// `MAX_FRAME` (the largest is padded to 1 MiB and a byte), so only a
    /// lying header needs the bytes built and read as the core reads them.
    /// The input's number changes its ids' digits, never how the core's
    /// decoder cuts its bytes.
    fn read_whole(&self, input: &Input, pool: &Pool) -> bool {
        input
            .frames
            .iter()
            .all(|f| matches!(f.header, Header::True))
            || matches!(model(&self.bytes(input, pool, 0)), Read::Whole(_))
    }

    /// A payload the host must survive: a message the core could send this
    /// host, or a request for a method no host handles.
    fn must_survive(&self, payload: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<Value>(payload) else {
            return false;
        };
        // The core sends `host/initialize` once, before `ready`, and
        // `host/shutdown` to end the host: neither is a message after the
        // handshake a host must survive.
        if matches!(
            v.get("method").and_then(Value::as_str),
            Some("host/shutdown" | "host/initialize")
        ) {
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

impl Harness {
    /// A live host: started and set up to `ready` as a generated case's
    /// set-up does it (`host/hello`, `host/initialize` with id 1, `host/ready`).
    async fn live(&self) -> Result<Box<dyn Live>, String> {
        let stream = self
            .ctx
            .launcher
            .start(&[], Codec::Frames)
            .map_err(|e| format!("cannot start the host: {e}"))?;
        let watch = Watching {
            inner: HostWatch::new(self.tier),
            said: Vec::new(),
        };
        let mut s = Session::new(stream, "host", watch, Instant::now(), 1);
        let mut role = Core::default();
        let said =
            |m: &'static str| move |s: &Session<Watching>| s.watch.said.iter().any(|x| x == m);
        let mut ok = s
            .pump(
                &mut role,
                Instant::now() + self.ctx.startup,
                &said("host/hello"),
            )
            .await;
        if ok {
            ok = match s
                .request(
                    "host/initialize",
                    driver::initialize_params(&super::steps::Limits::default()),
                )
                .await
            {
                Some(key) => s
                    .answer(&mut role, &key, "host/initialize", HANDSHAKE_DEADLINE)
                    .await
                    .is_some(),
                None => false,
            };
        }
        if ok {
            ok = s
                .pump(
                    &mut role,
                    Instant::now() + PING_DEADLINE,
                    &said("host/ready"),
                )
                .await;
        }
        if !ok || !s.ev.findings.is_empty() || s.watch.halted() {
            s.finish(&mut role, EXIT_GRACE).await;
            return Err("the host's set-up failed".into());
        }
        Ok(Box::new(StdioLive::<super::HostCases, Watching, Core> {
            s,
            role,
            probe: Probe {
                method: "host/ping",
                what: "a probe (host/ping)",
                answered: "the host still answers host/ping",
                deadline: PING_DEADLINE,
            },
            grace: EXIT_GRACE,
            keep: None,
            _dialect: std::marker::PhantomData,
        }))
    }
}

impl fuzz::Harness for Harness {
    type Input = Input;

    fn strategy(&self) -> BoxedStrategy<Input> {
        let header = prop_oneof![
            150 => Just(Header::True),
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
            prop_oneof![38 => Just("ready"), 1 => Just("hello"), 1 => Just("none")],
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

    fn golden(&self) -> Vec<Value> {
        self.golden.clone()
    }

    /// Not a message that ends its live host: preferring those would spend
    /// the run starting hosts.
    fn messages(&self, input: &Input, pool: &Pool, index: u64) -> Vec<Value> {
        let mut ids = Vec::new();
        input
            .frames
            .iter()
            .map(|f| self.value(f, pool, &mut ids, index))
            .filter(|v| {
                !v.get("method")
                    .and_then(Value::as_str)
                    .is_some_and(|m| LEAVES_STATE.contains(&m))
            })
            .collect()
    }

    /// An input before `ready` needs a fresh host; one whose bytes end the
    /// host (a header the core refuses, the end of input inside a frame) or
    /// leave it changed is the last its live host takes.
    fn slot(&self, input: &Input, pool: &Pool) -> Slot {
        if input.setup != "ready" {
            return Slot::Alone;
        }
        let leaves = input.frames.iter().any(|f| {
            f.message
                .value(pool)
                .get("method")
                .and_then(Value::as_str)
                .is_some_and(|m| LEAVES_STATE.contains(&m))
        });
        if leaves || !self.read_whole(input, pool) {
            Slot::Last
        } else {
            Slot::Shared
        }
    }

    fn start_live(self: Arc<Self>) -> Option<fuzz::live::Starting> {
        Some(Box::pin(async move { self.live().await }))
    }

    fn framing(&self) -> Framing {
        Framing::Frames
    }

    fn known(&self, method: &str) -> bool {
        table::METHODS.iter().any(|m| m.name == method)
    }

    fn case(&self, input: &Input, pool: &Pool, id: &str, index: u64) -> Value {
        let bytes = self.bytes(input, pool, index);
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
            match fuzz::parse_generated::<super::HostCases>(&case) {
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

    /// The shortcut for true headers agrees with the core's reading of
    /// the bytes, for generated inputs.
    #[tokio::test]
    async fn true_headers_are_read_whole() {
        use crate::transport::serve::testing::memory;
        use proptest::strategy::ValueTree;
        let h = Harness::on(
            memory(|| reference::Host::new(Tier::Plugin), |_| true),
            Tier::Plugin,
            None,
            Duration::from_secs(10),
            10.0,
        )
        .await
        .unwrap();
        let pool = Pool::new(fuzz::Harness::golden(&h));
        let mut runner = crate::fuzz::runner_for(5);
        let strategy = fuzz::Harness::strategy(&h);
        let mut true_headers = 0;
        for _ in 0..400 {
            let input = strategy.new_tree(&mut runner).unwrap().current();
            let modelled = matches!(model(&h.bytes(&input, &pool, 0)), Read::Whole(_));
            assert_eq!(h.read_whole(&input, &pool), modelled, "{input:?}");
            if input
                .frames
                .iter()
                .all(|f| matches!(f.header, Header::True))
            {
                true_headers += 1;
            }
        }
        assert!(
            true_headers > 200,
            "{true_headers} inputs with true headers"
        );
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
