#!/usr/bin/env python3
"""Self-test of the independent CWX1 doubles.

  python3 selftest.py                    everything: reference host through every scenario on
                                         both tiers (no finding allowed), every host deviation
                                         in its scenario (a finding required), core.py against
                                         host.py, every core deviation (host.py must report it),
                                         and deviations.json against the source.
  python3 selftest.py --deviation NAME   one host or core deviation: the reference run of its
                                         scenario and the deviant run, with the findings.
  python3 selftest.py --scenario NAME [--tier T]   one scenario against the reference host.

Every process is started by this script and ended by it; every wait is bounded.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import core as C  # noqa: E402

HOST_PY = os.path.join(HERE, "host.py")
CORE_PY = os.path.join(HERE, "core.py")
TOY = os.path.join(HERE, "toy_extension.json")
SPEC = "/work/shared/specs/cwx/protocol.rs.txt"
TMP = None

TOY_TOOLS = ["echo", "sleep", "fail", "error_result", "big", "relay", "config", "launch"]
TOY_COMMANDS = ["greet", "summarise", "oops", "retire"]


class Abort(Exception):
    pass


def write_json(name, obj):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def make_fixtures():
    with open(TOY) as f:
        toy = json.load(f)
    slow = dict(toy, activate_ms=4000)
    slow2 = dict(toy, activate_ms=1500)
    slow_dispose = dict(toy, dispose_ms=4000)
    many = {"cwx_extension": 1, "name": "many",
            "tools": [{"name": "t%02d" % i, "description": "tool %d" % i,
                       "input_schema": {"type": "object"}, "behaviour": "echo"}
                      for i in range(40)]}
    modules = [{"id": "b.module", "sha256": "b" * 64}, {"id": "a.module", "sha256": "a" * 64}]
    return {
        "slow": write_json("slow_activate.json", slow),
        "slow2": write_json("slow_activate2.json", slow2),
        "slow_dispose": write_json("slow_dispose.json", slow_dispose),
        "many": write_json("many.json", many),
        "modules": write_json("modules.json", modules),
        "modules_sorted": sorted(modules, key=lambda m: m["id"]),
    }


FIX = {}


class S:
    """One session: a launched host read through core.Channel, plus scenario checks."""

    def __init__(self, tier, dev=None, extra=(), modules=()):
        self.tier = tier
        fd, self.logpath = tempfile.mkstemp(dir=TMP, suffix=".host.log")
        os.close(fd)
        argv = [sys.executable, HOST_PY, "--tier", tier, "--max-lifetime", "120"]
        if dev:
            argv += ["--deviation", dev]
        argv += list(extra)
        self.ch = C.Channel(argv, tier, host_log=self.logpath, expected_modules=list(modules),
                            lifetime=120)
        self.issues = []
        self.act_ms = 10000
        self.disp_ms = 5000

    def fail(self, text, level=C.MUST):
        self.issues.append((level, text))

    def expect(self, cond, text, level=C.MUST):
        if not cond:
            self.fail(text, level)
        return cond

    def handshake(self, max_frame=C.MAX_FRAME, max_inflight=C.MAX_INFLIGHT, act_ms=10000,
                  disp_ms=5000):
        if not self.ch.wait_for(self.ch.hello_event, 5.0):
            self.fail("no host/hello within 5 s")
            raise Abort()
        self.initialize(max_frame, max_inflight, act_ms, disp_ms)

    def initialize(self, max_frame=C.MAX_FRAME, max_inflight=C.MAX_INFLIGHT, act_ms=10000,
                   disp_ms=5000, protocol=C.PROTOCOL_VERSION):
        self.act_ms, self.disp_ms = act_ms, disp_ms
        self.ch.limit_frame = min(C.MAX_FRAME, max_frame)
        self.ch.limit_inflight = max_inflight
        out = self.ch.call("host/initialize",
                           {"protocol": protocol,
                            "limits": {"max_frame": max_frame, "max_inflight": max_inflight,
                                       "dispose_deadline_ms": disp_ms,
                                       "activate_deadline_ms": act_ms}}, 10.0)
        if protocol != C.PROTOCOL_VERSION:
            return out
        if out[0] != "ok":
            self.fail("host/initialize: %r" % (out,))
            raise Abort()
        if not self.ch.wait_for(self.ch.ready_event, 3.0):
            self.fail("no host/ready within 3 s of the initialize answer")
            raise Abort()
        return out

    def call(self, method, params, timeout=5.0, allow_timeout=False):
        out = self.ch.call(method, params, timeout)
        if out[0] in ("timeout", "dead") and not allow_timeout:
            self.fail("%s: no answer (%s)" % (method, out[0]))
            raise Abort()
        return out

    def activate(self, path=TOY, owner=None, sha=None, scope=None, wait=True, gen=1):
        owner = owner or C.new_owner("toy", gen)
        params = {"owner": owner, "plugin_name": "toy",
                  "entry": {"path": path, "sha256": sha or C.sha256_file(path)}, "config": {}}
        if scope is not None:
            params["scope"] = scope
        if not wait:
            return self.ch.request("ext/activate", params), owner
        return self.call("ext/activate", params, self.act_ms / 1000.0 + 1.5), owner

    def activate_ok(self, path=TOY, **kw):
        out, owner = self.activate(path, **kw)
        if not (out[0] == "ok" and type(out[1]) is dict and out[1].get("status") == "ok"):
            self.fail("ext/activate: %r" % (out,))
            raise Abort()
        return owner

    def handles(self, owner):
        key = self.ch.owner_tuple(owner)
        with self.ch.lock:
            return {(k, n): h for h, (o, k, n) in self.ch.handles.items() if o == key}

    def tool(self, owner, name, inp, deadline_ms=5000, timeout=5.0, **extra):
        params = {"handle": self.handles(owner).get(("tool", name), 0), "call_id": "c-" + name,
                  "input": inp, "deadline_ms": deadline_ms}
        params.update(extra)
        return self.call("tool/call", params, timeout)

    def command(self, owner, name, raw):
        return self.call("command/run", {"handle": self.handles(owner).get(("command", name), 0),
                                         "command_id": "cmd-" + name, "raw_input": raw,
                                         "deadline_ms": 5000})

    def hook(self, owner, tool_name):
        return self.call("hook/evaluate", {
            "handle": self.handles(owner).get(("hook", "guard"), 0), "event": "pre_tool_use",
            "payload": {"name": tool_name, "call_id": "c1", "input": {"path": "x"},
                        "mode": "agent", "workspace": "/tmp", "model": "m"},
            "deadline_ms": 5000})

    def exits_within(self, seconds, what):
        rc = self.ch.returncode_after(seconds)
        self.expect(rc is not None, "host still running %.1f s after %s" % (seconds, what))
        return rc

    def raw(self, obj, magic=C.MAGIC, encoding="utf-8"):
        payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(
            encoding, errors="replace")
        self.ch.write(magic + C.struct.pack("<I", len(payload)) + payload)

    def close(self):
        return self.ch.close(grace=1.0)


def is_err(out, code=None):
    return out[0] == "err" and (code is None or out[1].get("code") == code)


def is_ok(out):
    return out[0] == "ok"


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

def sc_basic(s):
    s.handshake()
    time.sleep(0.3)          # a registration before any ext/activate would arrive now
    s.expect(is_ok(s.call("host/ping", {})), "host/ping not answered with a result")
    out, owner = s.activate()
    if not s.expect(is_ok(out) and out[1].get("status") == "ok", "ext/activate: %r" % (out,)):
        raise Abort()
    s.expect(out[1].get("tools") == TOY_TOOLS and out[1].get("commands", []) == TOY_COMMANDS,
             "ext/activate lists %r" % (out[1],))
    s.expect(len(s.handles(owner)) == 13, "expected 13 registrations, got %d"
             % len(s.handles(owner)))
    text = "h\u00e9llo \u2713 \U0001F600 \u2014 CWX1"
    out = s.tool(owner, "echo", {"text": text})
    s.expect(is_ok(out) and out[1].get("content") == [{"type": "text", "text": text}]
             and out[1].get("is_error") is False and out[1].get("structured") == {"text": text},
             "echo: %r" % (out,))
    out = s.tool(owner, "error_result", {})
    s.expect(is_ok(out) and out[1].get("is_error") is True, "error_result: %r" % (out,))
    out = s.tool(owner, "fail", {})
    s.expect(is_err(out, -32000), "a tool body that throws: %r (want -32000)" % (out,),
             level=C.SHOULD)
    out = s.tool(owner, "config", {})
    s.expect(is_ok(out), "config: %r" % (out,))
    out = s.command(owner, "greet", "world")
    s.expect(is_ok(out) and out[1] == {"kind": "success", "text": "hello, world"},
             "greet: %r" % (out,))
    out = s.command(owner, "summarise", "cats")
    s.expect(is_ok(out) and out[1].get("kind") == "submit", "summarise: %r" % (out,))
    out = s.command(owner, "oops", "")
    s.expect(is_ok(out) and out[1].get("kind") == "error", "oops: %r" % (out,))
    for name, kind in (("rm", "deny"), ("sudo", "ask"), ("sleep", "revise"), ("echo", "annotate"),
                       ("ls", "abstain")):
        out = s.hook(owner, name)
        s.expect(is_ok(out) and type(out[1]) is dict and out[1].get("kind") == kind,
                 "hook for %s: %r (want %s)" % (name, out, kind))
    out = s.call("tool/call", {"handle": 999999, "call_id": "x", "input": {}, "deadline_ms": 5000})
    s.expect(is_err(out, -32001), "unknown handle: %r (want -32001)" % (out,))
    out = s.command(owner, "retire", "error_result")
    s.expect(is_ok(out) and out[1].get("kind") == "success", "retire: %r" % (out,))
    out = s.call("ext/deactivate", {"owner": owner}, s.disp_ms / 1000.0 + 1.5)
    s.expect(is_ok(out) and out[1] == {"disposed": True, "leaked": []},
             "ext/deactivate: %r" % (out,))
    echo = [h for (k, n), h in s.handles(owner).items() if n == "echo"][0]
    out = s.call("tool/call", {"handle": echo, "call_id": "late", "input": {},
                               "deadline_ms": 5000})
    s.expect(is_err(out, -32001), "revoked handle: %r (want -32001)" % (out,))
    time.sleep(0.3)          # a second answer would arrive now
    out = s.call("host/shutdown", {}, 2.0)
    s.expect(is_ok(out), "host/shutdown: %r" % (out,))
    s.exits_within(2.0, "host/shutdown")


def sc_eof(s):
    s.handshake()
    s.ch.win.close()
    s.exits_within(2.0, "end of stdin")


def sc_bad_magic_in(s):
    s.handshake()
    s.ch.forgotten.discard(77)
    s.raw({"jsonrpc": "2.0", "id": 77, "method": "host/ping", "params": {}}, magic=b"CWX0")
    s.exits_within(2.0, "a frame with bad magic")


def sc_oversize_in(s):
    s.handshake()
    s.ch.write(C.MAGIC + C.struct.pack("<I", C.MAX_FRAME + 1))
    s.exits_within(2.0, "a frame header over MAX_FRAME")


def sc_non_utf8_in(s):
    s.handshake()
    s.raw({"jsonrpc": "2.0", "id": 78, "method": "tool/call",
           "params": {"handle": 1, "call_id": "c", "input": {"text": "h\u00e9"},
                      "deadline_ms": 1000}}, encoding="latin-1")
    rc = s.ch.returncode_after(2.0)
    s.expect(rc is not None, "host still running 2 s after a non-UTF-8 payload", level=C.SHOULD)


def sc_unicode_in(s):
    s.handshake()
    owner = s.activate_ok()
    text = "\u00e9\u00e8\u2713\U0001F600" * 3
    params = {"handle": s.handles(owner)[("tool", "echo")], "call_id": "u", "input": {"text": text},
              "deadline_ms": 5000}
    r1 = s.ch.request("tool/call", params)
    r2 = s.ch.request("host/ping", {})
    s.expect(s.ch.wait(r1, 3.0) and is_ok(r1.outcome)
             and r1.outcome[1].get("content") == [{"type": "text", "text": text}],
             "multi-byte request: %r" % (r1.outcome,))
    s.expect(s.ch.wait(r2, 3.0) and is_ok(r2.outcome), "ping after a multi-byte request: %r"
             % (r2.outcome,))


def sc_methods(s):
    s.handshake()
    out = s.call("host/reload", {})
    s.expect(is_err(out, -32601), "unknown method: %r (want -32601)" % (out,))
    out = s.call("registry/register", {"owner": C.new_owner("x", 1)})
    s.expect(is_err(out, -32601), "a host->core method sent to the host: %r (want -32601)"
             % (out,))
    s.ch.notify("host/reload", {})
    s.ch.notify("$/cancel", {"id": 424242})
    time.sleep(0.4)
    s.expect(is_ok(s.call("host/ping", {})), "ping after notifications")


def sc_tier_plugin(s):
    s.handshake()
    owner = C.new_owner("toy", 1)
    out = s.call("harness/run", {"owner": owner, "execution_id": "e", "ticket": "t",
                                 "deadline_ms": 1000})
    s.expect(is_err(out, -32601), "harness/run on the plugin tier: %r (want -32601)" % (out,))
    out = s.call("mcp/close", {"owner": owner, "session_id": "s", "deadline_ms": 1000})
    s.expect(is_err(out, -32601), "mcp/close on the plugin tier: %r (want -32601)" % (out,))
    owner = s.activate_ok()
    out = s.tool(owner, "launch", {"session_id": "s1", "ticket": "lt"})
    s.expect(is_ok(out) and out[1].get("is_error") is True,
             "launch on the plugin tier: %r (want an error result)" % (out,))


def sc_tier_builtin(s):
    s.handshake()
    owner = s.activate_ok()
    out = s.call("harness/run", {"owner": owner, "execution_id": "e1", "ticket": "t1",
                                 "deadline_ms": 3000})
    s.expect(is_ok(out), "harness/run: %r" % (out,))
    g1 = {"ticket": "g1", "operation_id": "o1", "method": "initialize", "wire_id": "1",
          "params": {}}
    g2 = {"ticket": "g2", "operation_id": "o2", "method": "notifications/initialized",
          "params": {}}
    out = s.call("mcp/open", {"owner": owner, "session_id": "m1", "launch_ticket": "lt",
                              "transport": "stdio", "initialize_grant": g1,
                              "initialized_grant": g2, "client_version": "1",
                              "deadline_ms": 3000})
    s.expect(is_ok(out), "mcp/open: %r" % (out,))
    out = s.call("mcp/request", {"owner": owner, "session_id": "m1",
                                 "grant": dict(g1, ticket="g3", operation_id="o3",
                                               method="tools/list", wire_id="2"),
                                 "deadline_ms": 3000})
    s.expect(is_ok(out), "mcp/request: %r" % (out,))
    out = s.call("mcp/close", {"owner": owner, "session_id": "m1", "deadline_ms": 3000})
    s.expect(is_ok(out), "mcp/close: %r" % (out,))
    out = s.tool(owner, "launch", {"session_id": "s1", "ticket": "lt"})
    s.expect(is_ok(out) and out[1].get("is_error") is False, "launch: %r" % (out,))


def sc_cancel(s):
    s.handshake()
    owner = s.activate_ok()
    req = s.ch.request("tool/call", {"handle": s.handles(owner)[("tool", "sleep")],
                                     "call_id": "c", "input": {"ms": 3000},
                                     "deadline_ms": 10000})
    time.sleep(0.2)
    s.ch.notify("$/cancel", {"id": req.id})
    if s.ch.wait(req, 1.0):
        s.expect(is_err(req.outcome, -32800), "answer after $/cancel: %r (want -32800)"
                 % (req.outcome,), level=C.SHOULD)
    elif s.ch.wait(req, 3.0):
        s.fail("the cancelled call was answered only when its work ended: %r" % (req.outcome,),
               level=C.SHOULD)
    else:
        s.fail("the cancelled call was never answered (4 s)")
        s.ch.forget(req, cancel=False)
        s.ch.forgotten.discard(req.id)
    time.sleep(0.5)


def sc_deadline(s):
    s.handshake()
    owner = s.activate_ok()
    req = s.ch.request("tool/call", {"handle": s.handles(owner)[("tool", "sleep")],
                                     "call_id": "c", "input": {"ms": 4000}, "deadline_ms": 300})
    got = s.ch.wait(req, 2.5)
    s.expect(got and req.outcome[0] == "err",
             "sleep past deadline_ms 300 without $/cancel: %r after 2.5 s (want an error before)"
             % (req.outcome,), level=C.SHOULD)
    if not got:
        s.ch.forget(req, cancel=False)


def sc_activate_deadline(s):
    s.handshake(act_ms=600)
    req, owner = s.activate(FIX["slow"], wait=False)
    got = s.ch.wait(req, 2.0)
    s.expect(got and is_ok(req.outcome) and req.outcome[1].get("status") == "failed",
             "activation over activate_deadline_ms 600: %r after 2 s (want failed)"
             % (req.outcome,))
    if not got:
        s.ch.forget(req, cancel=False)


def sc_dispose_deadline(s):
    s.handshake(disp_ms=500)
    owner = s.activate_ok(FIX["slow_dispose"])
    req = s.ch.request("ext/deactivate", {"owner": owner})
    got = s.ch.wait(req, 2.0)
    s.expect(got and is_ok(req.outcome) and req.outcome[1].get("disposed") is False
             and req.outcome[1].get("leaked"),
             "dispose over dispose_deadline_ms 500: %r after 2 s (want disposed false)"
             % (req.outcome,))
    if not got:
        s.ch.forget(req, cancel=False)


def sc_not_yet_active(s):
    s.handshake()
    req, owner = s.activate(FIX["slow2"], wait=False)
    end = time.monotonic() + 1.2
    while ("tool", "echo") not in s.handles(owner) and time.monotonic() < end:
        time.sleep(0.02)
    h = s.handles(owner).get(("tool", "echo"))
    if not s.expect(h is not None, "echo not registered within 1.2 s"):
        raise Abort()
    out = s.call("tool/call", {"handle": h, "call_id": "early", "input": {}, "deadline_ms": 3000},
                 1.0)
    s.expect(not req.event.is_set(), "selftest timing: activation answered too early",
             level=C.SHOULD)
    s.expect(is_err(out, -32001), "handle before its activation is answered: %r (want -32001)"
             % (out,))
    s.expect(s.ch.wait(req, 3.0) and req.outcome[1].get("status") == "ok",
             "slow activation: %r" % (req.outcome,))
    out = s.tool(owner, "echo", {"text": "now"})
    s.expect(is_ok(out), "echo once active: %r" % (out,))


def sc_refusal(s):
    s.handshake()
    s.ch.refuse = {"fail"}
    out, owner = s.activate()
    s.expect(is_ok(out) and out[1].get("status") == "failed"
             and type(out[1].get("diagnostic")) is str,
             "activation with a refused registration: %r (want failed)" % (out,))


def sc_sha_mismatch(s):
    s.handshake()
    out, owner = s.activate(sha="0" * 64)
    s.expect(is_ok(out) and out[1].get("status") == "failed",
             "activation of a file whose sha256 differs: %r (want failed)" % (out,), level=C.SHOULD)
    s.expect(not s.handles(owner), "registrations from an unverified entry", level=C.SHOULD)


def sc_reactivate(s):
    s.handshake()
    o1 = s.activate_ok(gen=1)
    out = s.call("ext/deactivate", {"owner": o1}, 6.0)
    s.expect(is_ok(out), "deactivate: %r" % (out,))
    o2 = s.activate_ok(gen=2)
    out = s.tool(o2, "echo", {"text": "again"})
    s.expect(is_ok(out), "echo after reactivation: %r" % (out,))


def sc_many(s):
    s.handshake(max_inflight=8, act_ms=8000)
    s.ch.hold = {"registry/register"}
    out, owner = s.activate(FIX["many"])
    s.expect(is_ok(out) and out[1].get("status") == "ok", "activation of 40 tools: %r" % (out,))
    s.expect(s.ch.max_host_inflight <= 8, "host had %d requests in flight, max_inflight 8"
             % s.ch.max_host_inflight)


def sc_oversize_out(s):
    s.handshake(max_frame=65536)
    owner = s.activate_ok()
    out = s.tool(owner, "big", {"bytes": 1000})
    s.expect(is_ok(out) and out[1]["content"][0]["text"] == "x" * 1000, "big 1000: %r"
             % (out[0],))
    out = s.tool(owner, "big", {"bytes": 60000})
    s.expect(is_ok(out) and out[1]["content"][0]["text"] == "x" * 60000, "big 60000 (fits)")
    out = s.tool(owner, "big", {"bytes": 70000})
    s.expect(is_err(out), "a 70000-byte result over max_frame 65536: %s (want an error, neither "
             "the frame nor a truncation)" % out[0])
    out = s.tool(owner, "big", {"bytes": 80000, "char": "\u00e9"})
    s.expect(is_err(out), "an 80000-byte (40000-character) result over max_frame 65536: %s "
             "(want an error)" % out[0])


def sc_core_call(s):
    s.handshake()
    owner = s.activate_ok()
    out = s.tool(owner, "relay", {"name": "read", "input": {"path": "README"}}, ticket="tk-1")
    s.expect(is_ok(out) and out[1].get("is_error") is False
             and out[1]["content"][0]["text"] == "core ran read", "relay with ticket: %r" % (out,))
    out = s.tool(owner, "relay", {"name": "read", "input": {}})
    s.expect(is_ok(out) and out[1].get("is_error") is True,
             "relay without a ticket: %r (want an error result)" % (out,))


def sc_init_protocol(s):
    if not s.ch.wait_for(s.ch.hello_event, 5.0):
        s.fail("no host/hello")
        raise Abort()
    out = s.initialize(protocol=2)
    s.expect(is_err(out, -32602), "host/initialize protocol 2: %r (want -32602)" % (out,),
             level=C.SHOULD)
    s.initialize()


def sc_modules(s):
    s.handshake()
    s.expect(is_ok(s.call("host/ping", {})), "ping")


SCENARIOS = {
    "basic": (sc_basic, ("plugin", "builtin")),
    "eof": (sc_eof, ("plugin", "builtin")),
    "bad_magic_in": (sc_bad_magic_in, ("plugin",)),
    "oversize_in": (sc_oversize_in, ("plugin",)),
    "non_utf8_in": (sc_non_utf8_in, ("plugin",)),
    "unicode_in": (sc_unicode_in, ("plugin",)),
    "methods": (sc_methods, ("plugin", "builtin")),
    "tier_plugin": (sc_tier_plugin, ("plugin",)),
    "tier_builtin": (sc_tier_builtin, ("builtin",)),
    "cancel": (sc_cancel, ("plugin",)),
    "deadline": (sc_deadline, ("plugin",)),
    "activate_deadline": (sc_activate_deadline, ("plugin",)),
    "dispose_deadline": (sc_dispose_deadline, ("plugin",)),
    "not_yet_active": (sc_not_yet_active, ("plugin",)),
    "refusal": (sc_refusal, ("plugin",)),
    "sha_mismatch": (sc_sha_mismatch, ("plugin",)),
    "reactivate": (sc_reactivate, ("plugin",)),
    "many": (sc_many, ("plugin",)),
    "oversize_out": (sc_oversize_out, ("plugin",)),
    "core_call": (sc_core_call, ("plugin",)),
    "init_protocol": (sc_init_protocol, ("plugin",)),
    "modules": (sc_modules, ("plugin",)),
}

# host deviation -> (scenario, tier)
HOST_DEV_SCENARIO = {
    "oversize_frame": "oversize_out", "truncate_oversize": "oversize_out",
    "limit_in_chars": "oversize_out", "ignore_limits_max_frame": "oversize_out",
    "bad_magic_continue": "bad_magic_in", "oversize_incoming_read": "oversize_in",
    "read_length_as_chars": "unicode_in", "eof_no_exit": "eof", "accept_non_utf8": "non_utf8_in",
    "answer_notification": "cancel", "hello_modules_unordered": "modules",
    "accept_wrong_protocol": "init_protocol", "ignore_refusal": "refusal",
    "unbounded_inflight": "many", "reuse_request_id": "many",
    "stale_owner_on_reactivate": "reactivate", "serve_not_yet_active": "not_yet_active",
    "unknown_method_wrong_code": "methods", "plugin_serves_builtin": "tier_plugin",
    "plugin_sends_builtin": "tier_plugin", "cancel_ignored": "cancel",
    "cancel_wrong_code": "cancel", "cancel_no_answer": "cancel", "deadline_ignored": "deadline",
    "activate_deadline_ignored": "activate_deadline",
    "dispose_deadline_ignored": "dispose_deadline", "skip_sha256_check": "sha_mismatch",
    "core_call_without_ticket": "core_call",
}


def scenario_of(dev):
    return HOST_DEV_SCENARIO.get(dev, "basic")


def run_scenario(name, tier, dev=None):
    fn, _ = SCENARIOS[name]
    extra, modules = (), ()
    if name == "modules":
        extra, modules = ("--builtin-modules", FIX["modules"]), FIX["modules_sorted"]
    s = S(tier, dev, extra=extra, modules=modules)
    try:
        fn(s)
    except Abort:
        pass
    except Exception as e:  # noqa: BLE001
        s.fail("selftest error: %r" % e)
    finally:
        rc = s.close()
    findings = list(s.ch.findings) + s.issues
    with open(s.logpath, "rb") as f:
        log = f.read(200000).decode("utf-8", errors="replace")
    os.unlink(s.logpath)
    return findings, log, rc


# ---------------------------------------------------------------------------
# core.py runs
# ---------------------------------------------------------------------------

PID_RE = re.compile(r"host-pid (\d+) holder-pid (\d+)")


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def run_core(tier, dev=None):
    """core.py against host.py; returns (core rc, core stderr, host log, host left running)."""
    fd, hlog = tempfile.mkstemp(dir=TMP, suffix=".host.log")
    os.close(fd)
    cmd = [sys.executable, CORE_PY, "--host", "%s %s --tier %s --max-lifetime 60"
           % (sys.executable, HOST_PY, tier), "--tier", tier, "--host-log", hlog, "--strict", "--require-tools",
           "--activate-deadline-ms", "2000"]
    if dev:
        cmd += ["--deviation", dev]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=10)
    err = err.decode("utf-8", errors="replace")
    left = False
    m = PID_RE.search(err)
    if m:
        hpid, holder = int(m.group(1)), int(m.group(2))
        time.sleep(1.0)
        left = alive(hpid)
        for pid in (hpid, holder):       # started by core.py for this run; end them by id
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.2)
    with open(hlog, "rb") as f:
        hl = f.read(200000).decode("utf-8", errors="replace")
    os.unlink(hlog)
    return p.returncode, err, hl, left


def core_deviation_detected(hl, left):
    return "core violation" in hl or "fatal frame error" in hl or left


def core_dev_tier(dev):
    return "plugin"


# ---------------------------------------------------------------------------
# deviations.json
# ---------------------------------------------------------------------------

def check_deviations_json():
    problems = []
    with open(os.path.join(HERE, "deviations.json")) as f:
        devs = json.load(f)
    lines = {}
    with open(SPEC, encoding="utf-8") as f:
        for raw in f:
            m = re.match(r"^(\d+) (.*)$", raw.rstrip("\n"))
            if m:
                lines.setdefault(int(m.group(1)), m.group(2))
    sys.path.insert(0, HERE)
    import host as H
    names = {"host": set(), "core": set()}
    for d in devs:
        for k in ("name", "side", "sentence", "level", "what", "how_to_provoke"):
            if k not in d:
                problems.append("%s: missing %s" % (d.get("name"), k))
        names.setdefault(d["side"], set()).add(d["name"])
        m = re.match(r"^protocol\.rs:(\d+): (.*)$", d["sentence"])
        if not m:
            problems.append("%s: sentence not 'protocol.rs:N: text'" % d["name"])
            continue
        n, text = int(m.group(1)), m.group(2)
        if text not in lines.get(n, ""):
            problems.append("%s: %r is not on line %d (%r)" % (d["name"], text, n, lines.get(n)))
        if d["level"] not in ("MUST", "SHOULD"):
            problems.append("%s: level %s" % (d["name"], d["level"]))
    if names["host"] != set(H.DEVIATIONS):
        problems.append("host names differ: %r / %r" % (sorted(names["host"] - set(H.DEVIATIONS)),
                                                        sorted(set(H.DEVIATIONS) - names["host"])))
    if names["core"] != set(C.CORE_DEVIATIONS):
        problems.append("core names differ: %r / %r"
                        % (sorted(names["core"] - set(C.CORE_DEVIATIONS)),
                           sorted(set(C.CORE_DEVIATIONS) - names["core"])))
    return problems, devs


# ---------------------------------------------------------------------------

def fmt(findings):
    return "\n".join("      [%s] %s" % f for f in findings) or "      (none)"


def one_deviation(name):
    import host as H
    if name in H.DEVIATIONS:
        sc = scenario_of(name)
        tier = SCENARIOS[sc][1][0]
        ref, _, _ = run_scenario(sc, tier)
        dev, log, rc = run_scenario(sc, tier, name)
        print("host deviation %s, scenario %s, tier %s" % (name, sc, tier))
        print("  reference findings:\n%s" % fmt(ref))
        print("  deviant findings (host exit %r):\n%s" % (rc, fmt(dev)))
        ok = not ref and bool(dev)
    elif name in C.CORE_DEVIATIONS:
        tier = core_dev_tier(name)
        rrc, _, rhl, _ = run_core(tier)
        rc, err, hl, left = run_core(tier, name)
        print("core deviation %s, tier %s" % (name, tier))
        print("  reference: core rc %s, host reports: %s" % (rrc, _violations(rhl) or "(none)"))
        print("  deviant:   core rc %s, host left running: %s, host reports:\n%s"
              % (rc, left, _violations(hl) or "      (none)"))
        ok = rrc == 0 and not core_deviation_detected(rhl, False) and \
            core_deviation_detected(hl, left)
    else:
        print("unknown deviation %s" % name)
        return 2
    print("DIFFERS AS INTENDED" if ok else "NOT SHOWN")
    return 0 if ok else 1


def _violations(hl):
    rows = [l for l in hl.splitlines() if "core violation" in l or "fatal frame error" in l]
    return "\n".join("      " + r for r in rows[:8])


def main():
    global TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--deviation")
    ap.add_argument("--scenario")
    ap.add_argument("--tier", default="plugin")
    ap.add_argument("--jobs", type=int, default=6)
    args = ap.parse_args()
    TMP = tempfile.mkdtemp(prefix="cwx-selftest-")
    try:
        FIX.update(make_fixtures())
        if args.deviation:
            return one_deviation(args.deviation)
        if args.scenario:
            f, log, rc = run_scenario(args.scenario, args.tier)
            print("scenario %s tier %s: host exit %r\n%s" % (args.scenario, args.tier, rc, fmt(f)))
            return 1 if f else 0
        return run_all(args.jobs)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


def run_all(jobs):
    import host as H
    bad = 0
    t0 = time.monotonic()
    problems, _ = check_deviations_json()
    print("deviations.json: %s" % ("ok" if not problems else "PROBLEMS"))
    for p in problems:
        print("  " + p)
    bad += len(problems)

    tasks = []
    for sc, (_, tiers) in SCENARIOS.items():
        for tier in tiers:
            tasks.append(("ref", sc, tier, None))
    for dev in H.DEVIATIONS:
        sc = scenario_of(dev)
        tasks.append(("hostdev", sc, SCENARIOS[sc][1][0], dev))
    for tier in ("plugin", "builtin"):
        tasks.append(("coreref", None, tier, None))
    for dev in C.CORE_DEVIATIONS:
        tasks.append(("coredev", None, core_dev_tier(dev), dev))

    def work(task):
        kind, sc, tier, dev = task
        if kind in ("ref", "hostdev"):
            f, log, rc = run_scenario(sc, tier, dev)
            return task, f, log, None
        rc, err, hl, left = run_core(tier, dev)
        return task, (rc, err, left), hl, None

    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for r in ex.map(work, tasks):
            results.append(r)

    for task, res, log, _ in results:
        kind, sc, tier, dev = task
        if kind == "ref":
            ok = not res
            print("%-4s reference host  %-18s %-7s %s" % ("ok" if ok else "FAIL", sc, tier,
                                                         "" if ok else "\n" + fmt(res)))
        elif kind == "hostdev":
            ok = bool(res)
            first = res[0] if res else ("-", "no finding")
            print("%-4s host dev %-27s %-17s [%s] %s" % ("ok" if ok else "FAIL", dev, sc,
                                                         first[0], first[1][:110]))
        elif kind == "coreref":
            rc, err, left = res
            ok = rc == 0 and not core_deviation_detected(log, False)
            print("%-4s core.py vs host.py %-7s rc=%s%s" % ("ok" if ok else "FAIL", tier, rc,
                                                            "" if ok else "\n" + err[-2000:]
                                                            + _violations(log)))
        else:
            rc, err, left = res
            ok = core_deviation_detected(log, left)
            v = _violations(log).strip().splitlines()
            print("%-4s core dev %-27s %s" % ("ok" if ok else "FAIL", dev,
                                              ("host left running" if left else
                                               (v[0].strip()[:120] if v else "not reported"))))
        if not ok:
            bad += 1
    print("%d problem(s), %.1f s" % (bad, time.monotonic() - t0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
