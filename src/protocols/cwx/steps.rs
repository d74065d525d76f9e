//! The step language of cwx cases (data in `corpus/cwx/cases/`). Each case
//! runs against a fresh host process of the run's tier. Its `config` says
//! how far conform sets the host up (`hello`: only read `host/hello`;
//! `ready`: also `host/initialize` and `host/ready`; `extension`: also
//! activate the extension). Steps `send` a request or notification, write
//! raw bytes (`rawHex`), `await` an answer, `waitFor` a host message,
//! watch (`quiet`), `probe` with `host/ping`, or close the host's stdin.

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
            Need::Extension | Need::BuiltinTier => None,
        }
    }
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Extension => "extension",
            Need::BuiltinTier => "builtin-tier",
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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub setup: Setup,
}

impl crate::case::Config for Config {}

/// The cwx dialect of the step language: the common actions only.
#[derive(Debug, Clone)]
pub struct Lang;

pub type Step = step::Step<Lang>;

/// cwx steps have no keys of their own.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extra {}

/// cwx steps have no actions of their own.
#[derive(Debug, Clone, PartialEq)]
pub enum Own {}

impl Language for Lang {
    type Extra = Extra;
    type Own = Own;
    type Expect = Expect;
    const COMMON: &'static [&'static str] = step::STDIO_COMMON;
    const OWN: &'static [&'static str] = &[];
    const MAX_DEADLINE: f64 = 600.0;

    fn own(_: &Extra) -> Result<Option<Own>, String> {
        Ok(None)
    }

    fn check(step: &Step) -> Result<(), String> {
        if let Action::Send(s) = &step.action
            && s.id.is_some()
        {
            return Err("a cwx request's id is the core's to choose".into());
        }
        step::check_stdio_expect(step)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// The result reads as the method's result type, the way the core reads it.
    ResultShape,
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
}

crate::stdio_expect!(Expect);
