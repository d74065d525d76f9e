//! The step language of cwx cases (data in `corpus/cwx/cases/`). Each case
//! runs against a fresh host process of the run's tier. Its `config` says
//! how far conform sets the host up (`hello`: only read `host/hello`;
//! `ready`: also `host/initialize` and `host/ready`; `extension`: also
//! activate the extension), the limits conform sends in `host/initialize`,
//! and how conform, as the core, answers the host's registrations. Steps
//! `send` a request or notification, write raw bytes (`rawHex`) or a whole
//! message as it is (`message`), `await` an answer, `waitFor` a host
//! message, watch (`quiet`), `probe` with `host/ping`, close the host's
//! stdin; and the cwx steps: `release` the registrations conform held,
//! `waitHandle` until one of a kind is admitted, `absent` (the host has not
//! sent a message), `noResult` (a raw request is not served), `sweep`
//! (call every tool, command or hook the extension registered), and
//! `callHandle` (call a handle the activation admitted, by its kind's
//! method). Cases find a handle by kind (`${tool_handle}`, `any`) or by
//! name (`${handles.tool.echo}`), never by the order of registrations.

use crate::step::{self, Action, Language, ReplyRule};
use serde::Deserialize;
use serde_json::Value;

/// What a host case needs of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// An extension to activate (`--extension`, or the builtin's toy one).
    Extension,
    /// A host launched for the builtin tier.
    BuiltinTier,
    /// A host launched for the plugin tier.
    PluginTier,
    /// The extension registered a tool (variable `tool_handle`).
    Tool,
    /// The extension registered a command (variable `command_handle`).
    Command,
    /// The extension registered a hook (variable `hook_handle`).
    Hook,
}

impl Need {
    /// A kind of handle the extension registers, for the needs that are one.
    pub fn handle_kind(self) -> Option<&'static str> {
        match self {
            Need::Tool => Some("tool"),
            Need::Command => Some("command"),
            Need::Hook => Some("hook"),
            Need::Extension | Need::BuiltinTier | Need::PluginTier => None,
        }
    }
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Extension => "extension",
            Need::BuiltinTier => "builtin-tier",
            Need::PluginTier => "plugin-tier",
            Need::Tool => "tool",
            Need::Command => "command",
            Need::Hook => "hook",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    None,
    Hello,
    #[default]
    Ready,
    Extension,
}

/// How conform, as the core, answers the host's `registry/register`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Register {
    /// Each gets a handle at once.
    #[default]
    Admit,
    /// None is answered until a `release` step.
    Hold,
    /// The first tool gets a handle; the rest wait for a `release` step.
    /// (A host that sends its registrations one at a time, a tool last,
    /// never gets one: cases use `holdAfterFirst`.)
    HoldAfterFirstTool,
    /// The first registration, of whatever kind, gets a handle; the rest
    /// wait for a `release` step. Nothing in the seed orders an
    /// extension's registrations, so a case holds by position, never by kind.
    HoldAfterFirst,
    /// The second gets `{refused}`; the others a handle.
    RefuseSecond,
    /// The second gets the error -32002 (Refused); the others a handle.
    ErrorSecond,
}

/// The limits conform sends in `host/initialize`, where a case lowers them.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct Limits {
    pub max_frame: Option<u64>,
    pub max_inflight: Option<u64>,
    pub dispose_deadline_ms: Option<u64>,
    pub activate_deadline_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub setup: Setup,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub register: Register,
}

impl crate::case::Config for Config {}

/// The cwx dialect of the step language.
#[derive(Debug, Clone)]
pub struct Lang;

pub type Step = step::Step<Lang>;

/// What a `sweep` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepKind {
    Tool,
    Command,
    Hook,
}

impl SweepKind {
    pub fn name(self) -> &'static str {
        match self {
            SweepKind::Tool => "tool",
            SweepKind::Command => "command",
            SweepKind::Hook => "hook",
        }
    }
}

/// A `sweep`: every handle of a kind the extension registered, called with
/// inputs built from what it registered.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub kind: SweepKind,
    /// The text put in every string of an input (and a command's raw input).
    pub text: String,
    /// Every number of an input.
    pub number: u64,
    /// Tool calls carry an invocation ticket, so their tools may call the core.
    pub with_ticket: bool,
    /// Cancel a call still unanswered after this many seconds.
    pub cancel_after: Option<f64>,
}

/// The cwx steps.
#[derive(Debug, Clone, PartialEq)]
pub enum Own {
    /// Answer every registration held back, and admit the later ones.
    Release,
    /// Wait until conform has admitted a registration of this kind.
    WaitHandle(String),
    /// The host has sent no message of this method so far.
    Absent(String),
    /// Write this message as it is, in a frame, and judge its answer.
    Message(Value),
    /// Request `id` (of raw bytes written before) gets no result.
    NoResult(u64),
    Sweep(Sweep),
    /// Call the first handle of a kind (`tool`, `command`, `hook`, or `any`)
    /// the latest activation admitted, by its kind's method, and judge the
    /// answer like a request's.
    CallHandle(String),
}

/// The cwx steps' own keys.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Extra {
    #[serde(default)]
    release: bool,
    #[serde(default)]
    wait_handle: Option<String>,
    #[serde(default)]
    absent: Option<String>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    no_result: Option<u64>,
    #[serde(default)]
    sweep: Option<SweepKind>,
    /// For `sweep`: the text of every string, repeated `repeat` times.
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    repeat: Option<usize>,
    #[serde(default)]
    number: Option<u64>,
    #[serde(default)]
    with_ticket: bool,
    #[serde(default)]
    cancel_after: Option<f64>,
    #[serde(default)]
    call_handle: Option<String>,
}

/// The text a sweep puts in strings unless it says: characters of one, two,
/// three and four bytes, so a length counted in characters shows.
pub const SWEEP_TEXT: &str = "conform héllo ✓ 😀";

impl Language for Lang {
    type Extra = Extra;
    type Own = Own;
    type Expect = Expect;
    const COMMON: &'static [&'static str] = step::STDIO_COMMON;
    const OWN: &'static [&'static str] = &[
        "release",
        "waitHandle",
        "absent",
        "message",
        "noResult",
        "sweep",
        "callHandle",
    ];
    const MAX_DEADLINE: f64 = 600.0;

    fn own(x: &Extra) -> Result<Option<Own>, String> {
        let sweep_keys = x.text.is_some()
            || x.repeat.is_some()
            || x.number.is_some()
            || x.with_ticket
            || x.cancel_after.is_some();
        let mut found: Vec<Own> = Vec::new();
        if x.release {
            found.push(Own::Release);
        }
        if let Some(k) = &x.wait_handle {
            found.push(Own::WaitHandle(k.clone()));
        }
        if let Some(m) = &x.absent {
            found.push(Own::Absent(m.clone()));
        }
        if let Some(m) = &x.message {
            if !m.is_object() {
                return Err("`message` is a JSON object".into());
            }
            found.push(Own::Message(m.clone()));
        }
        if let Some(id) = x.no_result {
            found.push(Own::NoResult(id));
        }
        if let Some(k) = &x.call_handle {
            found.push(Own::CallHandle(k.clone()));
        }
        if let Some(kind) = x.sweep {
            let repeat = x.repeat.unwrap_or(1);
            if repeat == 0 || repeat > 1_000_000 {
                return Err("`repeat` is between 1 and 1000000".into());
            }
            if x.cancel_after.is_some_and(|c| !(c > 0.0 && c <= 60.0)) {
                return Err("`cancelAfter` is between 0 and 60 seconds".into());
            }
            if kind != SweepKind::Tool && (x.with_ticket || x.cancel_after.is_some()) {
                return Err("`withTicket` and `cancelAfter` go with a tool sweep".into());
            }
            found.push(Own::Sweep(Sweep {
                kind,
                text: x.text.as_deref().unwrap_or(SWEEP_TEXT).repeat(repeat),
                number: x.number.unwrap_or(1),
                with_ticket: x.with_ticket,
                cancel_after: x.cancel_after,
            }));
        } else if sweep_keys {
            return Err("text, repeat, number, withTicket and cancelAfter go with `sweep`".into());
        }
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err("a step needs exactly one action".into()),
        }
    }

    /// A `message` is judged like a request.
    fn awaitable(action: &Action<Own>) -> bool {
        matches!(action, Action::Send(s) if !s.notification)
    }

    fn check(step: &Step) -> Result<(), String> {
        if let Action::Send(s) = &step.action
            && s.id.is_some()
        {
            return Err("a cwx request's id is the core's to choose".into());
        }
        if let Action::Own(Own::WaitHandle(k) | Own::CallHandle(k)) = &step.action
            && !matches!(k.as_str(), "tool" | "command" | "hook" | "any")
        {
            return Err("`waitHandle` and `callHandle` are tool, command, hook or any".into());
        }
        step::check_stdio_expect(step)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// The result reads as the method's result type, the way the core reads it.
    ResultShape,
    /// `host/hello`'s module list and memory limit (on `waitFor`).
    Hello,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Expect {
    pub reply: Option<ReplyRule>,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// For `closeStdin`: the host exits within the deadline.
    pub exit: Option<bool>,
    pub checks: Vec<NamedCheck>,
    /// A result (the host served what it must refuse) breaks this
    /// requirement, at its own level, whatever the case's.
    pub refused: Option<String>,
}

impl Expect {
    /// The own checks this expectation runs, by the names a case's
    /// `charges` gives them.
    pub fn check_names(&self) -> Vec<String> {
        let mut names = vec!["reply".to_owned()];
        if self.result.is_some() {
            names.push("result".into());
        }
        if self.error.is_some() {
            names.push("error".into());
        }
        names.extend(self.checks.iter().map(crate::step::serde_name));
        names
    }
}

crate::stdio_expect!(Expect);
