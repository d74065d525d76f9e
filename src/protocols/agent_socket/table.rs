//! The agent-socket protocol, version 2, written once: methods, halves,
//! message shapes, error codes, limits and the real client's deadlines.
//! Validators, the suite, the reference server and the docs derive from it;
//! `tests` checks it against the vendored `corpus/agent-socket/sources/agent_socket.py`.

use crate::jsonrpc::ErrorCode;

/// "Vibe speaks version 2 only."
pub const PROTOCOL_VERSION: i64 = 2;

/// The `vibeVersion` conform sends: the Vibe release whose sources it models
/// (`mistral-vibe` 3.0.3).
pub const MODELLED_VIBE_VERSION: &str = "3.0.3";

/// "A request that outlives its timeout is answered with the JSON-RPC error code -32001."
pub const TIMEOUT_ERROR: ErrorCode = ErrorCode(-32001);

/// "The JSON-RPC error code -32002, on the reply to any request, aborts the run."
pub const ABORT_ERROR: ErrorCode = ErrorCode(-32002);

/// "One reply line carries a whole tool result": Vibe reads at most this much.
pub const REPLY_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// "Vibe waits for a command's reply up to 30 seconds past its `timeout`".
pub const EXECUTE_GRACE_SECONDS: f64 = 30.0;

/// "The bound on the handshake and on a file read."
pub const REQUEST_TIMEOUT_SECONDS: f64 = 60.0;

/// "`toolTimeoutSeconds`, positive, is how long a `tools/call` may take, by default 600 seconds".
pub const CLIENT_TOOL_TIMEOUT_SECONDS: f64 = 600.0;

/// "`namespace` defaults to `client`".
pub const DEFAULT_NAMESPACE: &str = "client";

/// "A namespace cannot be Vibe's own": `RESERVED_NAMESPACES = frozenset({"vibe", "ui"})`.
pub const RESERVED_NAMESPACES: &[&str] = &["vibe", "ui"];

/// `"modelAccess": "direct" | "programmatic" | "both"`.
pub const MODEL_ACCESS: &[&str] = &["programmatic", "direct", "both"];

/// The largest request Vibe itself sends: a sandbox helper command carries a
/// request chunk of `REQUEST_CHUNK_BYTES` (64 KiB) in one argument, plus the
/// bootstrap script, shell-quoted, in a JSON string.
pub const HELPER_REQUEST_CHUNK_BYTES: usize = 64 * 1024;

/// Which half of the socket a method belongs to. "The socket has two
/// independent halves ... A server may serve either or both."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Handshake,
    Sandbox,
    Tools,
}

/// A JSON type in a message shape, as the real client's pydantic models read it.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Int,
    /// A number; `positive` also refuses zero and below.
    Float {
        positive: bool,
    },
    Str,
    /// Any JSON value.
    Json,
    /// Any JSON object.
    Object,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// An object of these fields; unknown fields are ignored.
    Shape(&'static [Field]),
    /// A list of objects of these fields.
    ListOf(&'static [Field]),
}

/// One field of a message shape.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    /// The field must be present (pydantic: no default).
    pub required: bool,
    /// `null` is allowed (pydantic: `| None`).
    pub nullable: bool,
    /// The docstring says the field may be left out: it states a default
    /// ("``tools`` defaults to none") or what its absence means. A
    /// documented key without this is a SHOULD to send (`as.shape.documented`).
    pub may_omit: bool,
    /// What Vibe silently makes of an empty value of the field (`""`, `{}`,
    /// blank text), where it replaces it by a default.
    pub empty_becomes: Option<&'static str>,
}

const fn f(name: &'static str, ty: Ty, required: bool, nullable: bool) -> Field {
    Field {
        name,
        ty,
        required,
        nullable,
        may_omit: !required,
        empty_becomes: None,
    }
}

/// A documented field Vibe defaults but the docstring gives no default:
/// leaving it out breaks the documented shape.
const fn documented(mut field: Field) -> Field {
    field.may_omit = false;
    field
}

/// A field whose empty value Vibe replaces by `becomes`.
const fn emptied(mut field: Field, becomes: &'static str) -> Field {
    field.empty_becomes = Some(becomes);
    field
}

// Requests, as `_InitializeParams`, `_ExecuteParams`, `_ReadFileParams`,
// `_ToolCallParams` and `_ToolCaller` write them.
pub const INITIALIZE_PARAMS: &[Field] = &[
    f("protocolVersion", Ty::Int, true, false),
    f("vibeVersion", Ty::Str, true, false),
];
pub const EXECUTE_PARAMS: &[Field] = &[
    f("command", Ty::Str, true, false),
    f("cwd", Ty::Str, true, false),
    f("timeout", Ty::Float { positive: false }, true, true),
];
pub const READ_FILE_PARAMS: &[Field] = &[
    f("path", Ty::Str, true, false),
    f("maxBytes", Ty::Int, true, false),
];
pub const CALLER: &[Field] = &[
    f("sessionId", Ty::Str, true, false),
    f("rootSessionId", Ty::Str, true, false),
    f("parentSessionId", Ty::Str, true, true),
    f("name", Ty::Str, true, true),
    f("agentType", Ty::Str, true, true),
];
pub const TOOL_CALL_PARAMS: &[Field] = &[
    f("callbackId", Ty::Str, true, false),
    f("name", Ty::Str, true, false),
    f("input", Ty::Json, true, true),
    f("toolCallId", Ty::Str, true, false),
    f("caller", Ty::Shape(CALLER), true, true),
];

// Replies, as `_InitializeResult`, `_Tool`, `_ExecuteResult`,
// `_ReadFileResult`, `_ToolCallResult`, `_ToolError` and `_ErrorBody` read them.
// "``namespace`` defaults to ``client`` and ``modelAccess`` to
// ``programmatic``"; `namespace = tool.namespace or DEFAULT_NAMESPACE`,
// `dict(tool.input_schema) or {"type": "object"}`, `dict(tool.output_schema)
// if tool.output_schema else None`.
pub const TOOL_DEFINITION: &[Field] = &[
    emptied(
        f("namespace", Ty::Str, false, false),
        "the default namespace, client",
    ),
    f("name", Ty::Str, true, false),
    documented(f("description", Ty::Str, false, false)),
    emptied(
        documented(f("inputSchema", Ty::Object, false, false)),
        "{\"type\": \"object\"}",
    ),
    emptied(
        documented(f("outputSchema", Ty::Object, false, true)),
        "no output schema",
    ),
    f("modelAccess", Ty::Enum(MODEL_ACCESS), false, false),
];
// "``tools`` defaults to none", toolTimeoutSeconds "by default 600
// seconds", workspace and python "without them"; instructions states no
// default, and Vibe drops blank ones (`if reply.instructions and
// reply.instructions.strip() else None`).
pub const INITIALIZE_RESULT: &[Field] = &[
    f("protocolVersion", Ty::Int, true, false),
    f("workspace", Ty::Str, false, true),
    f("python", Ty::Str, false, true),
    f("tools", Ty::ListOf(TOOL_DEFINITION), false, false),
    f(
        "toolTimeoutSeconds",
        Ty::Float { positive: true },
        false,
        true,
    ),
    emptied(
        documented(f("instructions", Ty::Str, false, true)),
        "no instructions",
    ),
];
pub const EXECUTE_RESULT: &[Field] = &[
    f("exitCode", Ty::Int, true, false),
    f("stdout", Ty::Str, true, false),
    f("stderr", Ty::Str, true, false),
];
pub const READ_FILE_RESULT: &[Field] = &[f("contentBase64", Ty::Str, true, true)];
// `result.error.code or "client_tool_failed"`.
pub const TOOL_ERROR: &[Field] = &[
    f("message", Ty::Str, true, false),
    emptied(
        documented(f("code", Ty::Str, false, true)),
        "client_tool_failed",
    ),
    documented(f("details", Ty::Json, false, true)),
];
pub const TOOL_CALL_RESULT: &[Field] = &[
    documented(f("output", Ty::Json, false, true)),
    documented(f("annotations", Ty::Object, false, false)),
    documented(f("error", Ty::Shape(TOOL_ERROR), false, true)),
];
pub const ERROR_BODY: &[Field] = &[
    f("code", Ty::Int, true, false),
    f("message", Ty::Str, true, false),
    f("data", Ty::Json, false, true),
];

/// A shape as the docstring documents it, to show beside what came.
pub fn documented_as(fields: &[Field]) -> &'static str {
    // By their field names: a const's slice need not keep one address.
    let same = |other: &[Field]| {
        fields
            .iter()
            .map(|f| f.name)
            .eq(other.iter().map(|f| f.name))
    };
    if same(INITIALIZE_RESULT) {
        r#"{"protocolVersion": 2, "workspace": str | null, "python": str | null, "tools": [ToolDefinition], "toolTimeoutSeconds": float | null, "instructions": str | null}"#
    } else if same(TOOL_DEFINITION) {
        r#"{"namespace": str, "name": str, "description": str, "inputSchema": object, "outputSchema": object | null, "modelAccess": "direct" | "programmatic" | "both"}"#
    } else if same(EXECUTE_RESULT) {
        r#"{"exitCode": int, "stdout": str, "stderr": str}"#
    } else if same(READ_FILE_RESULT) {
        r#"{"contentBase64": str | null}"#
    } else if same(TOOL_CALL_RESULT) {
        r#"{"output": JSON, "annotations": object, "error": {"message": str, "code": str | null, "details": JSON} | null}"#
    } else if same(TOOL_ERROR) {
        r#"{"message": str, "code": str | null, "details": JSON}"#
    } else if same(ERROR_BODY) {
        r#"{"code": integer, "message": str, "data": JSON}"#
    } else {
        "the documented shape"
    }
}

/// How long the real client waits for a method's reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    /// A fixed bound in seconds.
    Fixed(f64),
    /// The request's own `timeout` plus the grace; unbounded when it is null.
    CommandTimeoutPlusGrace,
    /// `toolTimeoutSeconds` from the handshake, else the default.
    ToolTimeout,
}

/// One method of the protocol. Every method is a request from Vibe (the
/// client) to the server; the server sends nothing unasked.
#[derive(Debug, Clone, Copy)]
pub struct MethodSpec {
    pub name: &'static str,
    pub half: Half,
    pub params: &'static [Field],
    pub result: &'static [Field],
    /// The requirement a result of the wrong shape breaks, where one rule
    /// covers the whole result type; `None` where each field has its own
    /// (the handshake's, charged by its cases).
    pub result_rule: Option<&'static str>,
    pub deadline: Deadline,
}

pub const METHODS: &[MethodSpec] = &[
    MethodSpec {
        name: "agent/initialize",
        half: Half::Handshake,
        params: INITIALIZE_PARAMS,
        result: INITIALIZE_RESULT,
        result_rule: None,
        deadline: Deadline::Fixed(REQUEST_TIMEOUT_SECONDS),
    },
    MethodSpec {
        name: "sandbox/execute",
        half: Half::Sandbox,
        params: EXECUTE_PARAMS,
        result: EXECUTE_RESULT,
        result_rule: Some("as.exec.result"),
        deadline: Deadline::CommandTimeoutPlusGrace,
    },
    MethodSpec {
        name: "sandbox/readFile",
        half: Half::Sandbox,
        params: READ_FILE_PARAMS,
        result: READ_FILE_RESULT,
        result_rule: Some("as.read.content"),
        deadline: Deadline::Fixed(REQUEST_TIMEOUT_SECONDS),
    },
    MethodSpec {
        name: "tools/call",
        half: Half::Tools,
        params: TOOL_CALL_PARAMS,
        result: TOOL_CALL_RESULT,
        result_rule: Some("as.tools.call-result"),
        deadline: Deadline::ToolTimeout,
    },
];

pub fn method(name: &str) -> Option<&'static MethodSpec> {
    METHODS.iter().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    //! The table against the protocol's source.
    use super::*;

    // The sources travel with the project (corpus/agent-socket/sources).
    fn source() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/corpus/agent-socket/sources/agent_socket.py"
        );
        std::fs::read_to_string(path).expect("the vendored agent_socket.py")
    }

    fn tools_source() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/corpus/agent-socket/sources/client_provided_tools.py"
        );
        std::fs::read_to_string(path).expect("the vendored client_provided_tools.py")
    }

    #[test]
    fn constants_match_the_source() {
        let src = source();
        for needle in [
            format!("PROTOCOL_VERSION = {PROTOCOL_VERSION}"),
            format!("TIMEOUT_ERROR_CODE = {}", TIMEOUT_ERROR.0),
            format!("ABORT_ERROR_CODE = {}", ABORT_ERROR.0),
            "REPLY_LIMIT_BYTES = 64 * 1024 * 1024".to_owned(),
            format!("EXECUTE_GRACE_SECONDS = {EXECUTE_GRACE_SECONDS:.1}"),
            format!("REQUEST_TIMEOUT_SECONDS = {REQUEST_TIMEOUT_SECONDS:.1}"),
        ] {
            assert!(
                src.contains(&needle),
                "agent_socket.py no longer says {needle:?}"
            );
        }
        assert_eq!(REPLY_LIMIT_BYTES, 64 * 1024 * 1024);
        let tools = tools_source();
        assert!(tools.contains(&format!(
            "CLIENT_TOOL_TIMEOUT_SECONDS = {CLIENT_TOOL_TIMEOUT_SECONDS:.1}"
        )));
        assert!(tools.contains(&format!("DEFAULT_NAMESPACE = \"{DEFAULT_NAMESPACE}\"")));
        assert!(tools.contains("RESERVED_NAMESPACES = frozenset({\"vibe\", \"ui\"})"));
        assert!(tools.contains("Literal[\"programmatic\", \"direct\", \"both\"]"));
    }

    #[test]
    fn every_method_the_client_calls_is_in_the_table_and_no_other() {
        let src = source();
        // Every `_call(path, "<method>", ...)` of the client.
        let mut called: Vec<String> = Vec::new();
        let mut rest = src.as_str();
        while let Some(i) = rest.find("_call(") {
            rest = &rest[i + 6..];
            let window = &rest[..rest.len().min(200)];
            if let Some(q) = window.find('"') {
                let after = &window[q + 1..];
                if let Some(end) = after.find('"') {
                    called.push(after[..end].to_owned());
                }
            }
        }
        called.sort();
        called.dedup();
        let mut ours: Vec<String> = METHODS.iter().map(|m| m.name.to_owned()).collect();
        ours.sort();
        assert_eq!(called, ours);
    }

    #[test]
    fn every_shape_field_is_a_field_of_the_source_models() {
        let src = source();
        // The models use snake_case; the wire is camelCase.
        let snake = |camel: &str| {
            let mut s = String::new();
            for c in camel.chars() {
                if c.is_ascii_uppercase() {
                    s.push('_');
                    s.push(c.to_ascii_lowercase());
                } else {
                    s.push(c);
                }
            }
            s
        };
        for shape in [
            INITIALIZE_PARAMS,
            EXECUTE_PARAMS,
            READ_FILE_PARAMS,
            CALLER,
            TOOL_CALL_PARAMS,
            TOOL_DEFINITION,
            INITIALIZE_RESULT,
            EXECUTE_RESULT,
            READ_FILE_RESULT,
            TOOL_ERROR,
            TOOL_CALL_RESULT,
            ERROR_BODY,
        ] {
            for field in shape {
                let declared = format!("    {}:", snake(field.name));
                assert!(
                    src.contains(&declared),
                    "no model field {declared:?} in the source"
                );
            }
        }
    }
}
