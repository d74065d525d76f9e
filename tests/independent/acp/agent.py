#!/usr/bin/env python3
"""An independent reference ACP v1 agent with a deterministic, keyword-driven fake model.

Written from the public Agent Client Protocol sources only:
  * docs/protocol/v1/*.mdx of agentclientprotocol/agent-client-protocol (the prose),
  * schema.json / meta.json, schema release 1.21.0 (the wire types),
  * the JSON-RPC 2.0 specification that overview.mdx adopts.

Usage:
    python3 agent.py [--deviation NAME] [--state-dir DIR] [--list-deviations]

With no --deviation the agent tries to follow every rule it implements.  Each
--deviation NAME breaks exactly one normative sentence (see deviations.json); the
places are marked with `if DEV == "NAME":` next to the quoted rule.

The agent speaks newline-delimited JSON-RPC 2.0 on stdin/stdout; it logs to stderr
only.  It exits when stdin closes.  See README.md for the prompt grammar.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
import zlib
from datetime import datetime, timezone

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

DEV: str | None = None  # the selected deviation, if any

DEVIATIONS = [
    # transport / JSON-RPC
    "stdout_banner", "pretty_printed_json", "non_utf8_output", "exit_on_parse_error",
    "exit_on_invalid_params", "parse_error_nonnull_id", "answer_notification",
    "wrong_unknown_method_code", "string_id_as_number", "custom_request_no_response",
    "invalid_params_wrong_code", "custom_root_field",
    # initialization
    "echo_unsupported_version", "terminal_auth_unadvertised",
    # session setup
    "missing_session_id", "duplicate_session_id", "reject_stdio_mcp", "mcp_not_connected",
    "load_no_replay", "load_replays_after_response", "resume_replays_history",
    "close_no_cancel", "list_no_match_missing_array", "delete_unknown_errors",
    # prompt turn / cancellation
    "cancel_end_turn", "cancel_error_response", "update_after_response",
    "update_after_cancel_response", "tool_runs_after_cancel", "reject_resource_link",
    "update_wrong_session",
    # tool calls / permissions
    "reuse_tool_call_id", "update_unannounced_tool_call", "invalid_tool_status",
    "write_after_reject", "permission_no_options", "permission_invalid_option_kind",
    # file system
    "zero_based_line", "fs_read_when_false", "fs_read_when_absent", "fs_write_without_cap",
    "relative_path_in_fs",
    # terminals
    "terminal_without_cap", "terminal_not_released", "terminal_embedded_after_release",
    # plans
    "plan_invalid_status", "plan_invalid_priority", "plan_partial_update",
    # modes / config options
    "boolean_config_unadvertised", "set_config_partial", "mode_update_modeId",
    # elicitation
    "elicitation_unadvertised",
]

# Round 3 (deviations-round3.json): kept apart so that DEVIATIONS and deviations.json stay as
# they were.  --deviation accepts them; --list-deviations lists them after the others.
DEVIATIONS_ROUND3 = [
    "negative_id_positive", "protocol_version_string", "permission_stale_tool_call_id",
    "fs_read_stale_session", "terminal_output_after_release", "cancel_wrong_session",
    "message_id_split", "list_cursor_on_last_page",
]

SUPPORTED_PROTOCOL_VERSIONS = (1,)
AGENT_NAME = "fake-acp-agent"
AGENT_TITLE = "Fake ACP Agent \u00b7 reference"  # the middle dot is deliberately non-ASCII
AGENT_VERSION = "1.0.0"

CLIENT_REQUEST_TIMEOUT = 60.0   # longest wait for any answer from the client
CANCEL_GRACE = 5.0              # after session/cancel, how long pending client requests may take
MCP_TIMEOUT = 5.0               # MCP initialize + tools/list handshake budget per server
LOCAL_COMMAND_TIMEOUT = 30.0    # commands run by the agent itself (no terminal capability)
TERMINAL_TIMEOUT = 30.0         # default timer for terminal commands before terminal/kill
MAX_LINE = 16 * 1024 * 1024     # longest accepted input line
OUTPUT_LIMIT = 64 * 1024        # bytes of command output kept
LIST_PAGE_SIZE = 50

# JSON-RPC / ACP error codes (schema.json $defs.ErrorCode)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
RESOURCE_NOT_FOUND = -32002

HISTORY_KINDS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")

MODES = [
    {"id": "code", "name": "Code",
     "description": "Edits files and runs commands; asks permission only when the prompt asks for it"},
    {"id": "ask", "name": "Ask",
     "description": "Requests permission before every file edit or command"},
]
MODELS = [
    {"value": "fake-fast", "name": "Fake fast", "description": "Deterministic keyword model"},
    {"value": "fake-thorough", "name": "Fake thorough", "description": "The same model, but slower"},
]

AVAILABLE_COMMANDS = [
    {"name": "read", "description": "Read a file", "input": {"hint": "path of the file to read"}},
    {"name": "write", "description": "Write a file", "input": {"hint": "path followed by the content"}},
    {"name": "run", "description": "Run a shell command", "input": {"hint": "command line"}},
    {"name": "plan", "description": "Make a plan", "input": {"hint": "number of steps"}},
    {"name": "think", "description": "Show some reasoning"},
]


def log(*parts) -> None:
    """Logging goes to stderr only (transports.mdx: the agent MAY write UTF-8 to stderr)."""
    try:
        sys.stderr.write("[fake-agent] " + " ".join(str(p) for p in parts) + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_message_id(prefix: str = "msg") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class RpcError(Exception):
    def __init__(self, code: int, message: str, data=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid_params(detail: str) -> RpcError:
    return RpcError(INVALID_PARAMS, "Invalid params", {"detail": detail})


def is_valid_id(value) -> bool:
    # schema $defs.RequestId: a String, a Number or NULL.
    if isinstance(value, bool):
        return False
    return value is None or isinstance(value, (str, int, float))


# ---------------------------------------------------------------------------
# Wire: the only writer of stdout
# ---------------------------------------------------------------------------

class Wire:
    def __init__(self):
        self.lock = threading.Lock()
        self.out = sys.stdout.buffer

    def _emit(self, data: bytes) -> None:
        with self.lock:
            try:
                self.out.write(data)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                log("stdout is closed; exiting")
                os._exit(0)

    def write(self, obj, pretty: bool = False) -> None:
        # transports.mdx#stdio: "Messages are delimited by newlines (`\n`), and **MUST NOT**
        # contain embedded newlines."  json.dumps escapes newlines inside strings.
        indent = 2 if pretty else None
        try:
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), indent=indent)
            text.encode("utf-8")
        except UnicodeEncodeError:
            # lone surrogates (from \udXXX escapes in the input) cannot be UTF-8: escape them
            text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), indent=indent)
        # transports.mdx: "JSON-RPC messages **MUST** be UTF-8 encoded."
        if DEV == "non_utf8_output":
            data = (text + "\n").encode("latin-1", errors="replace")
        else:
            data = (text + "\n").encode("utf-8")
        self._emit(data)

    def write_text_line(self, text: str) -> None:
        self._emit((text + "\n").encode("utf-8"))


class Pending:
    """An agent -> client request awaiting its response."""

    def __init__(self, rid: int, method: str):
        self.id = rid
        self.method = method
        self.event = threading.Event()
        self.response: dict | None = None

    def wait(self, turn: "Turn | None" = None, timeout: float = CLIENT_REQUEST_TIMEOUT,
             on_cancel=None) -> dict | None:
        """Wait for the response.  If the turn gets cancelled meanwhile, `on_cancel` runs once
        and the wait continues for at most CANCEL_GRACE seconds (the client is expected to
        answer pending requests, e.g. permission requests with the `cancelled` outcome)."""
        deadline = time.monotonic() + timeout
        cancel_deadline = None
        while True:
            if self.event.wait(0.02):
                return self.response
            now = time.monotonic()
            if turn is not None and turn.cancelled.is_set():
                if cancel_deadline is None:
                    cancel_deadline = now + CANCEL_GRACE
                    if on_cancel is not None:
                        on_cancel()
                if now >= cancel_deadline:
                    log(f"gave up waiting for {self.method} (id {self.id}) after cancellation")
                    return None
            if now >= deadline:
                log(f"timed out waiting for {self.method} (id {self.id})")
                return None


class Peer:
    """Outgoing requests/notifications and routing of the client's responses."""

    def __init__(self, wire: Wire):
        self.wire = wire
        self.lock = threading.Lock()
        self.next_id = 0
        self.pending: dict[int, Pending] = {}

    def request(self, method: str, params: dict) -> Pending:
        with self.lock:
            self.next_id += 1
            pending = Pending(self.next_id, method)
            self.pending[pending.id] = pending
        self.wire.write({"jsonrpc": "2.0", "id": pending.id, "method": method, "params": params})
        return pending

    def notify(self, method: str, params: dict) -> None:
        self.wire.write({"jsonrpc": "2.0", "method": method, "params": params})

    def on_response(self, msg: dict) -> None:
        rid = msg.get("id")
        pending = None
        if isinstance(rid, int) and not isinstance(rid, bool):
            with self.lock:
                pending = self.pending.pop(rid, None)
        if pending is None:
            log("ignoring a response to an unknown request id:", repr(rid))
            return
        pending.response = msg
        pending.event.set()


# ---------------------------------------------------------------------------
# MCP (stdio) client: spawn, initialize, tools/list, tools/call, kill
# ---------------------------------------------------------------------------

class McpFailure(Exception):
    pass


class McpConnection:
    def __init__(self, spec: dict, cwd: str):
        self.name = spec["name"]
        self.command = spec["command"]
        self.args = spec["args"]
        self.env = spec["env"]
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.tools: list[dict] = []
        self.status = "not started"
        self.lock = threading.Lock()
        self.next_id = 0

    def start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        command = self.command
        if not os.path.isabs(command):
            found = shutil.which(command)
            if found:
                command = found
        env = dict(os.environ)
        for var in self.env:
            env[var["name"]] = var["value"]
        try:
            self.proc = subprocess.Popen(
                [command] + self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, cwd=self.cwd if os.path.isdir(self.cwd) else None,
                env=env, start_new_session=True)
        except (OSError, ValueError) as exc:
            self.status = f"failed to start: {exc}"
            log(f"MCP server {self.name!r}: {self.status}")
            return
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            init = self._request("initialize", {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": AGENT_NAME, "version": AGENT_VERSION},
            }, deadline)
            if "result" not in init:
                raise McpFailure(f"initialize failed: {init.get('error')!r}")
            self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            listed = self._request("tools/list", {}, deadline)
            result = listed.get("result") if isinstance(listed.get("result"), dict) else {}
            tools = result.get("tools") if isinstance(result.get("tools"), list) else []
            self.tools = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
            self.status = "ready"
            log(f"MCP server {self.name!r} ready with {len(self.tools)} tool(s)")
        except McpFailure as exc:
            self.status = f"failed: {exc}"
            log(f"MCP server {self.name!r}: {self.status}")

    def _pump(self) -> None:
        proc = self.proc
        try:
            while True:
                line = proc.stdout.readline(4 * 1024 * 1024)
                if not line:
                    break
                self.lines.put(line)
        except Exception:
            pass
        self.lines.put(None)

    def _send(self, obj: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
        except (OSError, ValueError, AttributeError) as exc:
            raise McpFailure(f"cannot write to the server: {exc}")

    def _request(self, method: str, params: dict, deadline: float) -> dict:
        with self.lock:
            self.next_id += 1
            rid = self.next_id
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise McpFailure(f"timed out waiting for {method}")
                try:
                    line = self.lines.get(timeout=remaining)
                except queue.Empty:
                    raise McpFailure(f"timed out waiting for {method}")
                if line is None:
                    self.lines.put(None)
                    raise McpFailure("the server closed its stdout")
                try:
                    msg = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue  # not JSON: ignore
                if not isinstance(msg, dict):
                    continue
                if "method" in msg:
                    if "id" in msg:  # a server -> client request we do not implement
                        self._send({"jsonrpc": "2.0", "id": msg["id"],
                                    "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"}})
                    continue
                if msg.get("id") == rid:
                    return msg

    def call_tool(self, name: str, arguments: dict, timeout: float = 10.0) -> dict:
        if self.status != "ready":
            raise McpFailure(f"server {self.name!r} is not ready ({self.status})")
        return self._request("tools/call", {"name": name, "arguments": arguments},
                             time.monotonic() + timeout)

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except Exception:
            pass
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError, OSError):
                    try:
                        proc.send_signal(sig)
                    except Exception:
                        pass
                try:
                    proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.status = "closed"


# ---------------------------------------------------------------------------
# Sessions and optional on-disk persistence
# ---------------------------------------------------------------------------

class Session:
    def __init__(self, sid: str, cwd: str, additional_dirs: list[str]):
        self.id = sid
        self.cwd = cwd
        self.additional_dirs = list(additional_dirs)
        self.mode_id = "code"
        self.model = "fake-fast"
        self.brave = False
        self.history: list[dict] = []
        self.title: str | None = None
        self.updated_at = now_iso()
        self.tool_seq = 0
        self.active = True
        self.turn: Turn | None = None
        self.mcp: list[McpConnection] = []
        self.commands_sent = False
        self.remembered: dict[str, str] = {}  # tool kind -> "allow"/"reject" (allow_always etc.)

    def roots(self) -> list[str]:
        return [self.cwd] + self.additional_dirs

    def to_json(self) -> dict:
        return {"sessionId": self.id, "cwd": self.cwd, "additionalDirectories": self.additional_dirs,
                "modeId": self.mode_id, "model": self.model, "brave": self.brave,
                "history": self.history, "title": self.title, "updatedAt": self.updated_at,
                "toolSeq": self.tool_seq}

    @classmethod
    def from_json(cls, data: dict) -> "Session":
        s = cls(data["sessionId"], data["cwd"], data.get("additionalDirectories") or [])
        s.mode_id = data.get("modeId", "code")
        s.model = data.get("model", "fake-fast")
        s.brave = bool(data.get("brave", False))
        s.history = list(data.get("history") or [])
        s.title = data.get("title")
        s.updated_at = data.get("updatedAt") or now_iso()
        s.tool_seq = int(data.get("toolSeq") or 0)
        s.active = False  # must be loaded or resumed before use
        s.commands_sent = True
        return s


class Store:
    def __init__(self, directory: str):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, sid: str) -> str:
        return os.path.join(self.dir, re.sub(r"[^A-Za-z0-9_.-]", "_", sid) + ".json")

    def save(self, session: Session) -> None:
        path = self._path(session.id)
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(session.to_json(), fh)
            os.replace(tmp, path)
        except OSError as exc:
            log("cannot persist session:", exc)

    def delete(self, sid: str) -> None:
        try:
            os.remove(self._path(sid))
        except OSError:
            pass

    def load_all(self) -> list[Session]:
        out = []
        for name in sorted(os.listdir(self.dir))[:10000]:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.dir, name), encoding="utf-8") as fh:
                    out.append(Session.from_json(json.load(fh)))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out


# ---------------------------------------------------------------------------
# The fake model: keyword grammar -> list of actions
# ---------------------------------------------------------------------------

_Q = r"`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+'"
_PATH = rf"(?P<path>{_Q}|[^\s`\"']+)"
_NUM_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
              "eight": 8, "nine": 9, "ten": 10}

READ_RE = re.compile(
    r"\b(?:read|open|cat|view|show|display|print|summari[sz]e|look\s+at|inspect|what(?:'s|\s+is)\s+in)\s+"
    r"(?:(?:the\s+)?(?:first|top)\s+(?P<first>\d+)\s+lines?\s+(?:of|from|in)\s+"
    r"|lines?\s+(?P<l1>\d+)(?:\s*(?:-|to|through|thru)\s*(?P<l2>\d+))?\s+(?:of|from|in)\s+)?"
    rf"(?P<fill>(?:(?:me|the|a|an|this|that|contents?|of|file|named|called|at)\s+)*){_PATH}",
    re.I)
LINE_RANGE_RE = re.compile(r"\blines?\s+(\d+)\s*(?:-|to|through|thru)\s*(\d+)", re.I)
LINE_FROM_RE = re.compile(r"\b(?:from|starting\s+(?:at|from)|beginning\s+at|at)\s+line\s+(\d+)", re.I)
LIMIT_RE = re.compile(r"\b(?:first|only|at\s+most|limit(?:ed)?(?:\s+to)?|up\s+to|max(?:imum)?)\s+"
                      r"(?:of\s+)?(\d+)\s+lines?\b", re.I)

WRITE_TO_RE = re.compile(
    r"\b(?:write|put|save|append|add)\s+(?:(?:the\s+)?(?:text|content|contents|string|line|words?)\s+)?"
    rf"(?P<content>{_Q})\s+(?:to|into|in)\s+"
    rf"(?P<fill>(?:(?:a|an|the|new|file|named|called)\s+)*){_PATH}", re.I)
WRITE_TO_FILE_RE = re.compile(
    r"\bwrite\s+(?P<content>[^\n]+?)\s+(?:to|into)\s+(?:(?:a|an|the|new)\s+)*file\s+" + _PATH, re.I)
WRITE_TARGET_RE = re.compile(
    r"\b(?P<verb>write|create|edit|overwrite|update|modify|save)\s+"
    rf"(?P<fill>(?:(?:to|into|a|an|the|new|empty|text|file|named|called|at)\s+)*){_PATH}", re.I)
CONTENT_INTRO_RE = re.compile(
    r"\s*,?\s*(?:with|containing|that\s+(?:says|contains|reads)|to\s+(?:say|contain)|saying|reading)\s+"
    r"(?:(?:the|a|an|following)\s+)*(?:(?:text|content|contents|body|string|line|words?)\s*)?:?\s*", re.I)
CONTENT_END_RE = re.compile(
    r"\s*(?:,\s*|\s)(?:and\s+(?:then\s+)?|then\s+|but\s+)?(?:please\s+)?"
    r"(?:ask|request|get|run|read|make|create|write|think|plan|wait|switch|show|tell|before|after|first)\b"
    r"|\s*;|\.(?:\s|$)|\n", re.I)
REPLACE_RE = re.compile(rf"\breplac(?:e|ing)\s+(?P<old>{_Q})\s+(?:with|by)\s+(?P<new>{_Q})", re.I)

RUN_RE = re.compile(
    r"\b(?:run|execute|exec)(?:\s+|:\s*)"
    r"(?P<fill>(?:(?:the|a|this|following|shell|terminal|bash|command|cmd|program|script)(?:\s+|:\s*))*)"
    rf"(?::\s*)?(?P<cmd>{_Q}|[^\n]+)", re.I)
CMD_END_RE = re.compile(
    r"\s+(?:in|inside|on|using|via|from|within)\s+(?:a|an|the|my|your)?\s*(?:new\s+)?"
    r"(?:terminal|shell|console|bash)\b|\s+with\s+(?:a\s+)?time\s?-?out\b|\s+(?:and|then|but)\s"
    r"|\s*[,;]\s|\.(?:\s|$)|\n|$", re.I)
TIMEOUT_RE = re.compile(
    r"\b(?:time\s?-?out|time\s+limit|kill\s+it\s+after)\s+(?:of\s+)?(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|secs?|seconds?)?\b", re.I)
SHELLISH_RE = re.compile(r"\b(?:terminal|shell|console|bash)\b", re.I)

PLAN_RE = re.compile(r"\b(?:plan|todo\s+list|to-do\s+list|checklist)\b", re.I)
STEPS_COUNT_RE = re.compile(
    r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten)[\s-]+(?:steps?|tasks?|items?|entries|stages?)\b",
    re.I)
STEPS_LIST_RE = re.compile(r"\b(?:steps?|tasks?|items?)\s*:\s*([^\n]+)", re.I)
THINK_RE = re.compile(r"\b(?:think|thinking|ponder|reflect|reason\s+(?:about|through|step\s+by\s+step))\b",
                      re.I)
ELICIT_RE = re.compile(r"\bask\s+me\s+(?:which|what|whether|to\s+(?:choose|pick|select))\b"
                       r"|\b(?:which|what)\s+(?:of\s+(?:the\s+)?)?(?:two|2|these)\s+options\b", re.I)
LONG_RE = re.compile(r"\b(?:very\s+long|lengthy|long\s+(?:answer|explanation|essay|story|response|reply|text|"
                     r"message|list|stream)|at\s+least\s+(\d+)\s+words|(\d{3,})\s+words|stream\s+slowly)\b", re.I)
WAIT_RE = re.compile(r"\b(?:wait|sleep|pause)\s+(?:for\s+)?(\d+(?:\.\d+)?)\s*"
                     r"(ms|milliseconds?|s|secs?|seconds?)\b", re.I)
MODE_RE = re.compile(r"\bswitch\s+(?:to\s+)?(?:the\s+)?([A-Za-z][\w-]*)\s+mode\b"
                     r"|\bswitch\s+(?:the\s+)?mode\s+to\s+([A-Za-z][\w-]*)"
                     r"|\b(?:enter|use)\s+([A-Za-z][\w-]*)\s+mode\b", re.I)
MCP_LIST_RE = re.compile(r"\b(?:list|show|what\s+are)\s+(?:me\s+)?(?:the\s+|my\s+|all\s+|available\s+)*"
                         r"mcp\s+tools\b", re.I)
MCP_CALL_RE = re.compile(r"\bcall\s+(?:the\s+)?(?:mcp\s+)?tool\s+(?P<name>" + _Q + r"|[\w./:-]+)"
                         r"(?:\s+with\s+(?:the\s+)?(?:arguments|args|input)\s+(?P<args>\{[^\n]*\}))?", re.I)
USAGE_RE = re.compile(r"\b(?:usage|token\s+count|cost)\b", re.I)
REFUSE_RE = re.compile(r"\b(?:refuse|refusal)\b", re.I)
MAX_TOKENS_RE = re.compile(r"\bmax[_\s-]tokens\b", re.I)
MAX_TURN_RE = re.compile(r"\bmax[_\s-]turn[_\s-]requests\b", re.I)
ERROR_RE = re.compile(r"\b(?:fail\s+with\s+an?\s+error|raise\s+an?\s+error|return\s+an?\s+error"
                      r"|internal\s+error)\b", re.I)
PERMISSION_RE = re.compile(r"\b(?:permission|approval|approve|consent|confirm(?:ation)?)\b"
                           r"|\bask\s+(?:me\s+)?(?:first|before)\b|\bask\s+me\s+(?:for|to\s+confirm)\b", re.I)


class Action:
    def __init__(self, kind: str, start: int, end: int, **args):
        self.kind = kind
        self.start = start
        self.end = end
        self.args = args

    def __repr__(self):
        return f"Action({self.kind}, {self.start}-{self.end}, {self.args})"


def _unquote(token: str) -> tuple[str, bool]:
    if len(token) >= 2 and token[0] in "`\"'" and token[-1] == token[0]:
        return token[1:-1], True
    return token, False


def _clean_path(token: str, explicit: bool) -> str | None:
    value, quoted = _unquote(token)
    if not quoted:
        value = value.rstrip(".,;:!?)]}>").lstrip("(<[")
    value = value.strip()
    if not value:
        return None
    if quoted or explicit:
        return value
    if "/" in value or value.startswith("~") or re.search(r"\.[A-Za-z0-9]{1,8}$", value):
        return value
    return None


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\t", "\t")


def _parse_count(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUM_WORDS.get(word, 3)


def parse_prompt(text: str) -> tuple[list[Action], bool]:
    """Return the ordered actions of a prompt and whether it explicitly asks for permission."""
    stripped = text.strip()
    if stripped.startswith("/"):
        return _parse_slash(stripped), bool(PERMISSION_RE.search(stripped))
    found: list[Action] = []

    for m in READ_RE.finditer(text):
        explicit = bool(re.search(r"\bfile\b", m.group("fill") or "", re.I))
        path = _clean_path(m.group("path"), explicit)
        if path is None:
            continue
        line = limit = None
        if m.group("first"):
            limit = int(m.group("first"))
        if m.group("l1"):
            line = int(m.group("l1"))
            limit = int(m.group("l2")) - line + 1 if m.group("l2") else 1
        found.append(Action("read", m.start(), m.end(), path=path, line=line, limit=limit))

    for rx in (WRITE_TO_RE, WRITE_TO_FILE_RE):
        for m in rx.finditer(text):
            explicit = rx is WRITE_TO_FILE_RE or bool(re.search(r"\bfile\b", m.group("fill") or "", re.I))
            path = _clean_path(m.group("path"), explicit)
            if path is None:
                continue
            content, _ = _unquote(m.group("content").strip())
            found.append(Action("write", m.start(), m.end(), path=path, content=_unescape(content),
                                replace=None))

    for m in WRITE_TARGET_RE.finditer(text):
        explicit = bool(re.search(r"\bfile\b", m.group("fill") or "", re.I))
        path = _clean_path(m.group("path"), explicit)
        if path is None:
            continue
        end = m.end()
        rest = text[end:]
        content = None
        replace = None
        intro = CONTENT_INTRO_RE.match(rest)
        if intro:
            body = rest[intro.end():]
            q = re.match(_Q, body)
            if q:
                content = _unquote(q.group(0))[0]
                end += intro.end() + q.end()
            else:
                stop = CONTENT_END_RE.search(body)
                raw = body[:stop.start()] if stop else body
                content = raw.strip()
                end += intro.end() + len(raw)
        rm = REPLACE_RE.search(rest.split("\n", 1)[0])
        if content is None and rm:
            replace = (_unquote(rm.group("old"))[0], _unquote(rm.group("new"))[0])
        if content is None and replace is None:
            empty = m.group("verb").lower() == "create" or re.search(r"\bempty\b", m.group("fill"), re.I)
            content = "" if empty else "Hello from the fake ACP agent.\n"
        found.append(Action("write", m.start(), end, path=path,
                            content=None if content is None else _unescape(content), replace=replace))

    for m in RUN_RE.finditer(text):
        raw = m.group("cmd")
        command, quoted = _unquote(raw.strip()) if re.match(_Q, raw) else (raw, False)
        if quoted:
            end = m.start("cmd") + len(raw)
        else:
            stop = CMD_END_RE.search(raw)
            command = raw[:stop.start()] if stop else raw
            end = m.start("cmd") + len(command)
            command = command.strip()
        if not command:
            continue
        if not quoted:
            fill = m.group("fill") or ""
            first_word = command.split()[0]
            if not (re.search(r"\b(?:command|cmd|shell|terminal|bash|program|script)\b", fill, re.I)
                    or SHELLISH_RE.search(text[end:end + 60]) or shutil.which(first_word)):
                continue
        found.append(Action("run", m.start(), end, command=command, timeout=None))

    for m in PLAN_RE.finditer(text):
        found.append(Action("plan", m.start(), m.end()))
        break
    for m in THINK_RE.finditer(text):
        found.append(Action("think", m.start(), m.end()))
        break
    for m in ELICIT_RE.finditer(text):
        found.append(Action("elicit", m.start(), m.end()))
        break
    longs = list(LONG_RE.finditer(text))
    if longs:
        words = max([int(g) for lm in longs for g in lm.groups() if g] or [800])
        found.append(Action("long", longs[0].start(), longs[0].end(), words=words))
    for m in WAIT_RE.finditer(text):
        value = float(m.group(1))
        unit = m.group(2).lower()
        seconds = value / 1000.0 if unit.startswith("m") else value
        found.append(Action("wait", m.start(), m.end(), seconds=seconds))
    for m in MODE_RE.finditer(text):
        mode = next(g for g in m.groups() if g)
        found.append(Action("mode", m.start(), m.end(), mode=mode.lower()))
    for m in MCP_LIST_RE.finditer(text):
        found.append(Action("mcp_list", m.start(), m.end()))
        break
    for m in MCP_CALL_RE.finditer(text):
        name = _unquote(m.group("name"))[0]
        try:
            arguments = json.loads(m.group("args")) if m.group("args") else {}
        except ValueError:
            arguments = {}
        found.append(Action("mcp_call", m.start(), m.end(), name=name,
                            arguments=arguments if isinstance(arguments, dict) else {}))
    for m in USAGE_RE.finditer(text):
        found.append(Action("usage", m.start(), m.end()))
        break
    for rx, reason in ((REFUSE_RE, "refusal"), (MAX_TOKENS_RE, "max_tokens"),
                       (MAX_TURN_RE, "max_turn_requests")):
        for m in rx.finditer(text):
            found.append(Action("stop", m.start(), m.end(), reason=reason))
            break
    for m in ERROR_RE.finditer(text):
        found.append(Action("error", m.start(), m.end()))
        break

    # Keep the actions in textual order; drop any action that starts inside an earlier one
    # (e.g. "sleep 5 seconds" inside a quoted command).
    found.sort(key=lambda a: (a.start, -(a.end - a.start)))
    actions: list[Action] = []
    for action in found:
        if any(prev.start <= action.start < prev.end for prev in actions):
            continue
        actions.append(action)

    # Arguments that live in the text between an action and the next one.
    for i, action in enumerate(actions):
        segment_end = actions[i + 1].start if i + 1 < len(actions) else len(text)
        segment = text[action.end:segment_end]
        if action.kind == "read" and action.args["line"] is None:
            rng = LINE_RANGE_RE.search(segment)
            if rng:
                action.args["line"] = int(rng.group(1))
                action.args["limit"] = max(1, int(rng.group(2)) - int(rng.group(1)) + 1)
            else:
                frm = LINE_FROM_RE.search(segment)
                if frm:
                    action.args["line"] = int(frm.group(1))
            if action.args["limit"] is None:
                lim = LIMIT_RE.search(segment)
                if lim:
                    action.args["limit"] = int(lim.group(1))
        if action.kind == "run":
            tm = TIMEOUT_RE.search(segment)
            if tm:
                value = float(tm.group(1))
                unit = (tm.group(2) or "s").lower()
                action.args["timeout"] = value / 1000.0 if unit.startswith("m") else value
        if action.kind == "plan":
            listed = STEPS_LIST_RE.search(text)
            steps = None
            if listed:
                steps = [s.strip(" .") for s in re.split(r"\s*(?:;|,|\bthen\b)\s*", listed.group(1))]
                steps = [s for s in steps if s][:10]
            if not steps:
                count = STEPS_COUNT_RE.search(text)
                n = max(1, min(10, _parse_count(count.group(1)) if count else 3))
                steps = [f"Step {k + 1} of the plan" for k in range(n)]
            action.args["steps"] = steps
    return actions, bool(PERMISSION_RE.search(text))


def _parse_slash(text: str) -> list[Action]:
    name, _, rest = text[1:].partition(" ")
    rest = rest.strip()
    n = len(text)
    name = name.lower()
    if name == "read" and rest:
        return [Action("read", 0, n, path=_unquote(rest)[0], line=None, limit=None)]
    if name == "write" and rest:
        try:
            parts = shlex.split(rest)
        except ValueError:
            parts = rest.split()
        path = parts[0] if parts else rest
        content = " ".join(parts[1:]) if len(parts) > 1 else "Hello from the fake ACP agent.\n"
        return [Action("write", 0, n, path=path, content=_unescape(content), replace=None)]
    if name == "run" and rest:
        return [Action("run", 0, n, command=_unquote(rest)[0], timeout=None)]
    if name == "plan":
        count = int(rest) if rest.isdigit() else 3
        count = max(1, min(10, count))
        return [Action("plan", 0, n, steps=[f"Step {k + 1} of the plan" for k in range(count)])]
    if name == "think":
        return [Action("think", 0, n)]
    return [Action("unknown_command", 0, n, name=name)]


# ---------------------------------------------------------------------------
# A prompt turn
# ---------------------------------------------------------------------------

class Turn:
    def __init__(self, agent: "Agent", session: Session, rid, blocks: list[dict]):
        self.agent = agent
        self.session = session
        self.rid = rid
        self.blocks = blocks
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.responded = False
        self.explicit_permission = False
        self.local_tool_seq = 0
        self.current_tool: str | None = None
        self.history_mark = len(session.history)
        self.started = time.monotonic()

    # -- plumbing -----------------------------------------------------------

    def cancel(self) -> None:
        self.cancelled.set()

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def update(self, update: dict) -> None:
        self.agent.send_update(self.session, update, self)

    def caps(self) -> dict:
        return self.agent.client_caps

    def say(self, text: str, kind: str = "agent_message_chunk") -> None:
        if not text:
            return
        message_id = new_message_id()
        cut = text.find(" ", len(text) // 2)
        pieces = [text[:cut], text[cut:]] if 0 < cut < len(text) - 1 else [text]
        for index, piece in enumerate(pieces):
            # schema ContentChunk.messageId: "All chunks belonging to the same message share the
            # same `messageId`."
            if DEV == "message_id_split" and index == 1:
                message_id = new_message_id()
            self.update({"sessionUpdate": kind, "messageId": message_id,
                         "content": {"type": "text", "text": piece}})

    def call_client(self, method: str, params: dict, on_cancel=None) -> tuple[object, dict | None]:
        """Send a request to the client and wait; returns (result, error)."""
        pending = self.agent.peer.request(method, params)
        response = pending.wait(self, CLIENT_REQUEST_TIMEOUT, on_cancel)
        if response is None:
            return None, {"code": REQUEST_CANCELLED if self.is_cancelled() else INTERNAL_ERROR,
                          "message": "no response from the client"}
        if "error" in response:
            err = response.get("error")
            return None, err if isinstance(err, dict) else {"code": INTERNAL_ERROR, "message": str(err)}
        return response.get("result"), None

    # -- tool call helpers --------------------------------------------------

    def new_tool_call_id(self) -> str:
        # tool-calls.mdx#creating: toolCallId is "A unique identifier for this tool call within
        # the session" -- the counter is per session and survives turns (and restarts).
        if DEV == "reuse_tool_call_id":
            self.local_tool_seq += 1
            return f"call_{self.local_tool_seq}"
        with self.agent.lock:
            self.session.tool_seq += 1
            return f"call_{self.session.tool_seq}"

    def announce(self, tool_id: str, title: str, kind: str, **fields) -> None:
        self.current_tool = tool_id
        update = {"sessionUpdate": "tool_call", "toolCallId": tool_id, "title": title,
                  "kind": kind, "status": "pending"}
        update.update(fields)
        self.update(update)

    def tool_update(self, tool_id: str, **fields) -> None:
        status = fields.get("status")
        # schema $defs.ToolCallStatus: pending | in_progress | completed | failed
        if status == "completed" and DEV == "invalid_tool_status":
            fields["status"] = "done"
        if status == "in_progress" and DEV == "update_unannounced_tool_call":
            # schema $defs.ToolCallUpdate: "An update to an existing tool call."
            tool_id = tool_id + "_exec"
        update = {"sessionUpdate": "tool_call_update", "toolCallId": tool_id}
        update.update(fields)
        self.update(update)
        if fields.get("status") in ("completed", "failed", "done"):
            self.current_tool = None

    def fail_tool(self, tool_id: str, text: str) -> None:
        self.tool_update(tool_id, status="failed",
                         content=[{"type": "content", "content": {"type": "text", "text": text}}])

    def needs_permission(self, kind: str) -> bool:
        if self.explicit_permission:
            return True
        return self.session.mode_id == "ask" and not self.session.brave and kind in ("edit", "execute")

    def request_permission(self, tool_id: str, title: str, kind: str) -> str:
        """Returns "allow", "reject" or "cancelled"."""
        remembered = self.session.remembered.get(kind)
        if remembered:
            return remembered
        options = [
            {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            {"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"},
        ]
        # tool-calls.mdx#requesting-permission: options are the "Available permission options
        # for the user to choose from"; each kind is a PermissionOptionKind.
        if DEV == "permission_no_options":
            options = []
        if DEV == "permission_invalid_option_kind":
            for option, bad in zip(options, ("allow", "allow_forever", "deny", "deny_forever")):
                option["kind"] = bad
        # schema RequestPermissionRequest.toolCall: "Details about the tool call requiring
        # permission." -- this tool call, not the one asked about before it.
        wire_tool_id = tool_id
        if DEV == "permission_stale_tool_call_id":
            wire_tool_id = getattr(self, "last_permission_tool", None) or tool_id
            self.last_permission_tool = tool_id
        result, error = self.call_client("session/request_permission", {
            "sessionId": self.session.id,
            "toolCall": {"toolCallId": wire_tool_id, "title": title, "kind": kind,
                         "status": "pending"},
            "options": options,
        })
        if self.is_cancelled():
            return "cancelled"
        if error is not None or not isinstance(result, dict):
            return "reject"  # no usable decision: do not run the tool
        outcome = result.get("outcome") if isinstance(result.get("outcome"), dict) else {}
        if outcome.get("outcome") == "cancelled":
            # The client reports the turn as cancelled; if session/cancel has not arrived (yet),
            # give it a moment, otherwise treat the answer as a refusal so the tool call ends.
            if self.cancelled.wait(0.2):
                return "cancelled"
            return "reject"
        if outcome.get("outcome") != "selected":
            return "reject"
        decision = {"allow-once": "allow", "allow-always": "allow",
                    "reject-once": "reject", "reject-always": "reject"}.get(outcome.get("optionId"), "reject")
        if outcome.get("optionId") in ("allow-always", "reject-always"):
            self.session.remembered[kind] = decision
        return decision

    def resolve_path(self, raw: str) -> str:
        path = os.path.expanduser(raw)
        # session-setup.mdx#working-directory: cwd "**MUST** remain the base for relative-path
        # resolution".
        if not os.path.isabs(path):
            path = os.path.join(self.session.cwd, path)
        return os.path.normpath(path)

    def wire_path(self, absolute: str, as_typed: str) -> str:
        # overview.mdx#argument-requirements: "All file paths in the protocol **MUST** be absolute."
        if DEV == "relative_path_in_fs":
            return as_typed
        return absolute

    def within_roots(self, path: str) -> bool:
        # session-setup.mdx#working-directory: "This root set **SHOULD** serve as a boundary for
        # tool operations on the file system."
        real = os.path.realpath(path)
        for root in self.session.roots():
            root_real = os.path.realpath(root)
            try:
                if os.path.commonpath([real, root_real]) == root_real:
                    return True
            except ValueError:
                continue
        return False

    # -- capability checks --------------------------------------------------

    def _fs_flag(self, name: str):
        fs = self.caps().get("fs")
        return fs.get(name) if isinstance(fs, dict) else None

    def can_read_via_client(self) -> bool:
        flag = self._fs_flag("readTextFile")
        # file-system.mdx#checking-support: "If `readTextFile` or `writeTextFile` is `false` or
        # not present, the Agent **MUST NOT** attempt to call the corresponding filesystem method."
        allowed = flag is True
        if DEV == "fs_read_when_false" and flag is False:
            allowed = True
        # initialization.mdx#capabilities: "Clients and Agents **MUST** treat all capabilities
        # omitted in the `initialize` request as **UNSUPPORTED**."
        if DEV == "fs_read_when_absent" and flag is None:
            allowed = True
        return allowed

    def can_write_via_client(self) -> bool:
        # file-system.mdx#checking-support (same sentence as above, for writeTextFile)
        allowed = self._fs_flag("writeTextFile") is True
        if DEV == "fs_write_without_cap":
            allowed = True
        return allowed

    def can_use_terminal(self) -> bool:
        # terminals.mdx#checking-support: "If `terminal` is `false` or not present, the Agent
        # **MUST NOT** attempt to call any terminal methods."
        allowed = self.caps().get("terminal") is True
        if DEV == "terminal_without_cap":
            allowed = True
        return allowed

    def can_elicit_form(self) -> bool:
        elicitation = self.caps().get("elicitation")
        # elicitation.mdx#checking-support: "Agents **MUST NOT** request a mode the Client has
        # not advertised."  Form support exists only when `form` is present and non-null.
        allowed = isinstance(elicitation, dict) and isinstance(elicitation.get("form"), dict)
        if DEV == "elicitation_unadvertised":
            allowed = True
        return allowed

    # -- the turn -----------------------------------------------------------

    def run(self) -> None:
        stop = "end_turn"
        error = None
        try:
            stop = self._run()
        except Exception as exc:  # never let the turn die without a response
            log("turn failed:", exc)
            traceback.print_exc(file=sys.stderr)
            error = exc
        self.finish(stop, error)

    def _run(self) -> str:
        s = self.session
        text = "\n".join(b.get("text", "") for b in self.blocks if b.get("type") == "text")
        self.record_user_message()
        if not s.commands_sent:
            s.commands_sent = True
            # slash-commands.mdx: the Agent MAY send `available_commands_update`.
            self.update({"sessionUpdate": "available_commands_update",
                         "availableCommands": AVAILABLE_COMMANDS})
        if s.title is None:
            s.title = (text.strip().splitlines() or ["Untitled session"])[0][:60] or "Untitled session"
            self.update({"sessionUpdate": "session_info_update", "title": s.title, "updatedAt": now_iso()})

        actions, self.explicit_permission = parse_prompt(text)
        log(f"session {s.id}: actions {actions} permission={self.explicit_permission}")
        if not actions:
            self.default_reply(text)
            return "end_turn"
        for action in actions:
            if self.is_cancelled():
                break
            handler = getattr(self, "do_" + action.kind)
            outcome = handler(action)
            if outcome:
                return outcome
        self.acknowledge_attachments()
        return "end_turn"

    def finish(self, stop: str, error: Exception | None) -> None:
        agent = self.agent
        cancelled = self.is_cancelled()
        response_error = None
        if cancelled:
            # prompt-turn.mdx#cancellation: "After all ongoing operations have been successfully
            # aborted and pending updates have been sent, the Agent **MUST** respond to the
            # original `session/prompt` request with the `cancelled` stop reason."  And: "Agents
            # **MUST** catch these errors and return the semantically meaningful `cancelled`
            # stop reason" -- so exceptions during a cancelled turn still end as `cancelled`.
            stop = "cancelled"
            if DEV == "cancel_end_turn":
                stop = "end_turn"
            if DEV == "cancel_error_response":
                response_error = (REQUEST_CANCELLED, "Request cancelled")
        elif error is not None:
            response_error = (INTERNAL_ERROR, "Internal error")
        elif stop == "error":
            response_error = (INTERNAL_ERROR, "Internal error (requested by the prompt)")
        if stop == "refusal":
            # StopReason.refusal: "The user prompt and everything that comes after it won't be
            # included in the next prompt" -- forget this turn.
            del self.session.history[self.history_mark:]
        with agent.lock:
            self.responded = True
            if self.session.turn is self:
                self.session.turn = None
            agent.turns_by_request.pop(agent.request_key(self.rid), None)
        self.session.updated_at = now_iso()
        agent.persist(self.session)
        if response_error is not None:
            agent.send_error(self.rid, response_error[0], response_error[1])
        else:
            result = {"stopReason": stop}
            # extensibility.mdx: "Implementations **MUST NOT** add any custom fields at the root
            # of a type that's part of the specification."
            if DEV == "custom_root_field":
                result["elapsedMs"] = int((time.monotonic() - self.started) * 1000)
            agent.reply(self.rid, result)
        self.done.set()
        # prompt-turn.mdx#4-check-for-completion: "If there are no pending tool calls, the turn
        # ends and the Agent **MUST** respond to the original `session/prompt` request" -- the
        # response is the last message of the turn; nothing for this turn follows it.
        if DEV == "update_after_response" and not cancelled:
            agent.send_update(self.session, {
                "sessionUpdate": "agent_message_chunk", "messageId": new_message_id(),
                "content": {"type": "text", "text": "(one more thing after the response)"}},
                self, after_response=True)
        # prompt-turn.mdx#cancellation: "...but it **MUST** ensure that it does so before
        # responding to the `session/prompt` request."
        if DEV == "update_after_cancel_response" and cancelled:
            if self.current_tool:
                update = {"sessionUpdate": "tool_call_update", "toolCallId": self.current_tool,
                          "status": "failed"}
            else:
                update = {"sessionUpdate": "agent_message_chunk", "messageId": new_message_id(),
                          "content": {"type": "text", "text": "(cancelled)"}}
            agent.send_update(self.session, update, self, after_response=True)

    def record_user_message(self) -> None:
        message_id = new_message_id("msg_user")
        for block in self.blocks:
            self.session.history.append({"sessionUpdate": "user_message_chunk", "messageId": message_id,
                                         "content": block})

    def describe_attachments(self) -> list[str]:
        notes = []
        for block in self.blocks:
            kind = block.get("type")
            if kind == "image":
                notes.append(f"an image ({block.get('mimeType')}, {len(block.get('data', ''))} base64 chars)")
            elif kind == "audio":
                notes.append(f"an audio clip ({block.get('mimeType')}, {len(block.get('data', ''))} base64 chars)")
            elif kind == "resource_link":
                notes.append(f"a link to {block.get('uri')} ({block.get('name')})")
            elif kind == "resource":
                res = block.get("resource") or {}
                size = len(res.get("text", "")) if "text" in res else len(res.get("blob", ""))
                notes.append(f"embedded context from {res.get('uri')} ({size} characters)")
        return notes

    def acknowledge_attachments(self) -> None:
        notes = self.describe_attachments()
        if notes:
            self.say("I also received " + "; ".join(notes) + ".")

    def default_reply(self, text: str) -> None:
        notes = self.describe_attachments()
        reply = "Hello! I am a deterministic fake ACP agent."
        if text.strip():
            reply += f" You said: {text.strip()}"
        if notes:
            reply += " I received " + "; ".join(notes) + "."
        self.say(reply)

    # -- actions --------------------------------------------------------------

    def do_unknown_command(self, action: Action):
        self.say(f"Unknown command /{action.args['name']}. Try /read, /write, /run, /plan or /think.")

    def do_think(self, action: Action):
        self.say("Let me think about what was asked, and which tools I need.", kind="agent_thought_chunk")

    def do_plan(self, action: Action):
        priorities = ("high", "medium", "low")
        entries = [{"content": step, "priority": priorities[min(i, 2)], "status": "pending"}
                   for i, step in enumerate(action.args["steps"])]
        # schema $defs.PlanEntryPriority: high | medium | low
        if DEV == "plan_invalid_priority":
            entries[0]["priority"] = "urgent"
        self.update({"sessionUpdate": "plan", "entries": [dict(e) for e in entries]})
        for entry in entries:
            for status in ("in_progress", "completed"):
                if self.is_cancelled():
                    return None
                time.sleep(0.02)
                # schema $defs.PlanEntryStatus: pending | in_progress | completed
                if status == "completed" and DEV == "plan_invalid_status":
                    status = "done"
                entry["status"] = status
                # agent-plan.mdx#updating-plans: "The Agent **MUST** send a complete list of all
                # plan entries in each update and their current status."
                if DEV == "plan_partial_update":
                    self.update({"sessionUpdate": "plan", "entries": [dict(entry)]})
                else:
                    self.update({"sessionUpdate": "plan", "entries": [dict(e) for e in entries]})
        self.say(f"The plan is done: {len(entries)} step(s) completed.")
        return None

    def do_long(self, action: Action):
        chunks = max(10, min(100, action.args["words"] // 40))
        message_id = new_message_id()
        for i in range(chunks):
            if self.is_cancelled():
                return None
            self.update({"sessionUpdate": "agent_message_chunk", "messageId": message_id,
                         "content": {"type": "text",
                                     "text": f"Part {i + 1} of a long answer: each stage transforms "
                                             f"the input a little further. "}})
            self.cancelled.wait(0.1)
        return None

    def do_wait(self, action: Action):
        seconds = max(0.0, min(120.0, action.args["seconds"]))
        self.cancelled.wait(seconds)
        if not self.is_cancelled():
            self.say(f"I waited {seconds:g} second(s).")
        return None

    def do_stop(self, action: Action):
        reason = action.args["reason"]
        if reason == "refusal":
            self.say("I refuse to continue with this request.")
        else:
            self.say(f"Stopping early ({reason}).")
        return reason

    def do_error(self, action: Action):
        return "error"

    def do_usage(self, action: Action):
        used = sum(len(str(e.get("content", {}).get("text", "")).split()) for e in self.session.history)
        self.update({"sessionUpdate": "usage_update", "used": used, "size": 200000,
                     "cost": {"amount": 0.0, "currency": "USD"}})
        return None

    def do_mode(self, action: Action):
        mode = action.args["mode"]
        if mode not in [m["id"] for m in MODES]:
            self.say(f"There is no {mode!r} mode; the modes are " + ", ".join(m["id"] for m in MODES) + ".")
            return None
        self.session.mode_id = mode
        # schema $defs.CurrentModeUpdate: required property `currentModeId`.
        if DEV == "mode_update_modeId":
            self.update({"sessionUpdate": "current_mode_update", "modeId": mode})
        else:
            self.update({"sessionUpdate": "current_mode_update", "currentModeId": mode})
        # session-config-options.mdx: Agents "**SHOULD** keep both in sync".
        self.update({"sessionUpdate": "config_option_update",
                     "configOptions": self.agent.config_options(self.session)})
        self.say(f"Switched to {mode} mode.")
        return None

    def do_mcp_list(self, action: Action):
        if not self.session.mcp:
            self.say("No MCP servers are connected to this session.")
            return None
        lines = []
        for conn in self.session.mcp:
            names = ", ".join(t["name"] for t in conn.tools) or "no tools"
            lines.append(f"{conn.name} ({conn.status}): {names}")
        self.say("MCP tools: " + "; ".join(lines))
        return None

    def do_mcp_call(self, action: Action):
        name = action.args["name"]
        conn = next((c for c in self.session.mcp if any(t["name"] == name for t in c.tools)), None)
        tool_id = self.new_tool_call_id()
        self.announce(tool_id, f"MCP tool {name}", "other", rawInput={"name": name,
                                                                      "arguments": action.args["arguments"]})
        if self.explicit_permission:
            decision = self.request_permission(tool_id, f"MCP tool {name}", "other")
            if decision == "cancelled":
                return None
            if decision == "reject":
                self.fail_tool(tool_id, "Permission denied.")
                return None
        if conn is None:
            self.fail_tool(tool_id, f"No connected MCP server offers a tool named {name!r}.")
            self.say(f"I could not find an MCP tool named {name!r}.")
            return None
        self.tool_update(tool_id, status="in_progress")
        try:
            response = conn.call_tool(name, action.args["arguments"])
        except McpFailure as exc:
            self.fail_tool(tool_id, str(exc))
            self.say(f"The MCP tool {name} failed: {exc}")
            return None
        result = response.get("result") if isinstance(response.get("result"), dict) else None
        if result is None:
            self.fail_tool(tool_id, f"MCP error: {response.get('error')!r}")
            return None
        texts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)
                 and c.get("type") == "text"]
        output = "\n".join(texts)
        status = "failed" if result.get("isError") else "completed"
        self.tool_update(tool_id, status=status, rawOutput=result,
                         content=[{"type": "content", "content": {"type": "text", "text": output}}])
        self.say(f"The MCP tool {name} returned: {output}")
        return None

    def do_elicit(self, action: Action):
        if not self.can_elicit_form():
            self.say("Which of the two options would you prefer: Option A or Option B? "
                     "(Your client did not advertise form elicitation, so I am asking here.)")
            return None
        result, error = self.call_client("elicitation/create", {
            "sessionId": self.session.id,
            "mode": "form",
            "message": "Which of the two options do you prefer?",
            "requestedSchema": {
                "type": "object",
                "properties": {"choice": {"type": "string", "title": "Option",
                                          "enum": ["Option A", "Option B"]}},
                "required": ["choice"],
            },
        })
        if self.is_cancelled():
            return None
        # elicitation.mdx: "Agents **MUST NOT** assume an elicitation succeeds."
        if error is None and isinstance(result, dict) and result.get("action") == "accept":
            content = result.get("content") if isinstance(result.get("content"), dict) else {}
            choice = content.get("choice")
            if choice in ("Option A", "Option B"):
                self.say(f"You chose {choice}.")
                return None
        self.say("No option was chosen, so I will continue with Option A.")
        return None

    def do_read(self, action: Action):
        as_typed = action.args["path"]
        path = self.resolve_path(as_typed)
        line, limit = action.args["line"], action.args["limit"]
        tool_id = self.new_tool_call_id()
        title = f"Read {path}" + (f" from line {line}" if line else "")
        location = {"path": path}
        if line:
            location["line"] = line
        raw_input = {"path": path}
        if line:
            raw_input["line"] = line
        if limit:
            raw_input["limit"] = limit
        self.announce(tool_id, title, "read", locations=[location], rawInput=raw_input)
        if not self.within_roots(path):
            self.fail_tool(tool_id, f"{path} is outside the session's roots.")
            self.say(f"I did not read {path}: it is outside the session's working directories.")
            return None
        if self.needs_permission("read"):
            decision = self.request_permission(tool_id, title, "read")
            if decision == "cancelled":
                return None
            if decision == "reject":
                self.fail_tool(tool_id, "Permission denied: the file was not read.")
                self.say(f"I did not read {path} because permission was rejected.")
                return None
        if self.is_cancelled():
            return None
        self.tool_update(tool_id, status="in_progress")
        text, problem = self.read_file(path, as_typed, line, limit)
        if self.is_cancelled():
            return None
        if problem is not None:
            self.fail_tool(tool_id, problem)
            self.say(f"I could not read {path}: {problem}")
            return None
        self.tool_update(tool_id, status="completed", rawOutput={"content": text},
                         content=[{"type": "content", "content": {"type": "text", "text": text}}])
        lines = text.splitlines()
        first = lines[0] if lines else ""
        self.say(f"{os.path.basename(path)} has {len(lines)} line(s) and {len(text.split())} word(s)."
                 + (f" It starts with: {first}" if first else " It is empty."))
        return None

    def read_file(self, path: str, as_typed: str, line: int | None, limit: int | None):
        if self.can_read_via_client():
            params = {"sessionId": self.session.id, "path": self.wire_path(path, as_typed)}
            # schema ReadTextFileRequest.sessionId: "The session ID for this request."
            if DEV == "fs_read_stale_session":
                if getattr(self.agent, "fs_read_session", None) is None:
                    self.agent.fs_read_session = self.session.id
                params["sessionId"] = self.agent.fs_read_session
            # overview.mdx#argument-requirements: "Line numbers are 1-based"; file-system.mdx:
            # `line` is the "Optional line number to start reading from (1-based)".
            if DEV == "zero_based_line":
                params["line"] = (line or 1) - 1
            elif line:
                params["line"] = line
            if limit:
                params["limit"] = limit
            result, error = self.call_client("fs/read_text_file", params)
            if error is not None:
                return None, f"the client returned an error: {error.get('message')!r}"
            if not isinstance(result, dict) or not isinstance(result.get("content"), str):
                return None, "the client returned no content"
            return result["content"], None
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                data = fh.read(8 * 1024 * 1024)
        except OSError as exc:
            return None, exc.strerror or str(exc)
        if line or limit:
            rows = data.splitlines(keepends=True)
            start = (line or 1) - 1
            rows = rows[start:start + limit] if limit else rows[start:]
            data = "".join(rows)
        return data, None

    def write_file(self, path: str, as_typed: str, content: str):
        if self.can_write_via_client():
            result, error = self.call_client("fs/write_text_file", {
                "sessionId": self.session.id, "path": self.wire_path(path, as_typed), "content": content})
            if error is not None:
                return f"the client returned an error: {error.get('message')!r}"
            return None
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
        except OSError as exc:
            return exc.strerror or str(exc)
        return None

    def do_write(self, action: Action):
        as_typed = action.args["path"]
        path = self.resolve_path(as_typed)
        tool_id = self.new_tool_call_id()
        title = f"Write {path}"
        old_text = None
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    old_text = fh.read(8 * 1024 * 1024)
            except OSError:
                old_text = None
        new_text = action.args["content"]
        replace = action.args.get("replace")
        if new_text is None and replace:
            base = old_text
            if self.can_read_via_client():
                base, _ = self.read_file(path, as_typed, None, None)
            new_text = (base or "").replace(replace[0], replace[1])
            old_text = base if base is not None else old_text
        self.announce(tool_id, title, "edit", locations=[{"path": path}],
                      rawInput={"path": path, "content": new_text},
                      content=[{"type": "diff", "path": path, "oldText": old_text, "newText": new_text}])
        if not self.within_roots(path):
            self.fail_tool(tool_id, f"{path} is outside the session's roots.")
            self.say(f"I did not write {path}: it is outside the session's working directories.")
            return None
        if self.needs_permission("edit"):
            decision = self.request_permission(tool_id, title, "edit")
            if decision == "cancelled" and DEV == "tool_runs_after_cancel":
                # prompt-turn.mdx#cancellation: "When the Agent receives this notification, it
                # **SHOULD** stop all language model requests and all tool call invocations as
                # soon as possible."
                decision = "allow"
            if decision == "cancelled":
                return None
            # tool-calls.mdx#permission-options: "`reject_once` - Reject this operation only this
            # time" / "`reject_always` - Reject this operation and remember the choice".
            if decision == "reject" and DEV != "write_after_reject":
                self.fail_tool(tool_id, "Permission denied: the file was not written.")
                self.say(f"I did not write {path} because permission was rejected.")
                return None
        if self.is_cancelled() and DEV != "tool_runs_after_cancel":
            return None
        self.tool_update(tool_id, status="in_progress")
        problem = self.write_file(path, as_typed, new_text)
        if problem is not None:
            self.fail_tool(tool_id, problem)
            self.say(f"I could not write {path}: {problem}")
            return None
        self.tool_update(tool_id, status="completed",
                         content=[{"type": "diff", "path": path, "oldText": old_text, "newText": new_text}])
        self.say(f"I wrote {len(new_text.encode('utf-8'))} byte(s) to {path}.")
        return None

    def do_run(self, action: Action):
        command = action.args["command"]
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
        if not argv:
            return None
        tool_id = self.new_tool_call_id()
        title = f"Run `{command}`"
        self.announce(tool_id, title, "execute",
                      rawInput={"command": argv[0], "args": argv[1:], "cwd": self.session.cwd})
        if self.needs_permission("execute"):
            decision = self.request_permission(tool_id, title, "execute")
            if decision == "cancelled":
                return None
            if decision == "reject":
                self.fail_tool(tool_id, "Permission denied: the command was not run.")
                self.say(f"I did not run `{command}` because permission was rejected.")
                return None
        if self.is_cancelled():
            return None
        timeout = action.args.get("timeout") or TERMINAL_TIMEOUT
        if self.can_use_terminal():
            self.run_in_client_terminal(tool_id, command, argv, timeout)
        else:
            self.run_locally(tool_id, command, argv, min(timeout, LOCAL_COMMAND_TIMEOUT))
        return None

    def run_in_client_terminal(self, tool_id: str, command: str, argv: list[str], timeout: float):
        sid = self.session.id
        result, error = self.call_client("terminal/create", {
            "sessionId": sid, "command": argv[0], "args": argv[1:], "cwd": self.session.cwd,
            "outputByteLimit": OUTPUT_LIMIT})
        if self.is_cancelled() and error is None and isinstance(result, dict) \
                and isinstance(result.get("terminalId"), str):
            self.release_terminal(result["terminalId"])
            return
        if error is not None or not isinstance(result, dict) or not isinstance(result.get("terminalId"), str):
            if not self.is_cancelled():
                self.fail_tool(tool_id, f"terminal/create failed: {error!r}")
                self.say(f"I could not start `{command}` in a terminal.")
            return
        terminal_id = result["terminalId"]
        embed = [{"type": "terminal", "terminalId": terminal_id}]
        # schema $defs.ToolCallContent (terminal): "The terminal must be added before calling
        # `terminal/release`."
        if DEV == "terminal_embedded_after_release":
            self.tool_update(tool_id, status="in_progress")
        else:
            self.tool_update(tool_id, status="in_progress", content=embed)

        # terminals.mdx#building-a-timeout: wait for exit concurrently with a timer; on expiry
        # kill, read the final output, then release.
        waiter = self.agent.peer.request("terminal/wait_for_exit", {"sessionId": sid, "terminalId": terminal_id})
        timer_end = time.monotonic() + timeout
        hard_end = timer_end + CLIENT_REQUEST_TIMEOUT
        kill_deadline = None
        timed_out = False
        while not waiter.event.wait(0.02):
            now = time.monotonic()
            if kill_deadline is None and (self.is_cancelled() or now >= timer_end):
                timed_out = not self.is_cancelled()
                self.agent.peer.request("terminal/kill", {"sessionId": sid, "terminalId": terminal_id})
                kill_deadline = now + CANCEL_GRACE
            if (kill_deadline is not None and now >= kill_deadline) or now >= hard_end:
                break
        exit_status = None
        if waiter.response is not None and isinstance(waiter.response.get("result"), dict):
            exit_status = waiter.response["result"]
        output = ""
        truncated = False
        if not self.is_cancelled():
            out, out_error = self.call_client("terminal/output", {"sessionId": sid, "terminalId": terminal_id})
            if out_error is None and isinstance(out, dict):
                output = out.get("output") if isinstance(out.get("output"), str) else ""
                truncated = bool(out.get("truncated"))
                if exit_status is None and isinstance(out.get("exitStatus"), dict):
                    exit_status = out["exitStatus"]
        self.release_terminal(terminal_id)
        # schema (terminal/release): "After release, the `TerminalId` can no longer be used with
        # other `terminal/*` methods"
        if DEV == "terminal_output_after_release" and not self.is_cancelled():
            self.call_client("terminal/output", {"sessionId": sid, "terminalId": terminal_id})
        if DEV == "terminal_embedded_after_release":
            self.tool_update(tool_id, content=embed)
        if self.is_cancelled():
            return
        exit_code = exit_status.get("exitCode") if isinstance(exit_status, dict) else None
        signal_name = exit_status.get("signal") if isinstance(exit_status, dict) else None
        status = "completed" if exit_code == 0 and not timed_out else "failed"
        self.tool_update(tool_id, status=status, rawOutput={
            "exitCode": exit_code, "signal": signal_name, "output": output, "truncated": truncated,
            "timedOut": timed_out})
        summary = f"`{command}` exited with code {exit_code}" if exit_code is not None \
            else f"`{command}` ended (signal {signal_name})"
        if timed_out:
            summary += f" after being killed at the {timeout:g}s timeout"
        self.say(summary + (f". Output:\n{output}" if output else ". It printed nothing."))

    def release_terminal(self, terminal_id: str) -> None:
        # terminals.mdx: "The Agent **MUST** release the terminal using `terminal/release` when
        # it's no longer needed."
        if DEV == "terminal_not_released":
            return
        self.call_client("terminal/release", {"sessionId": self.session.id, "terminalId": terminal_id})

    def run_locally(self, tool_id: str, command: str, argv: list[str], timeout: float):
        self.tool_update(tool_id, status="in_progress")
        cwd = self.session.cwd if os.path.isdir(self.session.cwd) else None
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except (OSError, ValueError) as exc:
            self.fail_tool(tool_id, f"cannot run {argv[0]!r}: {exc}")
            self.say(f"I could not run `{command}`: {exc}")
            return
        self.agent.track_process(proc)
        collected = bytearray()

        def pump():
            try:
                while True:
                    chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
                    if not chunk:
                        break
                    if len(collected) < OUTPUT_LIMIT:
                        collected.extend(chunk[:OUTPUT_LIMIT - len(collected)])
            except Exception:
                pass

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        timed_out = False
        while proc.poll() is None:
            if self.is_cancelled() or time.monotonic() >= deadline:
                timed_out = not self.is_cancelled()
                self.agent.kill_process(proc)
                break
            time.sleep(0.02)
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.agent.kill_process(proc)
        reader.join(timeout=1.0)
        self.agent.untrack_process(proc)
        if self.is_cancelled():
            return
        output = collected.decode("utf-8", errors="replace")
        code = proc.returncode
        status = "completed" if code == 0 and not timed_out else "failed"
        self.tool_update(tool_id, status=status, rawOutput={"exitCode": code, "output": output,
                                                            "timedOut": timed_out},
                         content=[{"type": "content", "content": {"type": "text", "text": output}}])
        self.say(f"`{command}` exited with code {code}" + (f". Output:\n{output}" if output else
                                                             ". It printed nothing."))


# ---------------------------------------------------------------------------
# The agent: dispatch of client messages
# ---------------------------------------------------------------------------

class Agent:
    def __init__(self, state_dir: str | None):
        self.wire = Wire()
        self.peer = Peer(self.wire)
        self.lock = threading.RLock()
        self.client_caps: dict = {}
        self.initialized = False
        self.sessions: dict[str, Session] = {}
        self.session_order: list[str] = []
        self.turns_by_request: dict[str, Turn] = {}
        self.processes: set = set()
        self.store = Store(state_dir) if state_dir else None
        self.shutting_down = False
        if self.store:
            for s in self.store.load_all():
                self.sessions[s.id] = s
                self.session_order.append(s.id)

    # -- output helpers -----------------------------------------------------

    def echo_id(self, rid):
        # schema $defs.RequestId: "The Server MUST reply with the same value in the Response
        # object if included."
        if DEV == "string_id_as_number" and isinstance(rid, str):
            return int(rid) if rid.isdigit() else zlib.crc32(rid.encode("utf-8")) & 0x7FFFFFFF
        if DEV == "negative_id_positive" and isinstance(rid, int) and not isinstance(rid, bool) \
                and rid < 0:
            return -rid
        return rid

    def reply(self, rid, result, pretty: bool = False) -> None:
        self.wire.write({"jsonrpc": "2.0", "id": self.echo_id(rid), "result": result}, pretty=pretty)

    def send_error(self, rid, code: int, message: str, data=None) -> None:
        original = code
        # schema $defs.ErrorCode: "**Invalid params**: Invalid method parameter(s)." (-32602)
        if code == INVALID_PARAMS and DEV == "invalid_params_wrong_code":
            code = INTERNAL_ERROR
        error = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.wire.write({"jsonrpc": "2.0", "id": self.echo_id(rid), "error": error})
        # JSON-RPC 2.0 #response_object: "When a rpc call is made, the Server MUST reply with a
        # Response, except for in the case of Notifications." -- so keep serving.
        if original == INVALID_PARAMS and DEV == "exit_on_invalid_params":
            self.shutdown(1)

    def send_update(self, session: Session, update: dict, turn: Turn | None = None,
                    record: bool = True, after_response: bool = False) -> None:
        if turn is not None and turn.responded and not after_response:
            log("dropping a session/update for a turn that already ended")
            return
        sid = session.id
        # schema $defs.SessionNotification: sessionId is "The ID of the session this update
        # pertains to."
        if DEV == "update_wrong_session":
            others = [x for x in self.session_order if x != sid and x in self.sessions
                      and self.sessions[x].active]
            if others:
                sid = others[-1]
        self.peer.notify("session/update", {"sessionId": sid, "update": update})
        if record and turn is not None and update.get("sessionUpdate") in HISTORY_KINDS:
            session.history.append(update)

    def persist(self, session: Session) -> None:
        if self.store is not None and session.id in self.sessions:
            self.store.save(session)

    @staticmethod
    def request_key(rid) -> str:
        return json.dumps(rid, sort_keys=True)

    # -- processes ------------------------------------------------------------

    def track_process(self, proc) -> None:
        with self.lock:
            self.processes.add(proc)

    def untrack_process(self, proc) -> None:
        with self.lock:
            self.processes.discard(proc)

    @staticmethod
    def kill_process(proc) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                return
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError, OSError):
                try:
                    proc.send_signal(sig)
                except Exception:
                    pass
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                continue

    def shutdown(self, code: int = 0) -> None:
        if self.shutting_down:
            os._exit(code)
        self.shutting_down = True
        for session in list(self.sessions.values()):
            for conn in session.mcp:
                try:
                    conn.close()
                except Exception:
                    pass
            session.mcp = []
        for proc in list(self.processes):
            self.kill_process(proc)
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)

    # -- input loop -----------------------------------------------------------

    def serve(self) -> None:
        stdin = sys.stdin.buffer
        while True:
            try:
                line = stdin.readline(MAX_LINE)
            except (OSError, ValueError):
                break
            if not line:
                break  # stdin closed: exit
            if len(line) >= MAX_LINE and not line.endswith(b"\n"):
                while True:  # discard the rest of an oversized line
                    more = stdin.readline(MAX_LINE)
                    if not more or more.endswith(b"\n"):
                        break
                self.parse_error("line too long")
                continue
            try:
                self.handle_line(line)
            except Exception as exc:  # keep serving whatever happens
                log("error while handling a line:", exc)
                traceback.print_exc(file=sys.stderr)
        log("stdin closed; exiting")
        self.shutdown(0)

    def parse_error(self, detail: str) -> None:
        # JSON-RPC 2.0 #response_object: "If there was an error in detecting the id in the
        # Request object (e.g. Parse error/Invalid Request), it MUST be Null."
        rid = 0 if DEV == "parse_error_nonnull_id" else None
        self.send_error(rid, PARSE_ERROR, "Parse error", {"detail": detail})
        # JSON-RPC 2.0: the Server MUST reply to every later call, so keep serving.
        if DEV == "exit_on_parse_error":
            self.shutdown(1)

    def handle_line(self, line: bytes) -> None:
        raw = line.strip()
        if not raw:
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.parse_error("the line is not valid UTF-8")
            return

        def reject_constant(name):
            raise ValueError(f"{name} is not JSON")

        try:
            msg = json.loads(text, parse_constant=reject_constant)
        except (ValueError, RecursionError) as exc:
            self.parse_error(str(exc)[:200])
            return
        self.dispatch(msg)

    def dispatch(self, msg) -> None:
        if isinstance(msg, list):
            # transports.mdx#stdio: "Messages are individual JSON-RPC requests, notifications, or
            # responses." -- batches are not ACP messages.
            self.send_error(None, INVALID_REQUEST, "Invalid Request",
                            {"detail": "batches are not supported by ACP v1"})
            return
        if not isinstance(msg, dict):
            self.send_error(None, INVALID_REQUEST, "Invalid Request", {"detail": "not a JSON object"})
            return
        if "method" not in msg:
            if "id" in msg and ("result" in msg or "error" in msg):
                self.peer.on_response(msg)
                return
            rid = msg.get("id") if is_valid_id(msg.get("id")) else None
            self.send_error(rid, INVALID_REQUEST, "Invalid Request",
                            {"detail": "neither a request, a notification nor a response"})
            return
        is_request = "id" in msg
        rid = msg.get("id")
        if is_request and not is_valid_id(rid):
            self.send_error(None, INVALID_REQUEST, "Invalid Request", {"detail": "invalid id"})
            return
        method = msg.get("method")
        if msg.get("jsonrpc") != "2.0" or not isinstance(method, str):
            self.send_error(rid if is_request else None, INVALID_REQUEST, "Invalid Request",
                            {"detail": 'jsonrpc must be "2.0" and method a string'})
            return
        params = msg.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            if is_request:
                self.send_error(rid, INVALID_REQUEST, "Invalid Request",
                                {"detail": "params must be an object or an array"})
            return
        if not is_request:
            self.handle_notification(method, params)
            return
        self.handle_request(rid, method, params)

    # -- notifications ----------------------------------------------------------

    def handle_notification(self, method: str, params) -> None:
        # overview.mdx#error-handling: "Notifications never receive responses (success or error)"
        if DEV == "answer_notification":
            self.wire.write({"jsonrpc": "2.0", "id": None, "result": None})
        params = params if isinstance(params, dict) else {}
        if method == "session/cancel":
            session = self.sessions.get(params.get("sessionId")) if isinstance(params.get("sessionId"), str) else None
            turn = session.turn if session else None
            # schema CancelNotification.sessionId: "The ID of the session to cancel operations for."
            if DEV == "cancel_wrong_session" and turn is not None:
                with self.lock:
                    others = [t for t in self.turns_by_request.values()
                              if t.session is not session and not t.responded]
                if others:
                    turn = max(others, key=lambda t: t.started)
            if turn is not None:
                log(f"cancelling the turn of {turn.session.id}")
                turn.cancel()
            return
        if method == "$/cancel_request":
            # cancellation.mdx: the receiver "**MUST** send one of these responses for the
            # original request" -- a cancelled prompt answers with stopReason `cancelled`.
            with self.lock:
                turn = self.turns_by_request.get(self.request_key(params.get("requestId")))
            if turn is not None:
                turn.cancel()
            return
        # extensibility.mdx: "implementations **SHOULD** ignore unrecognized notifications."
        log("ignoring notification", method)

    # -- requests ---------------------------------------------------------------

    def handle_request(self, rid, method: str, params) -> None:
        handlers = {
            "initialize": self.on_initialize,
            "authenticate": self.on_authenticate,
            "session/new": self.on_session_new,
            "session/load": self.on_session_load,
            "session/resume": self.on_session_resume,
            "session/close": self.on_session_close,
            "session/list": self.on_session_list,
            "session/delete": self.on_session_delete,
            "session/set_mode": self.on_set_mode,
            "session/set_config_option": self.on_set_config_option,
            "session/prompt": self.on_prompt,
        }
        handler = handlers.get(method)
        if handler is None:
            # extensibility.mdx#custom-requests: "Upon receiving a custom request,
            # implementations **MUST** respond accordingly with the provided `id`"
            if DEV == "custom_request_no_response" and method.startswith("_"):
                return
            # extensibility.mdx: "If the receiving end doesn't recognize the custom method name,
            # it should respond with the standard "Method not found" error"
            code = INVALID_REQUEST if DEV == "wrong_unknown_method_code" else METHOD_NOT_FOUND
            self.send_error(rid, code, "Method not found", {"method": method})
            return
        if isinstance(params, list):
            self.send_error(rid, INVALID_PARAMS, "Invalid params", {"detail": "params must be an object"})
            return
        try:
            handler(rid, params or {})
        except RpcError as exc:
            self.send_error(rid, exc.code, exc.message, exc.data)
        except Exception as exc:
            log("internal error:", exc)
            traceback.print_exc(file=sys.stderr)
            self.send_error(rid, INTERNAL_ERROR, "Internal error", {"detail": str(exc)[:200]})

    # params helpers
    @staticmethod
    def req_str(params: dict, key: str) -> str:
        value = params.get(key)
        if not isinstance(value, str) or not value:
            raise invalid_params(f"'{key}' must be a non-empty string")
        return value

    def req_abs_path(self, params: dict, key: str) -> str:
        value = self.req_str(params, key)
        # session-setup.mdx#working-directory: cwd "**MUST** be an absolute path"
        if not os.path.isabs(value):
            raise invalid_params(f"'{key}' must be an absolute path")
        return os.path.normpath(value)

    def additional_dirs(self, params: dict) -> list[str]:
        value = params.get("additionalDirectories")
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid_params("'additionalDirectories' must be an array of strings")
        # session-setup.mdx#additional-workspace-roots: "each `additionalDirectories` entry
        # **MUST** be an absolute path"
        for v in value:
            if not os.path.isabs(v):
                raise invalid_params("each additionalDirectories entry must be an absolute path")
        return [os.path.normpath(v) for v in value]

    def mcp_specs(self, params: dict, required: bool) -> list[dict]:
        servers = params.get("mcpServers")
        if servers is None and not required:
            return []
        if not isinstance(servers, list):
            raise invalid_params("'mcpServers' must be an array")
        specs = []
        for entry in servers:
            if not isinstance(entry, dict):
                raise invalid_params("each mcpServers entry must be an object")
            kind = entry.get("type")
            if kind in ("http", "sse"):
                # mcpCapabilities.http/sse are false: the client should not send these.  They are
                # skipped (not connected) rather than failing the session.
                log(f"skipping unsupported {kind} MCP server {entry.get('name')!r}")
                continue
            if kind not in (None, "stdio"):
                log(f"skipping MCP server of unknown type {kind!r}")
                continue
            name, command = entry.get("name"), entry.get("command")
            if not isinstance(name, str) or not isinstance(command, str) or not command:
                raise invalid_params("a stdio MCP server needs string 'name' and 'command'")
            args = entry.get("args") if entry.get("args") is not None else []
            env = entry.get("env") if entry.get("env") is not None else []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise invalid_params("MCP server 'args' must be an array of strings")
            if not isinstance(env, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                    and isinstance(e.get("value"), str) for e in env):
                raise invalid_params("MCP server 'env' must be an array of {name, value}")
            specs.append({"name": name, "command": command, "args": args, "env": env})
        # session-setup.mdx#stdio-transport: "All Agents **MUST** support connecting to MCP
        # servers via stdio (standard input/output)."
        if DEV == "reject_stdio_mcp" and specs:
            raise invalid_params("stdio MCP servers are not supported")
        return specs

    def connect_mcp(self, specs: list[dict], cwd: str) -> list[McpConnection]:
        # session-setup.mdx#mcp-servers: "Agents **SHOULD** connect to all MCP servers specified
        # by the Client."
        if DEV == "mcp_not_connected":
            return []
        connections = [McpConnection(spec, cwd) for spec in specs]
        threads = [threading.Thread(target=c.start, args=(MCP_TIMEOUT,), daemon=True) for c in connections]
        for t in threads:
            t.start()
        deadline = time.monotonic() + MCP_TIMEOUT + 2.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return connections

    def get_session(self, sid: str, must_be_active: bool = True) -> Session:
        session = self.sessions.get(sid)
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, "Resource not found", {"detail": f"unknown session {sid!r}"})
        if must_be_active and not session.active:
            raise RpcError(RESOURCE_NOT_FOUND, "Resource not found",
                           {"detail": f"session {sid!r} is not active; load or resume it first"})
        return session

    def run_async(self, fn) -> None:
        threading.Thread(target=fn, daemon=True).start()

    def guarded(self, rid, fn):
        """Wrap fn so that errors raised in a worker thread still answer the request."""
        def runner():
            try:
                fn()
            except RpcError as exc:
                self.send_error(rid, exc.code, exc.message, exc.data)
            except Exception as exc:
                log("internal error:", exc)
                traceback.print_exc(file=sys.stderr)
                self.send_error(rid, INTERNAL_ERROR, "Internal error", {"detail": str(exc)[:200]})
        return runner

    # -- capability views ---------------------------------------------------------

    def boolean_options_allowed(self) -> bool:
        session_caps = self.client_caps.get("session")
        config = session_caps.get("configOptions") if isinstance(session_caps, dict) else None
        return isinstance(config, dict) and isinstance(config.get("boolean"), dict)

    def modes_state(self, session: Session) -> dict:
        return {"currentModeId": session.mode_id, "availableModes": [dict(m) for m in MODES]}

    def config_options(self, session: Session) -> list[dict]:
        options = [
            {"id": "mode", "name": "Session Mode", "description": "Controls when permission is requested",
             "category": "mode", "type": "select", "currentValue": session.mode_id,
             "options": [{"value": m["id"], "name": m["name"], "description": m["description"]} for m in MODES]},
            {"id": "model", "name": "Model", "category": "model", "type": "select",
             "currentValue": session.model, "options": [dict(m) for m in MODELS]},
        ]
        # session-config-options.mdx#boolean-config-options: "Agents **MUST NOT** include
        # `type: "boolean"` options in `configOptions` payloads unless the Client advertised
        # support."
        if self.boolean_options_allowed() or DEV == "boolean_config_unadvertised":
            options.append({"id": "brave_mode", "name": "Brave Mode",
                            "description": "In ask mode, skip the permission requests the mode adds",
                            "type": "boolean", "currentValue": session.brave})
        return options

    def session_setup_result(self, session: Session) -> dict:
        return {"modes": self.modes_state(session), "configOptions": self.config_options(session)}

    # -- handlers -----------------------------------------------------------------

    def on_initialize(self, rid, params: dict) -> None:
        version = params.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= 65535:
            raise invalid_params("'protocolVersion' must be an integer between 0 and 65535")
        caps = params.get("clientCapabilities")
        self.client_caps = caps if isinstance(caps, dict) else {}
        self.initialized = True
        # initialization.mdx#version-negotiation: "If the Agent supports the requested version,
        # it **MUST** respond with the same version. Otherwise, the Agent **MUST** respond with
        # the latest version it supports."
        chosen = version if version in SUPPORTED_PROTOCOL_VERSIONS else max(SUPPORTED_PROTOCOL_VERSIONS)
        if DEV == "echo_unsupported_version":
            chosen = version
        # initialization.mdx#protocol-version: "The protocol versions that appear in the
        # `initialize` requests and responses are a single integer"
        if DEV == "protocol_version_string":
            chosen = str(chosen)
        auth_caps = self.client_caps.get("auth")
        auth_methods = []
        # schema $defs.AuthMethodTerminal: "Agents MUST advertise this method only when the
        # client enabled its terminal authentication capability."
        if (isinstance(auth_caps, dict) and auth_caps.get("terminal") is True) \
                or DEV == "terminal_auth_unadvertised":
            auth_methods.append({"id": "terminal-login", "name": "Log in from a terminal",
                                 "description": "Runs the agent with --login (always succeeds)",
                                 "type": "terminal", "args": ["--login"], "env": {"FAKE_ACP_LOGIN": "1"}})
        result = {
            "protocolVersion": chosen,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {},
                                        "additionalDirectories": {}},
            },
            "authMethods": auth_methods,
            "agentInfo": {"name": AGENT_NAME, "title": AGENT_TITLE, "version": AGENT_VERSION},
        }
        # transports.mdx#stdio: "The agent **MUST NOT** write anything to its `stdout` that is
        # not a valid ACP message."
        if DEV == "stdout_banner":
            self.wire.write_text_line("fake-acp-agent: ready")
        self.reply(rid, result, pretty=(DEV == "pretty_printed_json"))

    def on_authenticate(self, rid, params: dict) -> None:
        method_id = self.req_str(params, "methodId")
        if method_id == "terminal-login":
            # authentication.mdx: "the Client **MUST NOT** send an `authenticate` request for a
            # terminal method."
            raise invalid_params("terminal authentication methods are not used with authenticate")
        raise invalid_params(f"unknown authentication method {method_id!r}")

    def new_session_id(self) -> str:
        # session-setup.mdx#creating-a-session: "The Agent **MUST** respond with a unique
        # [Session ID](#session-id) that identifies this conversation"
        if DEV == "duplicate_session_id":
            return "sess_0000000000000000"
        return "sess_" + uuid.uuid4().hex

    def register(self, session: Session) -> None:
        with self.lock:
            if session.id in self.session_order:
                self.session_order.remove(session.id)
            self.sessions[session.id] = session
            self.session_order.append(session.id)
        self.persist(session)

    def on_session_new(self, rid, params: dict) -> None:
        cwd = self.req_abs_path(params, "cwd")
        directories = self.additional_dirs(params)
        specs = self.mcp_specs(params, required=True)

        def finish():
            session = Session(self.new_session_id(), cwd, directories)
            session.mcp = self.connect_mcp(specs, cwd)
            old = self.sessions.get(session.id)
            if old is not None:  # only possible with duplicate_session_id
                for conn in old.mcp:
                    conn.close()
            self.register(session)
            result = {"sessionId": session.id}
            result.update(self.session_setup_result(session))
            if DEV == "missing_session_id":
                del result["sessionId"]
            self.reply(rid, result)

        if specs:
            self.run_async(self.guarded(rid, finish))
        else:
            finish()

    def replay(self, session: Session) -> None:
        for update in list(session.history):
            self.send_update(session, update, None, record=False)

    def _reopen(self, rid, params: dict, replay: bool, mcp_required: bool) -> None:
        sid = self.req_str(params, "sessionId")
        cwd = self.req_abs_path(params, "cwd")
        directories = self.additional_dirs(params)
        specs = self.mcp_specs(params, required=mcp_required)
        session = self.get_session(sid, must_be_active=False)
        if session.turn is not None:
            raise invalid_params("the session has a prompt turn in progress")
        if cwd != session.cwd:
            raise invalid_params("'cwd' does not match the session's working directory")

        def finish():
            for conn in session.mcp:
                conn.close()
            session.mcp = self.connect_mcp(specs, cwd)
            session.additional_dirs = directories
            session.active = True
            self.register(session)
            if replay:
                # session-setup.mdx#loading-a-session: "The Agent **MUST** replay the entire
                # conversation to the Client in the form of `session/update` notifications"
                # ... "When **all** the conversation entries have been streamed to the Client,
                # the Agent **MUST** respond to the original `session/load` request."
                if DEV not in ("load_no_replay", "load_replays_after_response"):
                    self.replay(session)
            elif DEV == "resume_replays_history":
                # session-setup.mdx#resuming-a-session: "Unlike `session/load`, the Agent **MUST
                # NOT** replay the conversation history via `session/update` notifications
                # before responding."
                self.replay(session)
            self.reply(rid, self.session_setup_result(session))
            if replay and DEV == "load_replays_after_response":
                self.replay(session)

        if specs:
            self.run_async(self.guarded(rid, finish))
        else:
            finish()

    def on_session_load(self, rid, params: dict) -> None:
        self._reopen(rid, params, replay=True, mcp_required=True)

    def on_session_resume(self, rid, params: dict) -> None:
        self._reopen(rid, params, replay=False, mcp_required=False)

    def free_session(self, session: Session) -> None:
        for conn in session.mcp:
            conn.close()
        session.mcp = []
        session.active = False
        self.persist(session)

    def on_session_close(self, rid, params: dict) -> None:
        sid = self.req_str(params, "sessionId")
        session = self.get_session(sid, must_be_active=True)
        turn = session.turn

        def finish():
            # session-setup.mdx#closing-a-session: "The Agent **MUST** cancel any ongoing work for
            # that session as if `session/cancel` had been called, then free the resources
            # associated with the session."
            if turn is not None and DEV != "close_no_cancel":
                turn.cancel()
                turn.done.wait(CANCEL_GRACE * 2)
            self.free_session(session)
            self.reply(rid, {})

        if turn is not None:
            self.run_async(self.guarded(rid, finish))
        else:
            finish()

    def on_session_delete(self, rid, params: dict) -> None:
        sid = self.req_str(params, "sessionId")
        session = self.sessions.get(sid)
        if session is None:
            # session-delete.mdx#semantics: "Deleting an already-deleted session, or a session
            # that never existed, **SHOULD** succeed silently."
            if DEV == "delete_unknown_errors":
                raise RpcError(RESOURCE_NOT_FOUND, "Resource not found", {"detail": f"unknown session {sid!r}"})
            self.reply(rid, {})
            return
        turn = session.turn

        def finish():
            if turn is not None:
                turn.cancel()
                turn.done.wait(CANCEL_GRACE * 2)
            self.free_session(session)
            with self.lock:
                self.sessions.pop(sid, None)
                if sid in self.session_order:
                    self.session_order.remove(sid)
            if self.store is not None:
                self.store.delete(sid)
            self.reply(rid, {})

        if turn is not None:
            self.run_async(self.guarded(rid, finish))
        else:
            finish()

    def on_session_list(self, rid, params: dict) -> None:
        cwd = params.get("cwd")
        if cwd is not None:
            if not isinstance(cwd, str) or not os.path.isabs(cwd):
                raise invalid_params("'cwd' must be an absolute path")
            cwd = os.path.normpath(cwd)
        cursor = params.get("cursor")
        offset = 0
        if cursor is not None:
            try:
                if not isinstance(cursor, str):
                    raise ValueError
                decoded = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
                if not decoded.startswith("offset:"):
                    raise ValueError
                offset = int(decoded[7:])
                if offset < 0:
                    raise ValueError
            except (ValueError, UnicodeError):
                # session-list.mdx#pagination: "Agents **SHOULD** return an error if the cursor is
                # invalid"
                raise invalid_params("invalid cursor")
        with self.lock:
            items = [self.sessions[s] for s in self.session_order if s in self.sessions]
        if cwd is not None:
            items = [s for s in items if s.cwd == cwd]
        items.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        page = items[offset:offset + LIST_PAGE_SIZE]
        infos = []
        for s in page:
            info = {"sessionId": s.id, "cwd": s.cwd, "updatedAt": s.updated_at}
            if s.title:
                info["title"] = s.title
            if s.additional_dirs:
                info["additionalDirectories"] = list(s.additional_dirs)
            infos.append(info)
        # session-list.mdx#listing-sessions: "When no sessions match the criteria, the Agent
        # **MUST** return an empty `sessions` array."
        result = {"sessions": infos}
        if offset + LIST_PAGE_SIZE < len(items):
            result["nextCursor"] = base64.urlsafe_b64encode(
                f"offset:{offset + LIST_PAGE_SIZE}".encode("ascii")).decode("ascii")
        if DEV == "list_no_match_missing_array" and not items:
            result = {}
        # session-list.mdx: "If absent, there are no more results." -- nextCursor only when more
        # results are available.
        if DEV == "list_cursor_on_last_page" and "nextCursor" not in result and page:
            result["nextCursor"] = base64.urlsafe_b64encode(
                f"offset:{offset + LIST_PAGE_SIZE}".encode("ascii")).decode("ascii")
        self.reply(rid, result)

    def on_set_mode(self, rid, params: dict) -> None:
        session = self.get_session(self.req_str(params, "sessionId"))
        mode = self.req_str(params, "modeId")
        if mode not in [m["id"] for m in MODES]:
            raise invalid_params(f"unknown mode {mode!r}")
        session.mode_id = mode  # the `mode` config option reads the same field: kept in sync
        self.persist(session)
        self.reply(rid, {})

    def on_set_config_option(self, rid, params: dict) -> None:
        session = self.get_session(self.req_str(params, "sessionId"))
        config_id = self.req_str(params, "configId")
        if "value" not in params:
            raise invalid_params("'value' is required")
        value = params.get("value")
        kind = params.get("type")
        options = self.config_options(session)
        option = next((o for o in options if o["id"] == config_id), None)
        if option is None:
            raise invalid_params(f"unknown config option {config_id!r}")
        if option["type"] == "boolean":
            if kind != "boolean" or not isinstance(value, bool):
                raise invalid_params("boolean options take type \"boolean\" and a boolean value")
        else:
            if kind == "boolean" or not isinstance(value, str):
                raise invalid_params("select options take a string value")
            if value not in [o["value"] for o in option["options"]]:
                raise invalid_params(f"{value!r} is not a value of {config_id!r}")
        if config_id == "mode":
            session.mode_id = value
        elif config_id == "model":
            session.model = value
        elif config_id == "brave_mode":
            session.brave = value
        self.persist(session)
        # session-config-options.mdx#from-the-client: "The Agent **MUST** respond with the
        # complete list of all configuration options and their current values"
        full = self.config_options(session)
        if DEV == "set_config_partial":
            full = [o for o in full if o["id"] == config_id]
        self.reply(rid, {"configOptions": full})

    @staticmethod
    def validate_blocks(blocks) -> list[dict]:
        if not isinstance(blocks, list):
            raise invalid_params("'prompt' must be an array of content blocks")
        for block in blocks:
            if not isinstance(block, dict):
                raise invalid_params("each prompt entry must be a content block object")
            kind = block.get("type")
            required = {"text": ("text",), "image": ("data", "mimeType"), "audio": ("data", "mimeType"),
                        "resource_link": ("uri", "name")}.get(kind)
            if kind == "resource":
                res = block.get("resource")
                if not isinstance(res, dict) or not isinstance(res.get("uri"), str) \
                        or not (isinstance(res.get("text"), str) or isinstance(res.get("blob"), str)):
                    raise invalid_params("a resource block needs resource.uri and resource.text or .blob")
                continue
            if required is None:
                raise invalid_params(f"unsupported content block type {kind!r}")
            for key in required:
                if not isinstance(block.get(key), str):
                    raise invalid_params(f"a {kind} block needs a string '{key}'")
        return blocks

    def on_prompt(self, rid, params: dict) -> None:
        sid = self.req_str(params, "sessionId")
        blocks = self.validate_blocks(params.get("prompt"))
        # initialization.mdx#prompt-capabilities: "As a baseline, all Agents **MUST** support
        # `ContentBlock::Text` and `ContentBlock::ResourceLink` in `session/prompt` requests."
        if DEV == "reject_resource_link" and any(b.get("type") == "resource_link" for b in blocks):
            raise invalid_params("resource_link content blocks are not supported")
        session = self.get_session(sid)
        with self.lock:
            if session.turn is not None:
                raise invalid_params("this session already has a prompt turn in progress")
            turn = Turn(self, session, rid, blocks)
            session.turn = turn
            self.turns_by_request[self.request_key(rid)] = turn
        threading.Thread(target=turn.run, daemon=True).start()


# ---------------------------------------------------------------------------

def main() -> None:
    global DEV
    parser = argparse.ArgumentParser(description="Reference ACP v1 agent with a fake keyword model")
    parser.add_argument("--deviation", choices=DEVIATIONS + DEVIATIONS_ROUND3, default=None,
                        help="break exactly one normative rule (see deviations.json)")
    parser.add_argument("--state-dir", default=os.environ.get("FAKE_ACP_STATE_DIR"),
                        help="persist sessions here so session/load works across restarts")
    parser.add_argument("--list-deviations", action="store_true", help="print the deviation names")
    parser.add_argument("--login", action="store_true", help="terminal-auth login flow (succeeds at once)")
    args = parser.parse_args()
    if args.list_deviations:
        print("\n".join(DEVIATIONS + DEVIATIONS_ROUND3))
        return
    if args.login:
        sys.stderr.write("fake-acp-agent: logged in\n")
        return
    DEV = args.deviation
    if DEV:
        log("running with deviation", DEV)
    agent = Agent(args.state_dir)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            signal.signal(sig, lambda *_: agent.shutdown(0))
        except (ValueError, OSError):
            pass
    agent.serve()


if __name__ == "__main__":
    main()
