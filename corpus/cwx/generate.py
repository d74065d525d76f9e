#!/usr/bin/env python3
"""Writes the golden message corpus of the CWX1 protocol (messages/*.json).

Every entry is one message (or raw frame bytes) with the verdict the seed's
parser gives (`parse_host_message` for host_to_core, `parse_core_message` for
core_to_host, `read_frame` for frames) and why, read from the seed's source
(../shared/specs/cwx/protocol.rs.txt). conform's validator must agree with
every entry (tests/cwx_corpus.rs); other implementations can replay them.
Re-run after changing the rules here: python3 corpus/cwx/generate.py
"""
import copy, json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
OWNER = {"plugin_id": "example", "generation": 1, "owner_token": "0123456789abcdef0123456789abcdef"}
SHA = "ab" * 32

# host_to_core methods: (name, request, builtin only, valid params)
H2C = [
    ("host/hello", False, False, {"protocol": {"min": 1, "max": 1}, "host_version": "0.1.0",
        "bundle_sha256": SHA, "runtime": {"name": "bun", "version": "1.2.3"}, "tier": "plugin",
        "builtin_modules": [{"id": "example", "sha256": SHA}]}),
    ("host/ready", False, False, {}),
    ("registry/register", True, False, {"owner": OWNER, "kind": "tool",
        "spec": {"name": "echo", "description": "Echoes", "input_schema": {"type": "object"}}}),
    ("registry/unregister", True, False, {"owner": OWNER, "handle": 3}),
    ("core/call", True, False, {"owner": OWNER, "ticket": "t-1", "name": "read_file", "input": {"path": "a"}}),
    ("ext/faulted", False, False, {"owner": OWNER, "error": "boom"}),
    ("log", False, False, {"level": "info", "msg": "hello"}),
    ("$/cancel", False, False, {"id": 7}),
    ("proc/launch", True, True, {"owner": OWNER, "session_id": "s", "ticket": "t"}),
    ("proc/read", True, True, {"owner": OWNER, "session_id": "s"}),
    ("proc/write", True, True, {"owner": OWNER, "session_id": "s", "frame": {"x": 1}}),
    ("proc/close", True, True, {"owner": OWNER, "session_id": "s"}),
    ("net/start", True, True, {"owner": OWNER, "session_id": "s", "ticket": "t"}),
    ("net/fetch", True, True, {"owner": OWNER, "session_id": "s", "url": "https://example.test/",
        "method": "POST", "headers": {"accept": "application/json"}}),
    ("net/read", True, True, {"owner": OWNER, "session_id": "s", "response_id": "r"}),
    ("net/release", True, True, {"owner": OWNER, "session_id": "s", "response_id": "r"}),
    ("net/close", True, True, {"owner": OWNER, "session_id": "s"}),
    ("exec/redeem", True, True, {"owner": OWNER, "execution_id": "e", "ticket": "t"}),
]
# Optional fields (absent is fine) per method, by path.
OPTIONAL = {"host/hello": ["memory_limit_mib"], "log": ["plugin_id"], "registry/register": ["scope"],
            "proc/write": ["ticket", "operation_id"], "net/fetch": ["frame", "ticket", "operation_id"]}

entries = {}

def add(group, id, direction, tier, message, verdict, why, contains=None):
    e = {"id": f"{direction}/{id}", "direction": direction, "tier": tier}
    if isinstance(message, (bytes, bytearray)):
        e["frame_hex"] = message.hex()
    else:
        e["message"] = message
    e["verdict"] = verdict
    if contains:
        e["error_contains"] = contains
    e["why"] = why
    entries.setdefault(group, []).append(e)

def env(method, params, request, id=1):
    m = {"jsonrpc": "2.0"}
    if request:
        m["id"] = id
    m["method"] = method
    if params is not None:
        m["params"] = params
    return m

def objects(value, path=()):
    """Every object inside value, with its path."""
    if isinstance(value, dict):
        yield path, value
        for k, v in value.items():
            yield from objects(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from objects(v, path + (i,))

def at(value, path):
    for p in path:
        value = value[p]
    return value

LENIENT = {("registry/register", "scope")}  # EntryRef has no deny_unknown_fields

for name, request, builtin, base in H2C:
    slug = name.replace("/", "-").replace("$", "dollar")
    tier = "builtin" if builtin else "plugin"
    g = "h2c-" + slug
    add(g, f"{slug}/valid", "host_to_core", tier, env(name, base, request), "accept",
        "a well-formed message of the method table, for a tier that may send it")
    if builtin:
        add(g, f"{slug}/from-plugin-tier", "host_to_core", "plugin", env(name, base, request), "reject",
            "reserved for the builtin tier: `admit_in` refuses it from a plugin-tier host", "not allowed on the plugin tier")
    # unknown field at every object level of the params
    for path, obj in list(objects(base)):
        if path and path[-1] in ("input", "frame", "input_schema"):
            continue  # free-form values
        if any(isinstance(p, str) and p in ("input", "frame", "input_schema") for p in path):
            continue
        m = copy.deepcopy(base)
        at(m, path)["conform_unknown"] = 1
        where = "/".join(map(str, path)) or "params"
        if (name, where) in LENIENT:
            add(g, f"{slug}/unknown-field-{where}", "host_to_core", tier, env(name, m, request), "accept",
                "`EntryRef` is a core-to-host type without `deny_unknown_fields`: an unknown field inside `scope` is ignored")
        else:
            add(g, f"{slug}/unknown-field-{where}", "host_to_core", tier, env(name, m, request), "reject",
                f"host-to-core types use `deny_unknown_fields`: an unknown field in {where} is refused", "unknown field")
    # missing and mistyped fields at the top level of params
    for key, value in base.items():
        if key in OPTIONAL.get(name, []):
            continue
        m = copy.deepcopy(base); del m[key]
        add(g, f"{slug}/missing-{key}", "host_to_core", tier, env(name, m, request), "reject",
            f"`{key}` is a required field", "missing field")
        if key in ("input", "frame"):
            continue
        m = copy.deepcopy(base)
        m[key] = "a string" if not isinstance(value, str) else 12
        add(g, f"{slug}/wrong-type-{key}", "host_to_core", tier, env(name, m, request), "reject",
            f"`{key}` has the wrong JSON type", "invalid type")
    # params not an object
    for label, p in (("array", []), ("null", None)):
        m = env(name, base, request)
        m["params"] = p
        add(g, f"{slug}/params-{label}", "host_to_core", tier, m, "reject",
            "params are always named: anything but an object is refused (`params must be an object`)", "params must be an object")
    # absent params
    m = env(name, None, request)
    if base:
        add(g, f"{slug}/params-absent", "host_to_core", tier, m, "reject",
            "absent params read as `{}`, which lacks the required fields", "missing field")
    else:
        add(g, f"{slug}/params-absent", "host_to_core", tier, m, "accept", "absent params read as `{}`")
    # id rules
    if request:
        add(g, f"{slug}/no-id", "host_to_core", tier, env(name, base, False), "reject",
            "a request must carry an id", "must be a request")
        m = env(name, base, True); m["id"] = None
        add(g, f"{slug}/null-id", "host_to_core", tier, m, "reject",
            "`id: null` reads as no id (Option<u64>), so the request has none", "must be a request")
    else:
        add(g, f"{slug}/with-id", "host_to_core", tier, env(name, base, True), "reject",
            "a notification must not carry an id", "must be a notification")
    m = env(name, base, request); m["result"] = {}
    add(g, f"{slug}/with-result", "host_to_core", tier, m, "reject",
        "a request or notification carries no result or error", "carries no result or error")

g = "h2c-register-check-spec"
def reg(kind, spec):
    return env("registry/register", {"owner": OWNER, "kind": kind, "spec": spec}, True)
S = {"name": "n", "description": "d"}
for kind, spec, verdict, why, contains in [
    ("tool", S, "reject", "check_spec: a tool registration needs `spec.input_schema`", "needs `spec.input_schema`"),
    ("tool", {**S, "input_schema": {"type": "object"}, "argument_hint": "<x>"}, "reject", "check_spec: a tool has no argument hint", "has no `spec.argument_hint`"),
    ("command", {**S, "input_schema": {"type": "object"}}, "reject", "check_spec: a command has no input schema", "has no `spec.input_schema`"),
    ("command", S, "accept", "a command without a hint runs directly", None),
    ("command", {**S, "argument_hint": "<topic>"}, "accept", "a command may have an argument hint", None),
    ("hook", S, "accept", "a hook has neither field", None),
    ("hook", {**S, "input_schema": {}}, "reject", "check_spec: a hook has no input schema", "no input schema or argument hint"),
    ("prompt_section", {**S, "argument_hint": "x"}, "reject", "check_spec: a prompt section has no argument hint", "no input schema or argument hint"),
    ("prompt_template", S, "accept", "a prompt template has neither field", None),
    ("skill_root", S, "accept", "a skill root has neither field", None),
    ("shell_hook", S, "accept", "a shell hook has neither field", None),
    ("mcp_server", {**S, "input_schema": {}}, "reject", "check_spec: an MCP server has no input schema", "no input schema or argument hint"),
    ("widget", S, "reject", "`kind` is one of the RegisterKind variants", "unknown variant"),
]:
    add(g, f"register/{kind}-{verdict}-{len(spec)}", "host_to_core", "plugin", reg(kind, spec), verdict, why, contains)
m = reg("tool", {**S, "input_schema": {"type": "object"}}); m["params"]["scope"] = None
add(g, "register/scope-null", "host_to_core", "plugin", m, "reject",
    "`scope` is deserialized with `present_entry`: an explicit null is not an EntryRef", "invalid type: null")
m = reg("tool", {**S, "input_schema": {"type": "object"}}); m["params"]["scope"] = {"path": "a.ts", "sha256": SHA}
add(g, "register/scope-entry", "host_to_core", "plugin", m, "accept", "a registration scoped to one entry")

g = "h2c-hello"
hello = dict(H2C[0][3])
for rt, verdict in (("node", "accept"), ("deno", "reject"), ("Bun", "reject")):
    m = env("host/hello", {**hello, "runtime": {"name": rt, "version": "1"}}, False)
    add(g, f"hello/runtime-{rt}", "host_to_core", "plugin", m, verdict,
        "`host/hello`'s runtime name is `bun` or `node` (the one rule beyond the types)", None if verdict == "accept" else "unknown runtime")
for tier, verdict, contains in (("builtin", "accept", None), ("core", "reject", "unknown variant")):
    m = env("host/hello", {**hello, "tier": tier}, False)
    add(g, f"hello/tier-{tier}", "host_to_core", "plugin", m, verdict,
        "`tier` is a HostTier (builtin or plugin); whether it equals the launched tier is the supervisor's check, not the parser's", contains)
for v, verdict in ((512, "accept"), (None, "accept"), ("512", "reject"), (-1, "reject")):
    m = env("host/hello", {**hello, "memory_limit_mib": v}, False)
    add(g, f"hello/memory-limit-{json.dumps(v)}", "host_to_core", "plugin", m, verdict,
        "`memory_limit_mib` is an optional u64 (null reads as absent)", None if verdict == "accept" else "invalid")
m = env("host/hello", {**hello, "protocol": {"min": -1, "max": 1}}, False)
add(g, "hello/protocol-negative", "host_to_core", "plugin", m, "reject", "protocol bounds are u32", "invalid value")

g = "h2c-envelope"
R = {"jsonrpc": "2.0", "id": 4, "result": {"status": "ok", "tools": []}}
for id, m, verdict, why, contains in [
    ("response/result", R, "accept", "a response with a result", None),
    ("response/result-null", {"jsonrpc": "2.0", "id": 4, "result": None}, "accept", "`result: null` is a present result (`present`)", None),
    ("response/error", {"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "m"}}, "accept", "a response with an error", None),
    ("response/error-data-null", {"jsonrpc": "2.0", "id": 4, "error": {"code": -32000, "message": "m", "data": None}}, "accept", "`data: null` is present data", None),
    ("response/error-unknown-field", {"jsonrpc": "2.0", "id": 4, "error": {"code": 1, "message": "m", "x": 1}}, "reject", "RpcErrorWire denies unknown fields", "unknown field"),
    ("response/error-code-float", {"jsonrpc": "2.0", "id": 4, "error": {"code": 1.5, "message": "m"}}, "reject", "an error code is an integer", "invalid type"),
    ("response/both", {**R, "error": {"code": 1, "message": "m"}}, "reject", "exactly one of result and error", "exactly one of result or error"),
    ("response/neither", {"jsonrpc": "2.0", "id": 4}, "reject", "exactly one of result and error", "exactly one of result or error"),
    ("response/error-null-no-result", {"jsonrpc": "2.0", "id": 4, "error": None}, "reject", "`error: null` reads as no error, so the response has neither", "exactly one of result or error"),
    ("response/no-id", {"jsonrpc": "2.0", "result": 1}, "reject", "a response needs its id", "missing id"),
    ("response/with-params", {**R, "params": {}}, "reject", "a response has no params", "unexpected params"),
    ("response/id-string", {**R, "id": "4"}, "reject", "ids are u64 on this channel", "invalid type"),
    ("response/id-negative", {**R, "id": -4}, "reject", "ids are u64", "invalid value"),
    ("response/id-float", {**R, "id": 4.0}, "reject", "ids are u64, not floats", "invalid type"),
    ("response/id-max", {**R, "id": 18446744073709551615}, "accept", "the largest u64 id", None),
    ("response/id-over-u64", {**R, "id": 18446744073709551616}, "reject", "ids are u64", "invalid"),
    ("envelope/jsonrpc-1", {**R, "jsonrpc": "1.0"}, "reject", "`jsonrpc` must be \"2.0\"", "jsonrpc must be"),
    ("envelope/jsonrpc-missing", {"id": 4, "result": 1}, "reject", "`jsonrpc` is required", "missing field `jsonrpc`"),
    ("envelope/jsonrpc-number", {**R, "jsonrpc": 2}, "reject", "`jsonrpc` is a string", "invalid type"),
    ("envelope/unknown-field", {**R, "extra": True}, "reject", "the envelope denies unknown fields", "unknown field"),
    ("envelope/not-object", [R], "reject", "a batch or any non-object is not an envelope", "invalid type"),
    ("envelope/method-number", {"jsonrpc": "2.0", "method": 5}, "reject", "`method` is a string", "invalid type"),
    ("method/unknown", {"jsonrpc": "2.0", "method": "host/unknown", "params": {}}, "reject", "a method missing from the table is refused", "unknown host_to_core method"),
    ("method/other-direction", {"jsonrpc": "2.0", "id": 9, "method": "host/ping", "params": {}}, "reject", "host/ping flows core to host only", "unknown host_to_core method"),
    ("method/other-direction-tool-call", {"jsonrpc": "2.0", "id": 9, "method": "tool/call", "params": {}}, "reject", "tool/call flows core to host only", "unknown host_to_core method"),
]:
    add(g, id, "host_to_core", "plugin", m, verdict, why, contains)

# core_to_host: what conform writes as the core
g = "c2h"
LIMITS = {"max_frame": 33554432, "max_inflight": 256, "dispose_deadline_ms": 5000, "activate_deadline_ms": 10000}
C2H = [
    ("host/initialize", True, {"protocol": 1, "limits": LIMITS}),
    ("host/ping", True, {}),
    ("host/shutdown", True, {}),
    ("ext/activate", True, {"owner": OWNER, "plugin_name": "example", "entry": {"path": "/x/index.ts", "sha256": SHA}, "config": {}}),
    ("ext/deactivate", True, {"owner": OWNER}),
    ("tool/call", True, {"handle": 1, "call_id": "c1", "input": {}, "deadline_ms": 1000}),
    ("command/run", True, {"handle": 2, "command_id": "r1", "raw_input": "", "deadline_ms": 1000}),
    ("hook/evaluate", True, {"handle": 3, "event": "pre_tool", "deadline_ms": 1000, "payload": {"name": "t", "call_id": "c", "input": {}, "mode": "ask", "workspace": "/w", "model": "m"}}),
    ("$/cancel", False, {"id": 1}),
]
for name, request, base in C2H:
    slug = name.replace("/", "-").replace("$", "dollar")
    add(g, f"{slug}/valid", "core_to_host", "plugin", env(name, base, request), "accept", "what the core sends")
    add(g, f"{slug}/params-array", "core_to_host", "plugin", {**env(name, base, request), "params": []}, "reject", "params must be an object", "params must be an object")
    if request:
        add(g, f"{slug}/no-id", "core_to_host", "plugin", env(name, base, False), "reject", "a request carries an id", "must be a request")
    else:
        add(g, f"{slug}/with-id", "core_to_host", "plugin", env(name, base, True), "reject", "a notification has no id", "must be a notification")
for name in ("mcp/open", "mcp/request", "mcp/close", "harness/run"):
    slug = name.replace("/", "-")
    add(g, f"{slug}/to-plugin-tier", "core_to_host", "plugin", env(name, {}, True), "reject",
        "reserved for the builtin tier: a plugin-tier host is never sent it", "not allowed on the plugin tier")
m = env("hook/evaluate", dict(C2H[7][2]), True); m["params"]["payload"] = {**m["params"]["payload"], "ticket": "t"}
add(g, "hook-evaluate/payload-unknown-field", "core_to_host", "plugin", m, "reject",
    "HookCallPayload denies unknown fields: no ticket crosses this boundary", "unknown field")
add(g, "method/host-direction", "core_to_host", "plugin", env("host/hello", {}, False), "reject",
    "host/hello flows host to core only", "unknown core_to_host method")

# frames
g = "frames"
def frame(payload, length=None):
    return b"CWX1" + struct.pack("<I", len(payload) if length is None else length) + payload
READY = json.dumps({"jsonrpc": "2.0", "method": "host/ready", "params": {}}, separators=(",", ":")).encode()
for id, data, verdict, why, contains in [
    ("valid", frame(READY), "accept", "magic, u32 LE length, JSON", None),
    ("two-in-one-write", frame(READY) + frame(READY), "accept", "frames are read one after another whatever the writes", None),
    ("bad-magic", b"CWX2" + frame(READY)[4:], "reject", "bad magic ends the host", "bad frame magic"),
    ("ndjson", READY + b"\n", "reject", "a newline-delimited message is not a frame: its first four bytes are no magic", "bad frame magic"),
    ("length-u32-max", b"CWX1" + struct.pack("<I", 0xFFFFFFFF), "reject", "a length over MAX_FRAME is refused before allocation", "exceeds MAX_FRAME"),
    ("length-max-plus-one", b"CWX1" + struct.pack("<I", 32 * 1024 * 1024 + 1), "reject", "MAX_FRAME + 1 is over the limit", "exceeds MAX_FRAME"),
    ("length-short", frame(READY, len(READY) - 3), "reject", "a length that lies short cuts the JSON", "not JSON"),
    ("length-long", frame(READY, len(READY) + 10), "reject", "a length that lies long leaves the frame unfinished at EOF", "end of stream"),
    ("truncated-header", b"CWX1\x05\x00", "reject", "EOF inside a header", "end of stream"),
    ("payload-not-json", frame(b"hello"), "reject", "the payload is JSON", "not JSON"),
    ("payload-not-utf8", frame(b'{"a":"\xff"}'), "reject", "the payload is UTF-8 JSON", "not JSON"),
    ("payload-empty", frame(b""), "reject", "an empty payload is not JSON", "not JSON"),
    ("bom", frame(b"\xef\xbb\xbf" + READY), "reject", "serde_json does not skip a byte-order mark", "not JSON"),
    ("crlf-inside", frame(READY.replace(b",", b",\r\n")), "accept", "whitespace between JSON tokens is JSON", None),
    ("empty-stream", b"", "accept", "a clean EOF at a frame boundary ends the stream without error", None),
]:
    add(g, f"frame/{id}", "host_to_core", "plugin", data, verdict, why, contains)

os.makedirs(os.path.join(HERE, "messages"), exist_ok=True)
total = 0
for group, es in entries.items():
    with open(os.path.join(HERE, "messages", group + ".json"), "w") as f:
        f.write(json.dumps({"protocol": "cwx", "entries": es}, indent=1, ensure_ascii=False) + "\n")
    total += len(es)
print(total, "entries in", len(entries), "files")
