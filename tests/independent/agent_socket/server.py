#!/usr/bin/env python3
"""An independent reference server for Mistral Vibe's agent socket, protocol
version 2, written from the protocol's sources only:

- agent_socket.py          (its module docstring is the protocol; its code is
                            Vibe's client and shows how a reply is validated)
- sandbox.py               (the SandboxAdapter semantics behind sandbox/*)
- client_provided_tools.py (the rules for the tools a client declares)

It serves both halves: a sandbox (a workspace directory of this host and this
interpreter as its python) and a few tools of its own.

    python3 server.py --listen SOCKET_PATH [--workspace DIR] [--deviation NAME]
                      [--max-command-seconds S] [--tool-timeout-seconds S]
                      [--no-sandbox] [--no-tools]

``--deviation NAME`` breaks exactly one sentence of the sources (see
deviations.json); without it the server is the reference. Python 3.11 standard
library only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import errno
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile

PROTOCOL_VERSION = 2
# "The JSON-RPC error code of a request that outlived its timeout."
TIMEOUT_ERROR_CODE = -32001
# "The JSON-RPC error code with which the server aborts the run."
ABORT_ERROR_CODE = -32002
# JSON-RPC 2.0, section 5.1.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# JSON-RPC 2.0 reserves -32000..-32099 for implementation-defined server errors.
SERVER_ERROR = -32000

# Bounds of this server (every read and wait is bounded).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
REQUEST_READ_SECONDS = 30.0
REPLY_WRITE_SECONDS = 60.0
# "One reply line carries a whole tool result" and Vibe reads at most
# REPLY_LIMIT_BYTES = 64 MiB of it: both caps keep a reply line below that
# even after JSON escaping (at most 6 bytes per captured byte).
OUTPUT_CAP_BYTES = 4 * 1024 * 1024
READ_FILE_CAP_BYTES = 40 * 1024 * 1024
DRAIN_GRACE_SECONDS = 1.0
KILL_WAIT_SECONDS = 5.0
DEFAULT_MAX_COMMAND_SECONDS = 600.0
DEFAULT_TOOL_TIMEOUT_SECONDS = 30.0
MAX_SLEEP_SECONDS = 3600.0

# name -> one line; deviations.json carries the sentence each one breaks.
DEVIATIONS = {
    # handshake
    "protocol-version-1": "agent/initialize answers protocolVersion 1",
    "protocol-version-echo": "agent/initialize echoes the version asked for instead of 2",
    "protocol-version-missing": "agent/initialize omits protocolVersion",
    "workspace-without-python": "workspace is given but python is null",
    "workspace-relative": "workspace is a relative path",
    "workspace-nonexistent": "workspace names a directory that does not exist",
    "python-not-runnable": "python names an interpreter that does not exist",
    "reserved-namespace-vibe": "a tool is declared in the reserved 'vibe' namespace",
    "reserved-namespace-ui": "a tool is declared in the reserved 'ui' namespace",
    "duplicate-tool": "demo.add is declared twice",
    "duplicate-via-default": "client.echo is declared twice, once without a namespace",
    "model-access-invalid": "a tool's modelAccess is 'direct_and_programmatic'",
    "input-schema-not-object": "a tool's inputSchema is the JSON Schema `true`",
    "output-schema-not-object": "a tool's outputSchema is a string",
    "description-null": "a tool's description is null",
    "tool-name-missing": "a tool declaration has no name",
    "tools-not-list": "tools is an object keyed by name, not a list",
    "tool-timeout-zero": "toolTimeoutSeconds is 0",
    "instructions-not-string": "instructions is a list of strings",
    # framing and JSON-RPC
    "reply-no-newline": "reply lines lack the trailing newline",
    "reply-indented": "replies are pretty-printed over several lines",
    "reply-spaces": "replies are not compact (', ' and ': ' separators)",
    "reply-crlf": "reply lines end with CRLF",
    "reply-extra-line": "a second line follows the reply line",
    "request-needs-eof": "the request is read to end of stream, not to its newline",
    "close-without-reply": "an unknown method closes the connection without a reply",
    "require-initialize-per-connection": "requests fail unless agent/initialize came first on the same connection",
    "serial": "requests are answered one at a time",
    "die-on-malformed": "the server exits on a line that is not JSON",
    "parse-error-with-id": "a parse error reply carries an id guessed from the bad line",
    "parse-error-code": "invalid JSON is answered with -32600",
    "invalid-request-code": "an invalid request object is answered with -32700",
    "method-not-found-code": "an unknown method is answered with -32600",
    "invalid-params-code": "invalid params are answered with -32603",
    "error-id-null": "error replies carry a null id even when the request had one",
    "error-null-on-success": "success replies also carry \"error\": null",
    "id-as-string": "a numeric request id is echoed as a string",
    "jsonrpc-missing": "replies omit \"jsonrpc\": \"2.0\"",
    "error-message-missing": "error objects have no message",
    "abort-code-for-errors": "invalid params and unknown methods are answered with -32002",
    "snake-case-fields": "sandbox/execute results use snake_case exit_code",
    # sandbox/execute
    "nonzero-exit-error": "a non-zero exit is answered as a JSON-RPC error",
    "stderr-into-stdout": "stderr is merged into stdout",
    "exit-code-string": "exitCode is a string",
    "cwd-ignored": "commands run in the workspace whatever cwd says",
    "bash-not-sh": "commands run with bash instead of POSIX sh",
    "timeout-null-refused": "timeout null is refused with -32602",
    "timeout-not-enforced": "the command's timeout is not enforced (only the server's own limit)",
    "timeout-wrong-code": "a command that outlives its timeout is answered with -32000",
    "timeout-as-result": "a command that outlives its timeout is answered as a result, exitCode 124",
    "timeout-leaves-running": "-32001 is answered but the command is left running",
    "timeout-kills-only-shell": "on timeout only the shell is killed, not its process group",
    "timeout-data-missing": "stopped at the server's own shorter limit, the error does not say so",
    "timeout-data-longer": "the error names the server's own limit though the shorter timeout applied",
    "timeout-data-string": "data.timeoutSeconds is a string",
    # sandbox/readFile
    "readfile-over-max": "readFile returns more than maxBytes",
    "readfile-directory-listing": "readFile of a directory returns its listing",
    "readfile-nonregular": "readFile reads non-regular files (devices, FIFOs)",
    "readfile-base64-newlines": "contentBase64 is wrapped with newlines (MIME style)",
    "readfile-urlsafe": "contentBase64 uses the URL-safe alphabet",
    "readfile-empty-null": "an existing empty file reads as null",
    "readfile-missing-error": "a missing file is answered with a JSON-RPC error",
    "readfile-missing-empty": "a missing file reads as empty content",
    # tools
    "annotations-not-object": "CallbackResult annotations is a list of pairs",
    "tool-error-code-int": "CallbackResult error.code is an integer",
    "tool-error-no-message": "CallbackResult error has no message",
    "tool-error-string": "CallbackResult error is a bare string",
    "result-unwrapped": "tools/call answers the tool's output itself, not a CallbackResult",
    "tool-name-bare": "tools/call expects the bare tool name, not namespace.name",
    "caller-null-refused": "tools/call refuses caller null",
    "tool-timeout-wrong-code": "a tool call that outlives toolTimeoutSeconds is answered with -32000",
    # socket
    "socket-mode-0666": "the socket is created with mode 0666",
    "socket-dir-0755": "a missing socket directory is created with mode 0755",
}

# Round 3: listed in deviations-round3.json (kept apart so that deviations.json and
# DEVIATIONS above stay exactly as they were).
DEVIATIONS_ROUND3 = {
    "id-zero-null": "a success reply to a request with id 0 carries id null",
    "notification-answered": "a request without id (a notification) gets a reply",
    "batch-empty-array": "a batch of notifications only is answered with []",
    "timeout-int-refused": "an integer timeout (e.g. 5) is refused with -32602",
    "command-nonascii-dropped": "non-ASCII characters are dropped from the command",
    "readfile-maxbytes-zero-null": "readFile with maxBytes 0 of an existing file answers null",
    "readfile-tilde-literal": "readFile does not expand a leading ~",
    "tool-input-null-refused": "tools/call with input null is refused with -32602",
}

DEVIATION: str | None = None


def dev(name: str) -> bool:
    """True when this run breaks the sentence behind deviation ``name``."""
    assert name in DEVIATIONS or name in DEVIATIONS_ROUND3, name
    return DEVIATION == name


class Config:
    workspace: str | None = None
    python: str | None = None
    serve_sandbox = True
    serve_tools = True
    max_command_seconds = DEFAULT_MAX_COMMAND_SECONDS
    tool_timeout_seconds = DEFAULT_TOOL_TIMEOUT_SECONDS


CONFIG = Config()
# Process groups of the commands this server started (pgid = the shell's pid).
GROUPS: set[int] = set()
SERIAL_LOCK: asyncio.Lock | None = None


def log(message: str) -> None:
    try:
        sys.stderr.write(f"agent-socket-server: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


_NO_DATA = object()


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: object = _NO_DATA) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid_params(message: str) -> RpcError:
    # JSON-RPC 2.0: "-32602 Invalid params: Invalid method parameter(s)."
    code = INVALID_PARAMS
    if dev("invalid-params-code"):
        code = INTERNAL_ERROR
    return RpcError(code, f"Invalid params: {message}")


# --------------------------------------------------------------------------
# Replies and framing


def make_error(rid: object, code: int, message: str, data: object = _NO_DATA) -> dict:
    # "The JSON-RPC error code -32002, on the reply to any request, aborts the
    # run" -- so this server never answers an ordinary error with it.
    if dev("abort-code-for-errors") and code in (INVALID_PARAMS, METHOD_NOT_FOUND):
        code = ABORT_ERROR_CODE
    # class _ErrorBody: "code: int" / "message: str" / "data: JsonValue = None"
    error: dict = {"code": code, "message": message}
    if dev("error-message-missing"):
        del error["message"]
    if data is not _NO_DATA:
        error["data"] = data
    # JSON-RPC 2.0: the error reply's id "MUST be the same as the value of the
    # id member in the Request Object"; Null only when it could not be told.
    if dev("error-id-null"):
        rid = None
    return finish_reply({"jsonrpc": "2.0", "id": rid, "error": error})


def make_result(rid: object, result: object) -> dict:
    # JSON-RPC 2.0: the id "MUST be the same as the value of the id member in
    # the Request Object" -- 0 included.
    if dev("id-zero-null") and rid == 0 and not isinstance(rid, bool):
        rid = None
    reply = {"jsonrpc": "2.0", "id": rid, "result": result}
    # JSON-RPC 2.0: "Either the result member or error member MUST be included,
    # but both members MUST NOT be included."
    if dev("error-null-on-success"):
        reply["error"] = None
    return finish_reply(reply)


def finish_reply(reply: dict) -> dict:
    # class _Response: "jsonrpc: Literal["2.0"]"
    if dev("jsonrpc-missing"):
        del reply["jsonrpc"]
    # "if response.id != request_id or response.result is None:" -- the id is
    # echoed as it came, same type and value.
    if dev("id-as-string") and isinstance(reply.get("id"), int):
        reply["id"] = str(reply["id"])
    return reply


def frame(reply: object) -> bytes:
    # "Lines are JSON-RPC 2.0 messages with camelCase fields, framed like the
    # app server's: compact JSON followed by ``\\n``."
    if dev("reply-indented"):
        text = json.dumps(reply, indent=2, allow_nan=False)
    elif dev("reply-spaces"):
        text = json.dumps(reply, allow_nan=False)
    else:
        text = json.dumps(reply, separators=(",", ":"), allow_nan=False)
    # "if not reply.endswith(b"\n"):" -- Vibe takes a reply without its newline
    # for a connection closed before replying.
    if dev("reply-no-newline"):
        return text.encode()
    if dev("reply-crlf"):
        return text.encode() + b"\r\n"
    return text.encode() + b"\n"


# --------------------------------------------------------------------------
# Parameter helpers


def is_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def req_str(params: dict, key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str):
        raise invalid_params(f"{key} must be a string")
    return value


def opt_str(params: dict, key: str) -> str | None:
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise invalid_params(f"{key} must be a string or null")
    return value


def sandbox_path(path: str) -> str:
    """A sandbox path on this host. "Paths are sandbox paths." A relative path
    is taken relative to the workspace; a path starting with ``~`` is expanded
    against this sandbox's own home ("kept as written, for the sandbox to
    expand against its own home")."""
    if path.startswith("~"):
        path = os.path.expanduser(path)
    if not os.path.isabs(path):
        return os.path.join(CONFIG.workspace or "/", path)
    return path


# --------------------------------------------------------------------------
# agent/initialize

TOOLS: list[dict] = [
    {
        "namespace": "client",
        "name": "echo",
        "description": "Returns its input's value unchanged.",
        "inputSchema": {
            "type": "object",
            "properties": {"value": {"description": "Any JSON value."}},
            "required": ["value"],
        },
        "outputSchema": None,
        "modelAccess": "direct",
    },
    {
        "namespace": "demo",
        "name": "add",
        "description": "Adds two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sum": {"type": "number"}},
            "required": ["sum"],
        },
        "modelAccess": "both",
    },
    {
        "namespace": "demo",
        "name": "fail",
        "description": "Always answers with a tool error.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": None,
        "modelAccess": "programmatic",
    },
    {
        "namespace": "demo",
        "name": "sleep",
        "description": "Sleeps for the given number of seconds.",
        "inputSchema": {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}},
            "required": ["seconds"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"slept": {"type": "number"}},
        },
        "modelAccess": "programmatic",
    },
    {
        "namespace": "demo",
        "name": "whoami",
        "description": "Reports which session called it.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": None,
        "modelAccess": "direct",
    },
]

INSTRUCTIONS = (
    "This session runs in a sandbox served by an independent agent-socket "
    "reference server. Keep your changes inside the workspace."
)


def declared_tools() -> list[dict] | dict:
    tools = [dict(tool) for tool in TOOLS]
    # "A namespace cannot be Vibe's own nor the name of one of the session's
    # MCP servers, and a ``namespace.name`` is declared once; otherwise the run
    # cannot start, as a usage error."
    # RESERVED_NAMESPACES = frozenset({"vibe", "ui"})
    if dev("reserved-namespace-vibe"):
        tools[1]["namespace"] = "vibe"
    if dev("reserved-namespace-ui"):
        tools[1]["namespace"] = "ui"
    if dev("duplicate-tool"):
        tools.append(dict(tools[1]))
    # "``namespace`` defaults to ``client``" -- so {"name": "echo"} is
    # client.echo, already declared.
    if dev("duplicate-via-default"):
        twin = dict(tools[0])
        del twin["namespace"]
        tools.append(twin)
    # type ClientToolModelAccess = Literal["programmatic", "direct", "both"]
    if dev("model-access-invalid"):
        tools[1]["modelAccess"] = "direct_and_programmatic"
    # input_schema: dict[str, JsonValue] = Field(default_factory=dict)
    if dev("input-schema-not-object"):
        tools[0]["inputSchema"] = True
    # output_schema: dict[str, JsonValue] | None = None
    if dev("output-schema-not-object"):
        tools[1]["outputSchema"] = "object"
    # description: str = ""
    if dev("description-null"):
        tools[2]["description"] = None
    # A ToolDefinition is {"namespace": str, "name": str, ...}
    if dev("tool-name-missing"):
        del tools[4]["name"]
    # tools: list[_Tool] = Field(default_factory=list)
    if dev("tools-not-list"):
        return {f"{t['namespace']}.{t['name']}": t for t in tools}
    return tools


async def method_initialize(params: dict) -> dict:
    # ``{"protocolVersion": 2, "vibeVersion": str}``
    asked = params.get("protocolVersion")
    if not isinstance(asked, int) or isinstance(asked, bool):
        raise invalid_params("protocolVersion must be an integer")
    req_str(params, "vibeVersion")
    # "Vibe speaks version 2 only." This server speaks 2 only too: it answers
    # 2 whatever it is asked, and the client refuses a version it cannot speak.
    version = PROTOCOL_VERSION
    if dev("protocol-version-1"):
        version = 1
    if dev("protocol-version-echo"):
        version = asked
    workspace, python = None, None
    if CONFIG.serve_sandbox:
        workspace, python = CONFIG.workspace, CONFIG.python
        # "``workspace`` and ``python`` come together"
        if dev("workspace-without-python"):
            python = None
        # if not PurePosixPath(reply.workspace).is_absolute():
        if dev("workspace-relative"):
            workspace = os.path.relpath(workspace, os.getcwd())
        # "``workspace`` is the working directory a Session starts in, and
        # ``python`` is the interpreter that runs the tool helper."
        if dev("workspace-nonexistent"):
            workspace = workspace.rstrip("/") + "-missing"
        if dev("python-not-runnable"):
            python = os.path.join(os.path.dirname(python), "python-missing")
    tools: object = declared_tools() if CONFIG.serve_tools else []
    # "``toolTimeoutSeconds``, positive, is how long a ``tools/call`` may take"
    tool_timeout: object = (
        float(CONFIG.tool_timeout_seconds) if CONFIG.serve_tools else None
    )
    if dev("tool-timeout-zero"):
        tool_timeout = 0
    # instructions: str | None = None
    instructions: object = INSTRUCTIONS
    if dev("instructions-not-string"):
        instructions = [INSTRUCTIONS]
    result = {
        "protocolVersion": version,
        "workspace": workspace,
        "python": python,
        "tools": tools,
        "toolTimeoutSeconds": tool_timeout,
        "instructions": instructions,
    }
    # protocol_version: int (required: the reply cannot do without it)
    if dev("protocol-version-missing"):
        del result["protocolVersion"]
    return result


# --------------------------------------------------------------------------
# sandbox/execute


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all_groups() -> None:
    for pgid in list(GROUPS):
        kill_group(pgid)


def prune_groups() -> None:
    for pgid in list(GROUPS):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            GROUPS.discard(pgid)
        except PermissionError:
            pass


async def read_capped(stream: asyncio.StreamReader, sink: bytearray) -> None:
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        room = OUTPUT_CAP_BYTES - len(sink)
        if room > 0:
            sink += chunk[:room]


async def drain(readers: list[asyncio.Task], grace: float) -> None:
    """Waits a little for the output pipes to close: a background process the
    command left behind may hold them open."""
    if not readers:
        return
    _, pending = await asyncio.wait(readers, timeout=grace)
    for task in pending:
        task.cancel()
    for task in readers:
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


async def wait_exit(proc) -> int:
    """The shell's exit. Not ``proc.wait()``: in Python 3.11 that also waits for
    the output pipes to close, which a background job the command started may
    hold open long after the shell exited."""
    delay = 0.002
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return proc.returncode


def exec_result(exit_code: int, stdout: str, stderr: str) -> dict:
    # "``{"exitCode": int, "stdout": str, "stderr": str}``; a non-zero exit is
    # a result, not an error."  (sandbox.py: "A non-zero exit is a result, not
    # an error.")
    if dev("nonzero-exit-error") and exit_code != 0:
        raise RpcError(
            SERVER_ERROR,
            f"The command exited with code {exit_code}",
            {"exitCode": exit_code, "stdout": stdout, "stderr": stderr},
        )
    # class _ExecuteResult: "exit_code: int"
    code: object = exit_code
    if dev("exit-code-string"):
        code = str(exit_code)
    # "Lines are JSON-RPC 2.0 messages with camelCase fields"
    if dev("snake-case-fields"):
        return {"exit_code": code, "stdout": stdout, "stderr": stderr}
    return {"exitCode": code, "stdout": stdout, "stderr": stderr}


def decode(data: bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


async def finish_later(proc, waiter: asyncio.Task, readers: list[asyncio.Task]) -> None:
    """Reaps a command left running (deviation timeout-leaves-running), still
    bounded by the server's own limit."""
    done, _ = await asyncio.wait({waiter}, timeout=CONFIG.max_command_seconds)
    if waiter not in done:
        kill_group(proc.pid)
        await asyncio.wait({waiter}, timeout=KILL_WAIT_SECONDS)
    waiter.cancel()
    await drain(readers, DRAIN_GRACE_SECONDS)


async def method_execute(params: dict) -> dict:
    # ``{"command": str, "cwd": str, "timeout": float | null}``
    command = req_str(params, "command")
    cwd = req_str(params, "cwd")
    if "\x00" in command:
        raise invalid_params("command cannot hold a NUL character")
    # "``execute`` runs ``command``" -- as written, non-ASCII text included.
    if dev("command-nonascii-dropped"):
        command = command.encode("ascii", errors="ignore").decode("ascii")
    timeout = params.get("timeout")
    # class _ExecuteParams: "timeout: float | None" -- null is no timeout of
    # the caller's; the server's own limit still applies.
    if timeout is None:
        if dev("timeout-null-refused"):
            raise invalid_params("timeout must be a number")
    elif not is_number(timeout) or timeout <= 0:
        raise invalid_params("timeout must be a positive number or null")
    # ``"timeout": float | null`` -- a JSON number without a fraction is a number too.
    elif dev("timeout-int-refused") and isinstance(timeout, int):
        raise invalid_params("timeout must be a float")
    return await run_command(command, cwd, None if timeout is None else float(timeout))


async def run_command(command: str, cwd: str, timeout: float | None) -> dict:
    own = CONFIG.max_command_seconds
    # "For ``sandbox/execute``, that is the command's own timeout" -- unless a
    # shorter "limit of the sandbox's own" applies.
    if timeout is None or own < timeout:
        limit, own_applied = own, True
    else:
        limit, own_applied = timeout, False
    if dev("timeout-not-enforced"):
        limit, own_applied = own, True
    # "``execute`` runs ``command``, a POSIX ``sh`` command line whose arguments
    # are quoted with :func:`shlex.join`, in the sandbox directory ``cwd`` and
    # with the sandbox's own environment: nothing from the host's environment
    # is passed in."
    run_cwd = sandbox_path(cwd)
    if dev("cwd-ignored"):
        run_cwd = CONFIG.workspace or "/"
    argv = ["/bin/sh", "-c", command]
    if dev("bash-not-sh"):
        argv = ["/bin/bash", "-c", command]
    # A missing cwd is the command's failure, as a shell's failed cd: a
    # result the model reads, not a failed sandbox.
    if not os.path.isdir(run_cwd):
        return exec_result(2, "", f"sh: cd: {cwd}: No such file or directory\n")
    env = dict(os.environ)
    env["PWD"] = run_cwd
    env.pop("OLDPWD", None)
    stderr_target = (
        asyncio.subprocess.STDOUT if dev("stderr-into-stdout") else asyncio.subprocess.PIPE
    )
    prune_groups()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr_target,
            cwd=run_cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        if not os.path.isdir(run_cwd) or not os.access(run_cwd, os.X_OK):
            return exec_result(2, "", f"sh: cd: {cwd}: {e.strerror}\n")
        # "Any other error means the sandbox failed"
        raise RpcError(SERVER_ERROR, f"The sandbox cannot start {argv[0]}: {e}")
    GROUPS.add(proc.pid)
    out, err = bytearray(), bytearray()
    readers = [asyncio.create_task(read_capped(proc.stdout, out))]
    if proc.stderr is not None:
        readers.append(asyncio.create_task(read_capped(proc.stderr, err)))
    waiter = asyncio.create_task(wait_exit(proc))
    done, _ = await asyncio.wait({waiter}, timeout=limit)
    if waiter in done:
        await drain(readers, DRAIN_GRACE_SECONDS)
        code = proc.returncode
        if code < 0:  # killed by a signal: report it as a shell would
            code = 128 - code
        return exec_result(code, decode(out), decode(err))
    # The command outlived its limit. SandboxCommandTimeoutError: "The sandbox
    # stopped a command that outlived its time limit." -- the whole process
    # group, so the children the command started stop too.
    if dev("timeout-leaves-running"):
        asyncio.create_task(finish_later(proc, waiter, readers))
    else:
        if dev("timeout-kills-only-shell"):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        else:
            kill_group(proc.pid)
        await asyncio.wait({waiter}, timeout=KILL_WAIT_SECONDS)
        waiter.cancel()  # a process that cannot be killed is not waited for
        await drain(readers, DRAIN_GRACE_SECONDS)
    # "A request that outlives its timeout is answered with the JSON-RPC error
    # code -32001."
    if dev("timeout-as-result"):
        return exec_result(124, decode(out), decode(err))
    code = TIMEOUT_ERROR_CODE
    if dev("timeout-wrong-code"):
        code = SERVER_ERROR
    # "A server that stopped the command sooner than ``timeout``, at a limit
    # of its own, says so in the error's optional ``data``:
    # ``{"timeoutSeconds": float}``" -- this server always says which limit it
    # applied, the command's own included.
    # sandbox.py: "``timeout`` is the limit, in seconds, that the sandbox
    # applied, when it said: it may be shorter than the one the command was
    # run with."
    named = limit
    if dev("timeout-data-longer"):
        named = max(limit, own)
    data: object = {"timeoutSeconds": float(named)}
    # case {"timeoutSeconds": int() | float() as seconds} if (...)
    if dev("timeout-data-string"):
        data = {"timeoutSeconds": f"{named:g}"}
    if dev("timeout-data-missing") and own_applied:
        data = _NO_DATA
    raise RpcError(code, f"The command timed out after {limit:g}s", data)


# --------------------------------------------------------------------------
# sandbox/readFile


def read_file_sync(path: str, max_bytes: int) -> bytes | None:
    """sandbox.py: "``read_file`` returns at most ``max_bytes`` of a regular
    file, or None when there is no such file." -- anything that is not a
    regular file (a directory, a device, a FIFO, a socket) is no such file."""
    if "\x00" in path:  # no file has such a name
        return None
    real = sandbox_path(path)
    missing = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG,
               errno.EACCES, errno.EPERM)
    try:
        st = os.stat(real)
    except OSError as e:
        if e.errno in missing:
            return None
        raise
    if stat.S_ISDIR(st.st_mode):
        if dev("readfile-directory-listing"):
            listing = "\n".join(sorted(os.listdir(real))) + "\n"
            return listing.encode()[:max_bytes]
        return None
    if not stat.S_ISREG(st.st_mode) and not dev("readfile-nonregular"):
        return None
    # O_NONBLOCK: opening a FIFO never blocks; it has no effect on a regular
    # file. The type is checked again on the open descriptor.
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in missing or e.errno in (errno.ENXIO, errno.EISDIR):
            return None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) and not dev("readfile-nonregular"):
            return None
        want = min(max_bytes, READ_FILE_CAP_BYTES)
        if dev("readfile-over-max"):
            want = READ_FILE_CAP_BYTES
        chunks, got = [], 0
        while got < want:
            try:
                chunk = os.read(fd, min(1024 * 1024, want - got))
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


async def method_read_file(params: dict) -> dict:
    # ``{"path": str, "maxBytes": int}``
    path = req_str(params, "path")
    max_bytes = params.get("maxBytes")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        raise invalid_params("maxBytes must be a non-negative integer")
    # "A path starting with ``~`` is kept as written, for the sandbox to expand
    # against its own home."
    if dev("readfile-tilde-literal") and path.startswith("~"):
        path = os.path.join(CONFIG.workspace or "/", path)
    try:
        content = await asyncio.to_thread(read_file_sync, path, max_bytes)
    except OSError as e:
        raise RpcError(SERVER_ERROR, f"The sandbox cannot read {path}: {e}")
    # "``{"contentBase64": str | null}``; null when there is no such file."
    if content is None:
        if dev("readfile-missing-error"):
            raise RpcError(SERVER_ERROR, f"No such file: {path}")
        if dev("readfile-missing-empty"):
            return {"contentBase64": ""}
        return {"contentBase64": None}
    if dev("readfile-empty-null") and content == b"":
        return {"contentBase64": None}
    # "null when there is no such file" -- maxBytes 0 of an existing file is "".
    if dev("readfile-maxbytes-zero-null") and max_bytes == 0:
        return {"contentBase64": None}
    # base64.b64decode(reply.content_base64, validate=True): the standard
    # alphabet with padding, nothing else in the string.
    if dev("readfile-base64-newlines"):
        encoded = base64.encodebytes(content).decode("ascii")
    elif dev("readfile-urlsafe"):
        encoded = base64.urlsafe_b64encode(content).decode("ascii")
    else:
        encoded = base64.b64encode(content).decode("ascii")
    return {"contentBase64": encoded}


# --------------------------------------------------------------------------
# tools/call


def callback_result(output: object = None, annotations: dict | None = None,
                    error: dict | None = None) -> dict:
    # a ``CallbackResult``: ``{"output": JSON, "annotations": object, "error":
    # {"message": str, "code": str | null, "details": JSON} | null}``
    notes: object = dict(annotations or {})
    # annotations: dict[str, JsonValue] = Field(default_factory=dict)
    if dev("annotations-not-object"):
        notes = [[key, value] for key, value in (annotations or {}).items()]
    return {"output": output, "annotations": notes, "error": error}


def tool_error(message: str, code: str | None, details: object = None) -> dict:
    error: object = {"message": message, "code": code, "details": details}
    # class _ToolError: "code: str | None = None"
    if dev("tool-error-code-int"):
        error["code"] = 1
    # "error": {"message": str, ...}
    if dev("tool-error-no-message"):
        del error["message"]
    # class _ToolCallResult: "error: _ToolError | None = None"
    if dev("tool-error-string"):
        error = message
    return callback_result(output=None, error=error)


async def tool_echo(value: object, call: dict) -> dict:
    if not isinstance(value, dict) or "value" not in value:
        return tool_error("echo needs {\"value\": ...}", "invalid_input")
    return callback_result(output=value["value"])


async def tool_add(value: object, call: dict) -> dict:
    if not isinstance(value, dict) or not all(is_number(value.get(k)) for k in ("a", "b")):
        return tool_error("add needs numbers a and b", "invalid_input", {"input": value})
    total = value["a"] + value["b"]
    if not is_number(total):
        return tool_error("the sum is not a finite number", "invalid_input")
    return callback_result(output={"sum": total}, annotations={"demo/operands": 2})


async def tool_fail(value: object, call: dict) -> dict:
    return tool_error("demo.fail always fails", "demo_failure", {"input": value})


async def tool_sleep(value: object, call: dict) -> dict:
    seconds = value.get("seconds") if isinstance(value, dict) else None
    if not is_number(seconds) or not 0 <= seconds <= MAX_SLEEP_SECONDS:
        return tool_error(
            f"sleep needs seconds between 0 and {MAX_SLEEP_SECONDS:g}", "invalid_input"
        )
    await asyncio.sleep(seconds)
    return callback_result(output={"slept": seconds})


async def tool_whoami(value: object, call: dict) -> dict:
    # "The run's own session is the root, with no parent, name or agent; a
    # subagent names its parent, its own name and the agent it runs as.
    # ``caller`` is null when Vibe could not tell."
    caller = call["caller"]
    if caller is None:
        kind = "unknown"
    elif caller["parentSessionId"] is None:
        kind = "root"
    else:
        kind = "subagent"
    return callback_result(output={
        "caller": caller,
        "kind": kind,
        "callbackId": call["callbackId"],
        "toolCallId": call["toolCallId"],
    })


TOOL_IMPLS = {
    "client.echo": tool_echo,
    "demo.add": tool_add,
    "demo.fail": tool_fail,
    "demo.sleep": tool_sleep,
    "demo.whoami": tool_whoami,
}


def parse_caller(params: dict) -> dict | None:
    # ``Caller`` is ``{"sessionId": str, "rootSessionId": str,
    # "parentSessionId": str | null, "name": str | null, "agentType": str |
    # null}``.
    caller = params.get("caller")
    if caller is None:
        # "``caller`` is null when Vibe could not tell."
        if dev("caller-null-refused"):
            raise invalid_params("caller is required")
        return None
    if not isinstance(caller, dict):
        raise invalid_params("caller must be an object or null")
    return {
        "sessionId": req_str(caller, "sessionId"),
        "rootSessionId": req_str(caller, "rootSessionId"),
        "parentSessionId": opt_str(caller, "parentSessionId"),
        "name": opt_str(caller, "name"),
        "agentType": opt_str(caller, "agentType"),
    }


async def method_tools_call(params: dict) -> object:
    # ``{"callbackId": str, "name": str, "input": JSON, "toolCallId": str,
    # "caller": Caller | null}``
    callback_id = req_str(params, "callbackId")
    name = req_str(params, "name")
    if "input" not in params:
        raise invalid_params("input is required")
    value = params["input"]
    # ``"input": JSON`` -- null is a JSON value.
    if dev("tool-input-null-refused") and value is None:
        raise invalid_params("input is required")
    tool_call_id = req_str(params, "toolCallId")
    caller = parse_caller(params)
    # "``name`` is ``namespace.name``"
    impl = TOOL_IMPLS.get(name)
    if dev("tool-name-bare"):
        impl = {key.split(".", 1)[1]: f for key, f in TOOL_IMPLS.items()}.get(name)
    if impl is None:
        raise invalid_params(f"no tool named {name!r}")
    call = {"callbackId": callback_id, "toolCallId": tool_call_id, "caller": caller}
    limit = CONFIG.tool_timeout_seconds
    try:
        result = await asyncio.wait_for(impl(value, call), limit)
    except TimeoutError:
        # "A request that outlives its timeout is answered with the JSON-RPC
        # error code -32001. ... For ``tools/call``, it is a tool error the
        # model reads."
        code = TIMEOUT_ERROR_CODE
        if dev("tool-timeout-wrong-code"):
            code = SERVER_ERROR
        raise RpcError(code, f"{name} did not finish within {limit:g}s",
                       {"timeoutSeconds": float(limit)})
    # -> a ``CallbackResult``
    if dev("result-unwrapped"):
        return result["output"]
    return result


# --------------------------------------------------------------------------
# Requests


METHODS = {
    "agent/initialize": (method_initialize, None),
    "sandbox/execute": (method_execute, "sandbox"),
    "sandbox/readFile": (method_read_file, "sandbox"),
    "tools/call": (method_tools_call, "tools"),
}


def reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


async def process_line(line: bytes, conn: dict) -> object:
    """The reply to one request line, or None when none is due."""
    try:
        message = json.loads(line.decode("utf-8"), parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        # "Lines are JSON-RPC 2.0 messages": a line that is not JSON is a
        # parse error, answered with a null id, and the server serves on.
        if dev("die-on-malformed"):
            log("a line that is not JSON: exiting (deviation die-on-malformed)")
            kill_all_groups()
            os._exit(3)
        code = PARSE_ERROR
        if dev("parse-error-code"):
            code = INVALID_REQUEST
        rid = None
        if dev("parse-error-with-id"):
            found = re.search(rb'"id"\s*:\s*(-?\d+)', line)
            rid = int(found.group(1)) if found else None
        return make_error(rid, code, f"Parse error: {e}")
    if isinstance(message, list):
        # JSON-RPC 2.0 batch: an empty one is a single Invalid Request.
        if not message:
            return make_error(None, invalid_request_code(), "Invalid Request: empty batch")
        conn["in_batch"] = True
        replies = await asyncio.gather(*(handle_message(m, conn) for m in message))
        replies = [r for r in replies if r is not None]
        # JSON-RPC 2.0: "the server MUST NOT return an empty Array and should
        # return nothing at all."
        if dev("batch-empty-array"):
            return replies
        return replies or None
    return await handle_message(message, conn)


def invalid_request_code() -> int:
    # JSON-RPC 2.0: "-32600 Invalid Request: The JSON sent is not a valid
    # Request object."
    if dev("invalid-request-code"):
        return PARSE_ERROR
    return INVALID_REQUEST


async def handle_message(message: object, conn: dict) -> dict | None:
    if not isinstance(message, dict):
        return make_error(None, invalid_request_code(), "Invalid Request: not an object")
    rid = message.get("id")
    id_ok = rid is None or isinstance(rid, str) or is_number(rid)
    echo = rid if id_ok else None
    if message.get("jsonrpc") != "2.0":
        return make_error(echo, invalid_request_code(), 'Invalid Request: jsonrpc must be "2.0"')
    method = message.get("method")
    if not isinstance(method, str):
        return make_error(echo, invalid_request_code(), "Invalid Request: method must be a string")
    if not id_ok:
        return make_error(None, invalid_request_code(), "Invalid Request: bad id")
    params = message.get("params", {})
    if not isinstance(params, (dict, list)):
        return make_error(echo, invalid_request_code(), "Invalid Request: params must be structured")
    if "id" not in message:
        # A notification: JSON-RPC 2.0 "The Server MUST NOT reply to a
        # Notification". None of this protocol's methods is one: ignored.
        if not (dev("notification-answered") and not conn.get("in_batch")):
            return None
    try:
        # "``agent/initialize``, called once before the run:" -- not on each
        # connection: "Vibe connects once per request".
        if (dev("require-initialize-per-connection") and method != "agent/initialize"
                and not conn.get("initialized")):
            raise RpcError(SERVER_ERROR, "agent/initialize first on this connection")
        entry = METHODS.get(method)
        if entry is not None and entry[1] == "sandbox" and not CONFIG.serve_sandbox:
            entry = None
        if entry is not None and entry[1] == "tools" and not CONFIG.serve_tools:
            entry = None
        if entry is None:
            # JSON-RPC 2.0: "-32601 Method not found"
            code = METHOD_NOT_FOUND
            if dev("method-not-found-code"):
                code = INVALID_REQUEST
            raise RpcError(code, f"Method not found: {method}")
        if not isinstance(params, dict):
            raise invalid_params("params must be an object")
        result = await entry[0](params)
        if method == "agent/initialize":
            conn["initialized"] = True
        reply = make_result(rid, result)
        json.dumps(reply, allow_nan=False)  # fails here, not half way through a write
        return reply
    except RpcError as e:
        return make_error(rid, e.code, e.message, e.data)
    except Exception as e:  # a bug here must not end the server
        log(f"internal error in {method}: {e!r}")
        return make_error(rid, INTERNAL_ERROR, f"Internal error: {e}")


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes | None, bool]:
    """(line, too_large). Vibe "writes one request line, reads one reply line,
    and closes the connection": the request ends at its newline, and the
    client does not close its side first."""
    if dev("request-needs-eof"):
        try:
            data = await asyncio.wait_for(reader.read(MAX_REQUEST_BYTES), REQUEST_READ_SECONDS)
            while data and not reader.at_eof() and len(data) < MAX_REQUEST_BYTES:
                more = await asyncio.wait_for(reader.read(MAX_REQUEST_BYTES - len(data)),
                                              REQUEST_READ_SECONDS)
                if not more:
                    break
                data += more
        except (TimeoutError, OSError):
            return None, False
        return (data or None), False
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\n"), REQUEST_READ_SECONDS)
    except asyncio.IncompleteReadError as e:
        # Closed before a newline: what came is the request, if anything did.
        return (e.partial or None), False
    except asyncio.LimitOverrunError:
        return None, True
    except (TimeoutError, OSError, ValueError):
        return None, False
    return line, False


async def handle_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        line, too_large = await read_request(reader)
        if too_large:
            reply = make_error(None, invalid_request_code(),
                               f"Invalid Request: longer than {MAX_REQUEST_BYTES} bytes")
        elif line is None:
            return
        else:
            conn: dict = {}
            # "The server should answer them concurrently too: a request's
            # timeout covers the time it waits behind others"
            if dev("serial"):
                async with SERIAL_LOCK:
                    reply = await process_line(line, conn)
            else:
                reply = await process_line(line, conn)
        if reply is None:
            return
        if dev("close-without-reply") and isinstance(reply, dict) and \
                isinstance(reply.get("error"), dict) and \
                reply["error"].get("code") == METHOD_NOT_FOUND:
            # "it writes one request line, reads one reply line"
            return
        try:
            data = frame(reply)
        except (ValueError, RecursionError) as e:
            rid = reply.get("id") if isinstance(reply, dict) else None
            data = frame(make_error(rid, INTERNAL_ERROR, f"Internal error: {e}"))
        writer.write(data)
        # "reads one reply line, and closes the connection" -- nothing follows.
        if dev("reply-extra-line"):
            writer.write(data)
        await asyncio.wait_for(writer.drain(), REPLY_WRITE_SECONDS)
    except (OSError, TimeoutError, asyncio.CancelledError):
        pass
    except Exception as e:
        log(f"connection error: {e!r}")
    finally:
        try:
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 5.0)
        except (OSError, TimeoutError, asyncio.CancelledError, Exception):
            pass


# --------------------------------------------------------------------------
# Socket and life cycle


def make_socket(path: str) -> socket.socket:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        # "a Unix socket it created with mode 0600 inside a 0700 directory"
        mode = 0o755 if dev("socket-dir-0755") else 0o700
        old = os.umask(0o077 if mode == 0o700 else 0o022)
        try:
            os.makedirs(directory, mode=mode, exist_ok=True)
        finally:
            os.umask(old)
        os.chmod(directory, mode)
    if os.path.lexists(path):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
        else:
            raise SystemExit(f"{path} exists and is not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # "The caller runs a server on a Unix socket it created with mode 0600"
    mode = 0o666 if dev("socket-mode-0666") else 0o600
    old = os.umask(0o177 if mode == 0o600 else 0o000)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(128)
    return sock


async def serve(args: argparse.Namespace) -> int:
    global SERIAL_LOCK
    SERIAL_LOCK = asyncio.Lock()
    temporary = None
    CONFIG.serve_sandbox = not args.no_sandbox
    CONFIG.serve_tools = not args.no_tools
    CONFIG.max_command_seconds = args.max_command_seconds
    CONFIG.tool_timeout_seconds = args.tool_timeout_seconds
    if args.workspace:
        workspace = os.path.realpath(args.workspace)
        if not os.path.isdir(workspace):
            log(f"--workspace {args.workspace} is not a directory")
            return 2
    else:
        temporary = tempfile.mkdtemp(prefix="agent-socket-workspace-")  # mode 0700
        workspace = os.path.realpath(temporary)
    CONFIG.workspace = workspace
    CONFIG.python = os.path.realpath(sys.executable) if sys.executable else shutil.which("python3")
    try:
        sock = make_socket(args.listen)
    except (OSError, SystemExit) as e:
        log(f"cannot listen on {args.listen}: {e}")
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await asyncio.start_unix_server(handle_connection, sock=sock, limit=MAX_REQUEST_BYTES)
    log(f"listening on {args.listen}" + (f" (deviation {DEVIATION})" if DEVIATION else ""))
    try:
        await stop.wait()
    finally:
        server.close()
        kill_all_groups()
        try:
            if stat.S_ISSOCK(os.lstat(args.listen).st_mode):
                os.unlink(args.listen)
        except OSError:
            pass
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    global DEVIATION
    parser = argparse.ArgumentParser(description="Agent socket v2 reference server")
    parser.add_argument("--listen", required=True, metavar="SOCKET_PATH")
    parser.add_argument("--workspace", metavar="DIR",
                        help="the sandbox workspace (default: a temporary directory)")
    parser.add_argument("--deviation", metavar="NAME",
                        choices=sorted(DEVIATIONS) + sorted(DEVIATIONS_ROUND3))
    parser.add_argument("--max-command-seconds", type=float, default=DEFAULT_MAX_COMMAND_SECONDS,
                        help="the sandbox's own limit on a command (default %(default)s)")
    parser.add_argument("--tool-timeout-seconds", type=float, default=DEFAULT_TOOL_TIMEOUT_SECONDS,
                        help="toolTimeoutSeconds declared and enforced (default %(default)s)")
    parser.add_argument("--no-sandbox", action="store_true", help="serve the tools half only")
    parser.add_argument("--no-tools", action="store_true", help="serve the sandbox half only")
    args = parser.parse_args(argv)
    for name in ("max_command_seconds", "tool_timeout_seconds"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            parser.error(f"--{name.replace('_', '-')} must be positive")
    DEVIATION = args.deviation
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
