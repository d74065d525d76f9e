//! The core's strict reading of everything a host sends, sans-IO: the same
//! rules as the seed's `parse_host_message` ("Host→core types use
//! `deny_unknown_fields` — host output is untrusted input"), with the same
//! serde types, so that conform and the seed agree on every message (the
//! golden corpus in `corpus/cwx/messages/` holds both to it).

use super::table::{self, Direction, Tier};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

/// `Some(value)` even for an explicit `null`, as the seed's `present`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn present_entry<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EntryRef>, D::Error> {
    EntryRef::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerRef {
    pub plugin_id: String,
    pub generation: u64,
    pub owner_token: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcErrorWire {
    pub code: i64,
    pub message: String,
    #[serde(default, deserialize_with = "present")]
    pub data: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolRange {
    pub min: u32,
    pub max: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    pub protocol: ProtocolRange,
    pub host_version: String,
    pub bundle_sha256: String,
    pub runtime: HelloRuntime,
    pub tier: Tier,
    pub builtin_modules: Vec<ModuleDigestWire>,
    #[serde(default)]
    pub memory_limit_mib: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloRuntime {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleDigestWire {
    pub id: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyParams {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegisterKind {
    Tool,
    Command,
    Hook,
    PromptSection,
    PromptTemplate,
    SkillRoot,
    ShellHook,
    McpServer,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterSpecWire {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub input_schema: Option<Map<String, Value>>,
    #[serde(default)]
    pub argument_hint: Option<String>,
}

/// Core→host shape the seed reads without `deny_unknown_fields`.
#[derive(Debug, Clone, Deserialize)]
pub struct EntryRef {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterParams {
    pub owner: OwnerRef,
    #[serde(default, deserialize_with = "present_entry")]
    pub scope: Option<EntryRef>,
    pub kind: RegisterKind,
    pub spec: RegisterSpecWire,
}

impl RegisterParams {
    /// The seed's `check_spec`: which spec fields each kind uses.
    pub fn check_spec(&self) -> Result<(), String> {
        let spec = &self.spec;
        match self.kind {
            RegisterKind::Tool if spec.input_schema.is_none() => {
                Err("a tool registration needs `spec.input_schema`".into())
            }
            RegisterKind::Tool if spec.argument_hint.is_some() => {
                Err("a tool registration has no `spec.argument_hint`".into())
            }
            RegisterKind::Command if spec.input_schema.is_some() => {
                Err("a command registration has no `spec.input_schema`".into())
            }
            RegisterKind::Tool | RegisterKind::Command => Ok(()),
            _ if spec.input_schema.is_some() || spec.argument_hint.is_some() => Err(
                "a hook, prompt or skill root registration has no input schema or argument hint"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnregisterParams {
    pub owner: OwnerRef,
    pub handle: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreCallParams {
    pub owner: OwnerRef,
    pub ticket: String,
    pub name: String,
    pub input: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultedParams {
    pub owner: OwnerRef,
    pub error: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogParams {
    pub level: String,
    pub msg: String,
    #[serde(default)]
    pub plugin_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub id: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionRedeemParams {
    pub owner: OwnerRef,
    pub execution_id: String,
    pub ticket: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcLaunchParams {
    pub owner: OwnerRef,
    pub session_id: String,
    pub ticket: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcSessionParams {
    pub owner: OwnerRef,
    pub session_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcWriteParams {
    pub owner: OwnerRef,
    pub session_id: String,
    pub frame: Value,
    #[serde(default)]
    pub ticket: Option<String>,
    #[serde(default)]
    pub operation_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpHttpHeaders {
    pub accept: Option<String>,
    pub content_type: Option<String>,
    pub mcp_session_id: Option<String>,
    pub mcp_protocol_version: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetFetchParams {
    pub owner: OwnerRef,
    pub session_id: String,
    pub url: String,
    pub method: String,
    pub headers: McpHttpHeaders,
    #[serde(default)]
    pub frame: Option<Value>,
    #[serde(default)]
    pub ticket: Option<String>,
    #[serde(default)]
    pub operation_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetReadParams {
    pub owner: OwnerRef,
    pub session_id: String,
    pub response_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    jsonrpc: String,
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<RpcErrorWire>,
}

/// One host→core message, read as the core reads it.
#[derive(Debug, Clone)]
pub enum HostMessage {
    Request {
        id: u64,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: u64,
        outcome: Result<Value, RpcErrorWire>,
    },
}

fn params<T: DeserializeOwned>(method: &str, p: &Option<Value>) -> Result<T, String> {
    let p = p.clone().unwrap_or_else(|| json!({}));
    if !p.is_object() {
        return Err(format!("{method}: params must be an object"));
    }
    // The error names the field it is about (`host/hello.tier: ...`), for
    // the rule of that field; one about the params as a whole (an unknown
    // field) names the method.
    serde_path_to_error::deserialize(p).map_err(|e| {
        let mut at = e.path().to_string();
        let inner = e.into_inner();
        // An unknown field is the fault of the object that holds it.
        if inner.to_string().starts_with("unknown field") {
            match at.rfind('.') {
                Some(i) => at.truncate(i),
                None => at = ".".into(),
            }
        }
        if at == "." {
            format!("{method}: {inner}")
        } else {
            format!("{method}.{at}: {inner}")
        }
    })
}

/// Whether the params read as `T`.
fn check<T: DeserializeOwned>(method: &str, p: &Option<Value>) -> Result<(), String> {
    params::<T>(method, p).map(|_| ())
}

/// Parses and strictly validates one host→core payload from a host of
/// `tier`. The error says which rule the message broke.
pub fn parse_host_message(value: Value, tier: Tier) -> Result<HostMessage, String> {
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| format!("envelope: {e}"))?;
    if envelope.jsonrpc != "2.0" {
        return Err("envelope: jsonrpc must be \"2.0\"".into());
    }
    let Some(method) = envelope.method.clone() else {
        let id = envelope.id.ok_or("response: missing id")?;
        if envelope.params.is_some() {
            return Err("response: unexpected params".into());
        }
        return match (envelope.result, envelope.error) {
            (Some(r), None) => Ok(HostMessage::Response { id, outcome: Ok(r) }),
            (None, Some(e)) => Ok(HostMessage::Response {
                id,
                outcome: Err(e),
            }),
            _ => Err("response: needs exactly one of result or error".into()),
        };
    };
    if envelope.result.is_some() || envelope.error.is_some() {
        return Err(format!("`{method}`: a request carries no result or error"));
    }
    let spec = table::method(Direction::HostToCore, &method)
        .ok_or_else(|| format!("unknown host_to_core method `{method}`"))?;
    if !spec.tiers.contains(&tier) {
        return Err(format!(
            "`{method}` is not allowed on the {} tier",
            tier.name()
        ));
    }
    match (spec.request, envelope.id) {
        (true, None) => return Err(format!("`{method}` must be a request (with id)")),
        (false, Some(_)) => return Err(format!("`{method}` must be a notification (no id)")),
        _ => {}
    }
    let p = &envelope.params;
    match method.as_str() {
        "registry/register" => {
            let r: RegisterParams = params(&method, p)?;
            r.check_spec().map_err(|why| format!("{method}: {why}"))?;
        }
        "registry/unregister" => check::<UnregisterParams>(&method, p)?,
        "core/call" => check::<CoreCallParams>(&method, p)?,
        "net/start" | "proc/launch" => check::<ProcLaunchParams>(&method, p)?,
        "net/fetch" => check::<NetFetchParams>(&method, p)?,
        "net/read" | "net/release" => check::<NetReadParams>(&method, p)?,
        "net/close" | "proc/close" | "proc/read" => check::<ProcSessionParams>(&method, p)?,
        "proc/write" => check::<ProcWriteParams>(&method, p)?,
        "exec/redeem" => check::<ExecutionRedeemParams>(&method, p)?,
        "host/hello" => {
            let hello: HelloParams = params(&method, p)?;
            if !matches!(hello.runtime.name.as_str(), "bun" | "node") {
                return Err(format!(
                    "host/hello.runtime.name: unknown runtime `{}`",
                    hello.runtime.name
                ));
            }
        }
        "host/ready" => check::<EmptyParams>(&method, p)?,
        "ext/faulted" => check::<FaultedParams>(&method, p)?,
        "log" => check::<LogParams>(&method, p)?,
        "$/cancel" => check::<CancelParams>(&method, p)?,
        _ => {
            return Err(format!(
                "`{method}` is in the method table but has no decoder"
            ));
        }
    }
    let params = envelope.params.unwrap_or_else(|| json!({}));
    Ok(match envelope.id {
        Some(id) => HostMessage::Request { id, method, params },
        None => HostMessage::Notification { method, params },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Value {
        json!({"plugin_id": "p", "generation": 1, "owner_token": "t"})
    }

    #[test]
    fn a_tool_registration_needs_an_input_schema() {
        let ok = json!({"jsonrpc": "2.0", "id": 1, "method": "registry/register", "params": {
            "owner": owner(), "kind": "tool",
            "spec": {"name": "t", "description": "d", "input_schema": {"type": "object"}}}});
        assert!(parse_host_message(ok, Tier::Plugin).is_ok());
        let bad = json!({"jsonrpc": "2.0", "id": 1, "method": "registry/register", "params": {
            "owner": owner(), "kind": "tool", "spec": {"name": "t", "description": "d"}}});
        let e = parse_host_message(bad, Tier::Plugin).unwrap_err();
        assert!(e.contains("needs `spec.input_schema`"), "{e}");
    }

    #[test]
    fn builtin_only_methods_are_refused_from_a_plugin_host() {
        let m = json!({"jsonrpc": "2.0", "id": 3, "method": "proc/read",
            "params": {"owner": owner(), "session_id": "s"}});
        assert!(parse_host_message(m.clone(), Tier::Builtin).is_ok());
        let e = parse_host_message(m, Tier::Plugin).unwrap_err();
        assert!(e.contains("not allowed on the plugin tier"), "{e}");
    }

    #[test]
    fn unknown_fields_null_params_and_two_outcomes_are_refused() {
        for (m, want) in [
            (
                json!({"jsonrpc": "2.0", "method": "host/ready", "params": {}, "x": 1}),
                "unknown field",
            ),
            (
                json!({"jsonrpc": "2.0", "method": "host/ready", "params": null}),
                "must be an object",
            ),
            (
                json!({"jsonrpc": "2.0", "method": "host/ready", "params": []}),
                "must be an object",
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "m"}}),
                "exactly one",
            ),
            (json!({"jsonrpc": "2.0", "id": -1, "result": 1}), "envelope"),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "host/ready"}),
                "must be a notification",
            ),
            (
                json!({"jsonrpc": "2.0", "method": "core/call", "params": {}}),
                "must be a request",
            ),
            (json!({"jsonrpc": "1.0", "method": "host/ready"}), "jsonrpc"),
        ] {
            let e = parse_host_message(m.clone(), Tier::Builtin).unwrap_err();
            assert!(e.contains(want), "{m}: {e}");
        }
    }
}

// ---------------------------------------------------------------------------
// Core → host: what conform writes as the core, read back the seed's way
// (`parse_core_message`): the table and tiers strictly, the shapes as the
// seed's core→host types read them (unknown fields ignored, except in
// `hook/evaluate`'s payload).
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[allow(dead_code)]
struct HostLimits {
    max_frame: u64,
    max_inflight: u64,
    dispose_deadline_ms: u64,
    activate_deadline_ms: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct InitializeParams {
    protocol: u32,
    limits: HostLimits,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ActivateParams {
    owner: OwnerRef,
    #[serde(default, deserialize_with = "present_entry")]
    scope: Option<EntryRef>,
    plugin_name: String,
    entry: EntryRef,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    data_dir: Option<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct DeactivateParams {
    owner: OwnerRef,
    #[serde(default, deserialize_with = "present_entry")]
    entry: Option<EntryRef>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolCallParams {
    handle: u64,
    call_id: String,
    input: Value,
    deadline_ms: u64,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    ticket: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    origin_turn_id: Option<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct CommandRunParams {
    handle: u64,
    command_id: String,
    raw_input: String,
    deadline_ms: u64,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    origin_turn_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct HookDispatchWire {
    event: String,
    dialect: String,
    point: String,
    #[serde(default)]
    matcher: Option<String>,
    query: String,
}

/// "Opaque execution references only. Rust never sends commands, inputs,
/// environment or credentials."
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct HarnessRunParams {
    owner: OwnerRef,
    execution_id: String,
    ticket: String,
    deadline_ms: u64,
    #[serde(default)]
    hook: Option<HookDispatchWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct McpOperationGrant {
    ticket: String,
    operation_id: String,
    method: String,
    #[serde(default)]
    wire_id: Option<String>,
    params: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct McpOpenParams {
    owner: OwnerRef,
    session_id: String,
    launch_ticket: String,
    transport: String,
    initialize_grant: McpOperationGrant,
    initialized_grant: McpOperationGrant,
    client_version: String,
    deadline_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct McpRequestParams {
    owner: OwnerRef,
    session_id: String,
    grant: McpOperationGrant,
    deadline_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct McpCloseParams {
    owner: OwnerRef,
    session_id: String,
    deadline_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct HookCallPayload {
    name: String,
    call_id: String,
    input: Value,
    mode: String,
    workspace: String,
    model: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct HookEvaluateParams {
    handle: u64,
    event: String,
    payload: HookCallPayload,
    deadline_ms: u64,
}

/// Why a core→host payload is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The method exists, but not for this tier's host.
    pub tier: bool,
    pub why: String,
}

impl From<String> for Refused {
    fn from(why: String) -> Refused {
        Refused { tier: false, why }
    }
}

impl From<&str> for Refused {
    fn from(why: &str) -> Refused {
        Refused::from(why.to_owned())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Parses one core→host payload bound for a host of `tier`, as the seed's
/// `parse_core_message` does for the methods conform sends.
pub fn parse_core_message(value: Value, tier: Tier) -> Result<(), Refused> {
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| format!("envelope: {e}"))?;
    if envelope.jsonrpc != "2.0" {
        return Err("envelope: jsonrpc must be \"2.0\"".into());
    }
    let Some(method) = envelope.method.clone() else {
        envelope.id.ok_or("response: missing id")?;
        if envelope.params.is_some() {
            return Err("response: unexpected params".into());
        }
        return match (&envelope.result, &envelope.error) {
            (Some(_), None) | (None, Some(_)) => Ok(()),
            _ => Err("response: needs exactly one of result or error".into()),
        };
    };
    let spec = table::method(Direction::CoreToHost, &method)
        .ok_or_else(|| format!("unknown core_to_host method `{method}`"))?;
    if !spec.tiers.contains(&tier) {
        return Err(Refused {
            tier: true,
            why: format!("`{method}` is not allowed on the {} tier", tier.name()),
        });
    }
    match (spec.request, envelope.id) {
        (true, None) => return Err(format!("`{method}` must be a request (with id)").into()),
        (false, Some(_)) => {
            return Err(format!("`{method}` must be a notification (no id)").into());
        }
        _ => {}
    }
    let p = &envelope.params;
    match method.as_str() {
        "$/cancel" => check::<CancelParams>(&method, p)?,
        "host/initialize" => check::<InitializeParams>(&method, p)?,
        "host/ping" | "host/shutdown" => check::<EmptyParams>(&method, p)?,
        "ext/activate" => check::<ActivateParams>(&method, p)?,
        "ext/deactivate" => check::<DeactivateParams>(&method, p)?,
        "tool/call" => check::<ToolCallParams>(&method, p)?,
        "command/run" => check::<CommandRunParams>(&method, p)?,
        "hook/evaluate" => check::<HookEvaluateParams>(&method, p)?,
        "harness/run" => check::<HarnessRunParams>(&method, p)?,
        "mcp/open" => check::<McpOpenParams>(&method, p)?,
        "mcp/request" => check::<McpRequestParams>(&method, p)?,
        "mcp/close" => check::<McpCloseParams>(&method, p)?,
        _ => {
            return Err(format!("`{method}` is in the method table but has no decoder").into());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Results the core reads from the host's answers (serde as the seed's types:
// unknown fields ignored except where the seed denies them).
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[allow(dead_code)]
enum ActivateResult {
    Ok {
        tools: Vec<String>,
        #[serde(default)]
        commands: Vec<String>,
    },
    Failed {
        diagnostic: String,
    },
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct DeactivateResult {
    disposed: bool,
    leaked: Vec<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
enum ContentBlockWire {
    Text { text: String },
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolResultWire {
    content: Vec<ContentBlockWire>,
    is_error: bool,
    #[serde(default, deserialize_with = "present")]
    structured: Option<Value>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(dead_code)]
enum CommandResultWire {
    Success {
        #[serde(default)]
        text: Option<String>,
    },
    Error {
        text: String,
    },
    Submit {
        prompt: String,
        #[serde(default)]
        text: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)]
enum HookVerdictWire {
    Abstain,
    Deny { reason: String },
    Ask { reason: String },
    Annotate { text: String },
    Revise { input: Map<String, Value> },
}

// The result types with no field but their own: the documented shapes. The
// seed's types have no `deny_unknown_fields`, so the core ignores a field
// they do not name; these twins find it (a SHOULD: the peer copes).

#[derive(Deserialize)]
#[serde(tag = "status", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)]
enum ActivateDocumented {
    Ok {
        tools: Vec<String>,
        #[serde(default)]
        commands: Vec<String>,
    },
    Failed {
        diagnostic: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DeactivateDocumented {
    disposed: bool,
    leaked: Vec<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)]
enum ContentDocumented {
    Text { text: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ToolResultDocumented {
    content: Vec<ContentDocumented>,
    is_error: bool,
    #[serde(default, deserialize_with = "present")]
    structured: Option<Value>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)]
enum CommandDocumented {
    Success {
        #[serde(default)]
        text: Option<String>,
    },
    Error {
        text: String,
    },
    Submit {
        prompt: String,
        #[serde(default)]
        text: Option<String>,
    },
}

/// The seed's `RegisterResult` (untagged): what the core answers a
/// registration with.
#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum RegisterResult {
    Admitted { handle: u64 },
    Refused { refused: String },
}

/// A field a result carries beyond its documented type, if it does (a
/// result that does not read as its type at all is [`result_violation`]'s).
pub fn result_undocumented(method: &str, result: &Value) -> Option<String> {
    fn read<T: DeserializeOwned>(name: &str, v: &Value) -> Option<String> {
        serde_json::from_value::<T>(v.clone())
            .err()
            .map(|e| format!("the result is not the documented {name}: {e}"))
    }
    if result_violation(method, result).is_some() {
        return None;
    }
    match method {
        "ext/activate" => read::<ActivateDocumented>("ActivateResult", result),
        "ext/deactivate" => read::<DeactivateDocumented>("DeactivateResult", result),
        "tool/call" => read::<ToolResultDocumented>("ToolResultWire", result),
        "command/run" => read::<CommandDocumented>("CommandResultWire", result),
        _ => None,
    }
}

/// How the core's result to the host's `method` fails to read as its type
/// (`registry/register`: RegisterResult; `core/call`: ToolResultWire).
pub fn core_result_violation(method: &str, result: &Value) -> Option<String> {
    match method {
        "registry/register" => serde_json::from_value::<RegisterResult>(result.clone())
            .err()
            .map(|_| "the result is neither {handle: u64} nor {refused: string}".to_owned()),
        "core/call" => result_violation("tool/call", result),
        _ => None,
    }
}

/// "Every code on the channel, by the name the TypeScript side uses."
pub const CHANNEL_CODES: &[(&str, i64)] = &[
    ("ParseError", -32700),
    ("InvalidRequest", -32600),
    ("MethodNotFound", -32601),
    ("InvalidParams", -32602),
    ("Internal", -32603),
    ("ExecutionFailed", -32000),
    ("NotAvailable", -32001),
    ("Refused", -32002),
    ("Denied", -32003),
    ("Cancelled", -32800),
];

/// Whether `code` is one of the channel's.
pub fn channel_code(code: i64) -> bool {
    CHANNEL_CODES.iter().any(|(_, c)| *c == code)
}

/// How the result of `method` fails to read as its type, if it does.
pub fn result_violation(method: &str, result: &Value) -> Option<String> {
    result_violation_at(method, result).map(|(_, why)| why)
}

/// [`result_violation`], with the path under the result that the wire
/// type's reader stopped at (`content`, `content[0].type`; `.` for the
/// result as a whole, as where an enum's tag is unknown).
pub fn result_violation_at(method: &str, result: &Value) -> Option<(String, String)> {
    fn read<T: DeserializeOwned>(name: &str, v: &Value) -> Option<(String, String)> {
        serde_path_to_error::deserialize::<_, T>(v.clone())
            .err()
            .map(|e| {
                let at = e.path().to_string();
                (
                    at,
                    format!("the result is not a {name}: {}", e.into_inner()),
                )
            })
    }
    match method {
        "ext/activate" => read::<ActivateResult>("ActivateResult", result),
        "ext/deactivate" => read::<DeactivateResult>("DeactivateResult", result),
        "tool/call" => read::<ToolResultWire>("ToolResultWire", result),
        "command/run" => read::<CommandResultWire>("CommandResultWire", result),
        "hook/evaluate" => read::<HookVerdictWire>("HookVerdictWire", result),
        _ => None,
    }
}

#[cfg(test)]
mod result_tests {
    use super::*;

    /// serde's `deny_unknown_fields` on an internally tagged enum refuses an
    /// extra field in a struct variant, but a unit variant (`abstain`) reads
    /// any map: the seed's own type admits `{"kind":"abstain","why":"x"}`, so
    /// conform does too.
    #[test]
    fn hook_verdicts_read_as_the_seed_reads_them() {
        assert_eq!(
            result_violation("hook/evaluate", &json!({"kind": "abstain"})),
            None
        );
        assert_eq!(
            result_violation("hook/evaluate", &json!({"kind": "abstain", "why": "x"})),
            None
        );
        assert!(
            result_violation(
                "hook/evaluate",
                &json!({"kind": "deny", "reason": "r", "why": "x"})
            )
            .is_some()
        );
        assert!(result_violation("hook/evaluate", &json!({"kind": "maybe"})).is_some());
    }

    #[test]
    fn tool_and_command_results_need_their_shapes() {
        let ok = json!({"content": [{"type": "text", "text": "t"}], "is_error": false});
        assert_eq!(result_violation("tool/call", &ok), None);
        assert!(
            result_violation("tool/call", &json!({"content": "t", "is_error": false})).is_some()
        );
        assert_eq!(
            result_violation("command/run", &json!({"kind": "success"})),
            None
        );
        assert!(result_violation("command/run", &json!({"kind": "ok"})).is_some());
        assert!(result_violation("ext/deactivate", &json!({"disposed": "yes"})).is_some());
    }

    #[test]
    fn a_field_beyond_the_documented_result_is_found_apart_from_a_broken_shape() {
        let extra = json!({"content": [], "is_error": false, "meta": 1});
        assert_eq!(result_violation("tool/call", &extra), None);
        assert!(result_undocumented("tool/call", &extra).is_some());
        let block =
            json!({"content": [{"type": "text", "text": "t", "lang": "x"}], "is_error": false});
        assert!(result_undocumented("tool/call", &block).is_some());
        assert!(
            result_undocumented(
                "ext/activate",
                &json!({"status": "ok", "tools": [], "x": 1})
            )
            .is_some()
        );
        assert_eq!(
            result_undocumented("ext/activate", &json!({"status": "ok", "tools": []})),
            None
        );
        // A broken shape is the MUST rule's, not this one's.
        assert_eq!(
            result_undocumented("tool/call", &json!({"content": "t"})),
            None
        );
    }

    #[test]
    fn the_cores_answers_read_as_register_results_and_tool_results() {
        assert_eq!(
            core_result_violation("registry/register", &json!({"handle": 3})),
            None
        );
        assert_eq!(
            core_result_violation("registry/register", &json!({"refused": "no"})),
            None
        );
        assert!(core_result_violation("registry/register", &json!({"ok": true})).is_some());
        assert!(core_result_violation("registry/register", &json!({"handle": -1})).is_some());
        assert!(core_result_violation("core/call", &json!({"content": []})).is_some());
        assert!(channel_code(-32800) && !channel_code(-32099));
    }
}
