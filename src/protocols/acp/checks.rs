//! The checks written once in code that cases name (`expect.checks`),
//! sans-IO: each reads what the step's answer, the case's variables, the
//! monitor and the editor saw, and says what is wrong (findings) or, for the
//! information checks, what it saw.

use super::steps::NamedCheck;
use super::table;
use crate::matcher::{self, Vars, truncate};
use serde_json::Value;
use std::path::Path;

/// What a named check reads.
pub struct Seen<'a> {
    pub answer: &'a Result<Value, Value>,
    /// The updates of the step's turn.
    pub updates: &'a [Value],
    pub vars: &'a Vars,
    pub monitor: &'a super::monitor::Monitor,
    pub editor: &'a super::editor::Editor,
    pub workspace: &'a Path,
    /// The `protocolVersion` the step asked for, if it sent an initialize.
    pub asked_version: Option<&'a Value>,
}

/// What a check found: broken rules, and what it saw worth reporting.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub broken: Vec<String>,
    pub seen: Vec<String>,
}

impl Verdict {
    fn broken(broken: Vec<String>) -> Verdict {
        Verdict {
            broken,
            seen: vec![],
        }
    }

    fn seen(seen: String) -> Verdict {
        Verdict {
            broken: vec![],
            seen: vec![seen],
        }
    }
}

fn listed(r: Option<&Value>) -> Vec<Value> {
    r.and_then(|r| r.get("sessions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn config_options(v: Option<&Value>) -> Vec<Value> {
    v.and_then(|n| n.get("configOptions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn run(check: NamedCheck, seen: &Seen<'_>) -> Verdict {
    let result = seen.answer.as_ref().ok();
    let session = seen.vars.get("session").cloned().unwrap_or(Value::Null);
    match check {
        NamedCheck::SessionIdsUnique => {
            let mut ids = std::collections::BTreeSet::new();
            Verdict::broken(
                seen.monitor
                    .new_session_ids
                    .iter()
                    .filter(|id| !ids.insert(id.as_str()))
                    .map(|id| format!("session/new returned the session id {id:?} twice"))
                    .collect(),
            )
        }
        NamedCheck::VersionNegotiated => version_negotiated(result, seen.asked_version),
        NamedCheck::HistoryReplayed => {
            // The turn before the load said something: the replay has the
            // user's prompt and the agent's message again.
            let has = |kind: &str| seen.updates.iter().any(|u| u["sessionUpdate"] == kind);
            if has("user_message_chunk") && has("agent_message_chunk") {
                Verdict::default()
            } else {
                Verdict::broken(vec!["session/load did not replay the conversation (a user_message_chunk and the agent's message again)".into()])
            }
        }
        NamedCheck::TerminalsReleased => Verdict::broken(
            seen.editor
                .created
                .iter()
                .filter(|t| !seen.editor.released.contains(t))
                .map(|t| format!("terminal {t} was never released with terminal/release"))
                .collect(),
        ),
        NamedCheck::FileWritten => {
            let path = seen.workspace.join("written.txt");
            // The text asked for; a model may end the file with a newline.
            match std::fs::read_to_string(&path) {
                Ok(t) if t.trim_end_matches('\n') == "written by the agent" => Verdict::default(),
                Ok(t) => Verdict::broken(vec![format!("written.txt holds {:?}", truncate(&t, 80))]),
                Err(e) => Verdict::broken(vec![format!("written.txt was not written: {e}")]),
            }
        }
        NamedCheck::NoTerminalAuthMethod => Verdict::broken(
            result
                .and_then(|r| r.get("authMethods"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|m| m.get("type").and_then(Value::as_str) == Some("terminal"))
                .map(|m| {
                    format!(
                        "authMethods offers the terminal method {} although the client did not advertise auth.terminal",
                        matcher::brief(m)
                    )
                })
                .collect(),
        ),
        NamedCheck::NoBooleanConfig => Verdict::broken(
            config_options(seen.vars.get("new"))
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) == Some("boolean"))
                .map(|o| {
                    format!(
                        "session/new offers the boolean config option {} although the client did not advertise session.configOptions.boolean",
                        o.get("id").map(Value::to_string).unwrap_or_default()
                    )
                })
                .collect(),
        ),
        NamedCheck::AllConfigOptions => {
            let offered = config_options(seen.vars.get("new")).len();
            let got = config_options(result).len();
            if got == offered {
                Verdict::default()
            } else {
                Verdict::broken(vec![format!(
                    "the result lists {got} config options, session/new offered {offered}"
                )])
            }
        }
        // Only the filter is checked: whether a session with no turn yet is
        // listed, the pages do not say.
        NamedCheck::ListedByCwd => {
            let ws = seen.workspace.display().to_string();
            Verdict::broken(
                listed(result)
                    .iter()
                    .filter(|s| s.get("cwd").and_then(Value::as_str) != Some(ws.as_str()))
                    .map(|s| format!("session/list filtered by cwd returned {}", matcher::brief(s)))
                    .collect(),
            )
        }
        NamedCheck::SessionNotListed => Verdict::broken(
            listed(result)
                .iter()
                .filter(|s| s.get("sessionId") == Some(&session))
                .map(|_| format!("session/list still lists the deleted session {session}"))
                .collect(),
        ),
        NamedCheck::NotesUnchanged => {
            // "`reject_once` - Reject this operation only this time": the
            // edit did not happen, whichever way the agent would have made it.
            match std::fs::read_to_string(seen.workspace.join("notes.txt")) {
                Ok(t) if t == super::WORKSPACE_NOTES => Verdict::default(),
                Ok(t) => Verdict::broken(vec![format!(
                    "notes.txt was changed after the client rejected the edit: it holds {:?}",
                    truncate(&t, 80)
                )]),
                Err(e) => Verdict::broken(vec![format!(
                    "notes.txt is gone after the client rejected the edit: {e}"
                )]),
            }
        }
        NamedCheck::PlanUpdates => plan_updates(seen.updates),
        NamedCheck::RootFields => root_fields(seen.monitor),
    }
}

/// "If the Agent supports the requested version, it MUST respond with the
/// same version. Otherwise, the Agent MUST respond with the latest version
/// it supports." conform cannot know an agent's latest version: only a
/// version the agent cannot support is wrong, the one asked for (which no
/// release defines) or another no release defines.
fn version_negotiated(result: Option<&Value>, asked: Option<&Value>) -> Verdict {
    let got = result.and_then(|r| r.get("protocolVersion"));
    let Some(version) = got.and_then(Value::as_u64) else {
        return Verdict::broken(vec![format!(
            "the result has no protocol version: {}",
            got.map(Value::to_string).unwrap_or("none".into())
        )]);
    };
    let newest = table::NEWEST_DEFINED_VERSION;
    if Some(got.unwrap_or(&Value::Null)) == asked {
        return Verdict::broken(vec![format!(
            "asked for version {version}, which no release of ACP defines (the newest conform knows is {newest}), the agent answered {version}: it echoed a version it cannot support instead of its latest"
        )]);
    }
    if version > newest {
        return Verdict::broken(vec![format!(
            "the agent answered version {version}, which no release of ACP defines (the newest conform knows is {newest}): not a version it can support"
        )]);
    }
    Verdict::seen(format!(
        "asked for a version no release defines, the agent answered version {version}"
    ))
}

/// Plan updates, as information: whether each lists what the one before it
/// did. "The Agent MUST send a complete list of all plan entries in each
/// update" and "The Agent MAY add, remove, or modify plan entries": an
/// update with fewer entries is one or the other, which the wire cannot tell.
fn plan_updates(updates: &[Value]) -> Verdict {
    let plans: Vec<usize> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .map(|u| {
            u.get("entries")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        })
        .collect();
    if plans.is_empty() {
        return Verdict::default();
    }
    let counts = plans
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut seen = format!("{} plan update(s), with {counts} entries", plans.len());
    if plans.windows(2).any(|w| w[1] < w[0]) {
        seen.push_str(
            "; a later update lists fewer entries than the one before: either the agent removed entries (agent-plan.mdx allows it) or it sent a partial list (which 'MUST send a complete list' forbids), and the wire cannot tell which",
        );
    }
    Verdict::seen(seen)
}

/// Fields at the root of a result the vendored schema does not define.
fn root_fields(monitor: &super::monitor::Monitor) -> Verdict {
    if monitor.unknown_root_fields.is_empty() {
        return Verdict::seen(format!(
            "every result's root fields are defined by the vendored schema (release {})",
            table::SCHEMA_RELEASE
        ));
    }
    let fields = monitor
        .unknown_root_fields
        .iter()
        .map(|(method, field)| format!("`{field}` in the result of {method}"))
        .collect::<Vec<_>>()
        .join(", ");
    Verdict::seen(format!(
        "{fields}: not defined by the vendored schema (release {}). A custom field at the root breaks 'Implementations MUST NOT add any custom fields at the root of a type' (extensibility.mdx: custom data goes in `_meta`); a field a later release defines does not; the wire cannot tell which",
        table::SCHEMA_RELEASE
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_version_the_agent_supports_is_never_wrong_one_it_cannot_is() {
        let asked = json!(65535);
        let v =
            |got: Value| version_negotiated(Some(&json!({"protocolVersion": got})), Some(&asked));
        assert!(v(json!(1)).broken.is_empty());
        assert!(
            v(json!(2)).broken.is_empty(),
            "2 is a version a release defines"
        );
        assert_eq!(v(json!(65535)).broken.len(), 1);
        assert_eq!(v(json!(7)).broken.len(), 1);
        assert_eq!(
            version_negotiated(Some(&json!({})), Some(&asked))
                .broken
                .len(),
            1
        );
    }

    #[test]
    fn a_shorter_plan_is_information_never_a_failure() {
        let plan = |n: usize| json!({"sessionUpdate": "plan", "entries": vec![json!({}); n]});
        let v = plan_updates(&[plan(3), plan(1)]);
        assert!(v.broken.is_empty());
        assert!(v.seen[0].contains("3, 1 entries"));
        assert!(v.seen[0].contains("cannot tell"));
        assert!(!plan_updates(&[plan(2), plan(2)]).seen[0].contains("cannot tell"));
    }
}
