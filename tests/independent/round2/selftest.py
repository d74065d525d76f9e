#!/usr/bin/env python3
"""selftest.py -- quick checks of the round-2 doubles (stdlib only, bounded run time).

    python3 selftest.py            # every check (about 40 s)
    python3 selftest.py -k NAME    # only the checks whose name contains NAME
    python3 selftest.py --list

Each check starts a double, does the handshake, exercises one variant or deviation and
asserts the behaviour.  Every process is started here and ended by its own handle; every
wait has a timeout; files go to a temporary directory only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "acp_agent.py")
HOST = os.path.join(HERE, "cwx_host.py")
AS_SERVER = os.path.join(HERE, "as_server.py")
TOTAL_BUDGET = 240.0  # seconds for the whole run

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class Fail(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Fail(msg)


# ---------------------------------------------------------------------------
# ACP client
# ---------------------------------------------------------------------------

class Acp:
    """A minimal ACP client that plays a fake editor for the agent's requests."""

    def __init__(self, tmp, args=(), caps=None):
        self.tmp = tmp
        self.err = open(os.path.join(tmp, "agent-%d.log" % time.monotonic_ns()), "wb")
        self.proc = subprocess.Popen([sys.executable, AGENT, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, cwd=tmp)
        self.q: queue.Queue = queue.Queue()
        self.msgs: list = []     # (raw line, parsed) in arrival order
        self.lock = threading.Lock()
        self.auto = True
        self.agent_requests: list = []
        self.caps = caps if caps is not None else {}
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        for raw in iter(self.proc.stdout.readline, b""):
            try:
                msg = json.loads(raw.decode("utf-8"))
            except ValueError:
                msg = None
            with self.lock:
                self.msgs.append((raw, msg))
            if isinstance(msg, dict) and "method" in msg and "id" in msg:
                self.agent_requests.append(msg)
                if self.auto:
                    self.answer(msg)
        self.q.put(None)

    def answer(self, req):
        m, p = req["method"], req.get("params") or {}
        result = {}
        if m == "fs/read_text_file":
            result = {"content": "first line\nsecond line\n"}
        elif m == "terminal/create":
            result = {"terminalId": "term-1"}
        elif m == "terminal/wait_for_exit":
            result = {"exitCode": 0, "signal": None}
        elif m == "terminal/output":
            result = {"output": "hi\n", "truncated": False, "exitStatus": {"exitCode": 0, "signal": None}}
        elif m == "session/request_permission":
            result = {"outcome": {"outcome": "selected", "optionId": p["options"][0]["optionId"]}}
        elif m == "elicitation/create":
            result = {"action": "decline"}
        self.send({"jsonrpc": "2.0", "id": req["id"], "result": result})

    def send(self, obj):
        self.send_raw(json.dumps(obj))

    def send_raw(self, text):
        try:
            self.proc.stdin.write(text.encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def snapshot(self):
        with self.lock:
            return list(self.msgs)

    def wait_for(self, pred, timeout, start=0):
        end = time.monotonic() + timeout
        seen = start
        while time.monotonic() < end:
            msgs = self.snapshot()
            for raw, msg in msgs[seen:]:
                if pred(raw, msg):
                    return raw, msg
            seen = len(msgs)
            time.sleep(0.02)
        return None

    def response(self, rid, timeout=5.0, start=0):
        def is_resp(raw, msg):
            return isinstance(msg, dict) and "method" not in msg and "id" in msg and \
                type(msg["id"]) is type(rid) and msg["id"] == rid
        got = self.wait_for(is_resp, timeout, start)
        return got[1] if got else None

    def request(self, rid, method, params, timeout=5.0):
        mark = len(self.snapshot())
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.response(rid, timeout, mark)

    def handshake(self, cwd):
        r = self.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": self.caps,
                                           "clientInfo": {"name": "selftest", "version": "1"}}, 20.0)
        expect(r and r.get("result", {}).get("protocolVersion") == 1, "initialize failed: %r" % (r,))
        r = self.request(2, "session/new", {"cwd": cwd, "mcpServers": []}, 10.0)
        expect(r and "sessionId" in r.get("result", {}), "session/new failed: %r" % (r,))
        return r["result"]["sessionId"]

    def updates(self, since=0):
        return [m["params"]["update"] for _, m in self.snapshot()[since:]
                if isinstance(m, dict) and m.get("method") == "session/update"]

    def close(self, timeout=10.0):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            code = None
        self.err.close()
        return code


def prompt(c, rid, sid, text):
    c.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})


def text_of(updates):
    return "".join(u.get("content", {}).get("text", "") for u in updates
                   if u.get("sessionUpdate") == "agent_message_chunk")


ODD_IDS = [None, 0, -7, 1.5, "abc", "", 2 ** 70, 9007199254740993]
RAW_ODD_IDS = ["null", "0", "-7", "1.5", '"abc"', '""', str(2 ** 70), "9007199254740993", "2.50"]


def check_odd_ids(c):
    for raw in RAW_ODD_IDS:
        mark = len(c.snapshot())
        c.send_raw('{"jsonrpc":"2.0","id":%s,"method":"_selftest/probe","params":{}}' % raw)
        got = c.wait_for(lambda line, m: isinstance(m, dict) and "method" not in m
                         and (line.decode().find('"id":%s,' % raw) >= 0
                              or line.decode().find('"id":%s}' % raw) >= 0), 3.0, mark)
        expect(got is not None, "no response echoing id %s" % raw)
        expect(got[1].get("error", {}).get("code") == -32601, "id %s: expected -32601, got %r" % (raw, got[1]))
    # a real method with id 0 as well
    r = c.request(0, "session/list", {})
    expect(r is not None and "result" in r, "session/list with id 0 not answered: %r" % (r,))


# ---------------------------------------------------------------------------
# ACP checks
# ---------------------------------------------------------------------------

@check
def acp_default_basic(tmp):
    c = Acp(tmp, caps={"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True})
    try:
        sid = c.handshake(tmp)
        prompt(c, 10, sid, "hello")
        r = c.response(10, 5)
        expect(r and r["result"]["stopReason"] == "end_turn", "hello: %r" % (r,))
        check_odd_ids(c)
        r = c.request(11, "_selftest/custom", {})
        expect(r and r["error"]["code"] == -32601, "custom _ method: %r" % (r,))
        # session/cancel -> cancelled
        prompt(c, 12, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        r = c.response(12, 5)
        expect(r and r.get("result", {}).get("stopReason") == "cancelled", "cancel: %r" % (r,))
        # $/cancel_request -> still answered
        prompt(c, 13, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 13}})
        r = c.response(13, 5)
        expect(r is not None and (r.get("result", {}).get("stopReason") == "cancelled"
                                  or r.get("error", {}).get("code") == -32800), "cancel_request: %r" % (r,))
        # permission requested when asked for
        before = len(c.agent_requests)
        prompt(c, 14, sid, "Write the file out.txt with content hi and ask me for permission first")
        r = c.response(14, 5)
        methods = [m["method"] for m in c.agent_requests[before:]]
        expect("session/request_permission" in methods and "fs/write_text_file" in methods,
               "reference permission flow: %r" % methods)
    finally:
        code = c.close()
    expect(code == 0, "exit code %r after stdin closed" % code)


@check
def acp_variant_null_ids(tmp):
    c = Acp(tmp, args=["--variant", "null_ids"])
    try:
        c.handshake(tmp)
        check_odd_ids(c)
    finally:
        expect(c.close() == 0, "did not exit 0 on stdin close")


def _refrain_case(tmp, caps, text, want_method):
    c = Acp(tmp, args=["--variant", "refrain"], caps=caps)
    try:
        sid = c.handshake(tmp)
        mark = len(c.snapshot())
        prompt(c, 20, sid, text)
        r = c.response(20, 8)
        expect(r and r.get("result", {}).get("stopReason") == "end_turn", "%s: %r" % (text, r))
        ups = c.updates(mark)
        methods = [m["method"] for m in c.agent_requests]
        tool_calls = [u for u in ups if u.get("sessionUpdate") == "tool_call"]
        return methods, tool_calls, text_of(ups)
    finally:
        c.close()


@check
def acp_variant_refrain(tmp):
    with open(os.path.join(tmp, "notes.txt"), "w") as fh:
        fh.write("x\n")
    for caps, text, method in (
            ({}, "Read the file notes.txt", "fs/read_text_file"),
            ({"fs": {"readTextFile": True}}, "Write the file out.txt with content hi", "fs/write_text_file"),
            ({"fs": {"readTextFile": True, "writeTextFile": True}}, "Run the command `echo hi` in a terminal",
             "terminal/create")):
        methods, tools, said = _refrain_case(tmp, caps, text, method)
        expect(not methods and not tools, "refrain without capability acted: %r %r" % (methods, tools))
        expect("cannot" in said, "refrain did not say it cannot: %r" % said)
    for caps, text, method in (
            ({"fs": {"readTextFile": True}}, "Read the file notes.txt", "fs/read_text_file"),
            ({"fs": {"writeTextFile": True}}, "Write the file out.txt with content hi", "fs/write_text_file"),
            ({"terminal": True}, "Run the command `echo hi` in a terminal", "terminal/create")):
        methods, tools, said = _refrain_case(tmp, caps, text, method)
        expect(method in methods and tools, "refrain with capability did not act: %r" % methods)
    expect(not os.path.exists(os.path.join(tmp, "out.txt")), "refrain wrote a file locally")


@check
def acp_variant_no_permission(tmp):
    c = Acp(tmp, args=["--variant", "no_permission"], caps={"fs": {"readTextFile": True, "writeTextFile": True}})
    try:
        sid = c.handshake(tmp)
        prompt(c, 30, sid, "Write the file out.txt with content hi and ask me for permission first")
        r = c.response(30, 5)
        expect(r and r["result"]["stopReason"] == "end_turn", "turn: %r" % (r,))
        methods = [m["method"] for m in c.agent_requests]
        expect("session/request_permission" not in methods, "asked for permission: %r" % methods)
        expect("fs/write_text_file" in methods, "did not write: %r" % methods)
    finally:
        c.close()


@check
def acp_variant_slow_model(tmp):
    c = Acp(tmp, args=["--variant", "slow_model", "--turn-seconds", "3"])
    try:
        sid = c.handshake(tmp)
        t0 = time.monotonic()
        prompt(c, 40, sid, "hello")
        time.sleep(0.2)
        for rid, method in ((41, "_selftest/x"), (42, "no/such_method"), (43, "_other")):
            r = c.request(rid, method, {}, timeout=2.0)
            expect(r and r["error"]["code"] == -32601, "%s not answered at once: %r" % (method, r))
        r = c.request(44, "session/list", {}, timeout=2.0)
        expect(r and "result" in r, "session/list during a slow turn: %r" % (r,))
        r = c.response(40, 10)
        took = time.monotonic() - t0
        expect(r and r["result"]["stopReason"] == "end_turn" and took >= 2.9, "slow turn: %r after %.1fs" % (r, took))
        # a cancel ends the slow wait early
        prompt(c, 45, sid, "hello")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        r = c.response(45, 2)
        expect(r and r["result"]["stopReason"] == "cancelled", "cancel during slow turn: %r" % (r,))
    finally:
        c.close()


@check
def acp_deviation_no_answer_after_cancel(tmp):
    c = Acp(tmp, args=["--deviation", "no_answer_after_cancel"])
    try:
        sid = c.handshake(tmp)
        prompt(c, 50, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        expect(c.response(50, 3) is None, "the cancelled prompt was answered")
        r = c.request(51, "_probe", {}, 2)
        expect(r and r["error"]["code"] == -32601, "agent stopped serving: %r" % (r,))
        # $/cancel_request is still honoured (a different rule)
        prompt(c, 52, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 52}})
        r = c.response(52, 3)
        expect(r is not None, "$/cancel_request path should still answer")
    finally:
        c.close()


@check
def acp_deviation_no_answer_after_cancel_request(tmp):
    c = Acp(tmp, args=["--deviation", "no_answer_after_cancel_request"])
    try:
        sid = c.handshake(tmp)
        prompt(c, 60, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 60}})
        expect(c.response(60, 3) is None, "the request named by $/cancel_request was answered")
        prompt(c, 61, sid, "hello")
        r = c.response(61, 5)
        expect(r and r["result"]["stopReason"] == "end_turn", "next prompt: %r" % (r,))
        # session/cancel still gets its cancelled answer (a different rule)
        prompt(c, 62, sid, "wait 10 seconds")
        time.sleep(0.3)
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        r = c.response(62, 5)
        expect(r and r["result"]["stopReason"] == "cancelled", "session/cancel path: %r" % (r,))
    finally:
        c.close()


@check
def acp_deviation_reader_deadlock(tmp):
    c = Acp(tmp, args=["--deviation", "reader_deadlock"], caps={"fs": {"readTextFile": True}})
    try:
        sid = c.handshake(tmp)
        prompt(c, 70, sid, "Read the file notes.txt")
        got = c.wait_for(lambda raw, m: isinstance(m, dict) and m.get("method") == "fs/read_text_file", 5)
        expect(got is not None, "no fs/read_text_file request")
        expect(c.response(70, 2.5) is None, "the prompt was answered")
        c.send({"jsonrpc": "2.0", "id": 71, "method": "_probe", "params": {}})
        expect(c.response(71, 1.5) is None, "a later request was answered")
    finally:
        code = c.close(10)
    expect(code is not None, "stuck agent did not exit on stdin close")


@check
def acp_deviation_zero_id_is_notification(tmp):
    c = Acp(tmp, args=["--deviation", "zero_id_is_notification"])
    try:
        c.handshake(tmp)
        expect(c.request(0, "_probe", {}, 1.5) is None, "id 0 was answered")
        expect(c.request(0, "session/list", {}, 1.0) is None, "session/list id 0 was answered")
        r = c.request(5, "_probe", {}, 2)
        expect(r and r["error"]["code"] == -32601, "id 5: %r" % (r,))
        r = c.request(None, "_probe", {}, 2)
        expect(r is not None, "id null should still be answered")
    finally:
        c.close()
    ref = Acp(tmp)
    try:
        ref.handshake(tmp)
        expect(ref.request(0, "_probe", {}, 2) is not None, "reference did not answer id 0")
    finally:
        ref.close()


@check
def acp_deviation_null_id_mishandled(tmp):
    c = Acp(tmp, args=["--deviation", "null_id_mishandled"])
    try:
        c.handshake(tmp)
        c.send({"jsonrpc": "2.0", "id": None, "method": "_probe_null", "params": {}})
        got = c.wait_for(lambda raw, m: isinstance(m, dict) and "error" in m
                         and (m["error"].get("data") or {}).get("method") == "_probe_null", 3)
        expect(got is not None, "no answer at all to the id-null request")
        expect("id" not in got[1], "the answer kept its id: %r" % (got[1],))
        c.send_raw("{not json")
        got = c.wait_for(lambda raw, m: isinstance(m, dict) and m.get("error", {}).get("code") == -32700, 3)
        expect(got and "id" in got[1] and got[1]["id"] is None, "parse error must still carry id null")
        r = c.request(9, "_probe", {}, 2)
        expect(r is not None, "id 9 should be answered")
    finally:
        c.close()


@check
def acp_deviation_silent(tmp):
    c = Acp(tmp, args=["--deviation", "silent"])
    try:
        c.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}})
        time.sleep(1.5)
        expect(not c.snapshot(), "silent agent wrote something")
    finally:
        code = c.close(10)
    expect(code == 0, "silent agent did not exit on stdin close (%r)" % code)


@check
def acp_list(tmp):
    out = subprocess.run([sys.executable, AGENT, "--list"], capture_output=True, timeout=10, text=True).stdout
    names = {tuple(line.split("\t")[:2]) for line in out.splitlines()}
    with open(os.path.join(HERE, "variations.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    want = {(v["kind"], v["name"]) for v in doc if v["file"] == "acp_agent.py"}
    expect(names == want, "--list %r differs from variations.json %r" % (names, want))


# ---------------------------------------------------------------------------
# CWX
# ---------------------------------------------------------------------------

class Cwx:
    def __init__(self, tmp, args):
        self.err = open(os.path.join(tmp, "host-%d.log" % time.monotonic_ns()), "wb")
        self.proc = subprocess.Popen([sys.executable, HOST, "--tier", "plugin", "--max-lifetime", "60", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        out = self.proc.stdout
        while True:
            head = out.read(8)
            if len(head) < 8:
                break
            if head[:4] != b"CWX1":
                self.q.put(("bad", head))
                break
            n = struct.unpack("<I", head[4:])[0]
            if n > 1 << 24:
                self.q.put(("bad", head))
                break
            self.q.put(("msg", json.loads(out.read(n).decode("utf-8"))))
        self.q.put(("eof", None))

    def send(self, obj):
        data = json.dumps(obj).encode("utf-8")
        self.proc.stdin.write(b"CWX1" + struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()

    def next(self, timeout=5.0):
        try:
            kind, msg = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind != "msg":
            return None
        return msg

    def close(self, timeout=10.0):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            code = None
        self.err.close()
        return code


def write_ext(tmp, name, tools=1, commands=1, hooks=1):
    ext = {"cwx_extension": 1, "name": name,
           "tools": [{"name": "t%d" % i, "description": "", "input_schema": {"type": "object"}, "behaviour": "echo"}
                     for i in range(tools)],
           "commands": [{"name": "c%d" % i, "description": "", "behaviour": "greet"} for i in range(commands)],
           "hooks": [{"name": "h%d" % i, "description": "", "behaviour": "rules"} for i in range(hooks)]}
    path = os.path.join(tmp, name + ".json")
    data = json.dumps(ext).encode()
    with open(path, "wb") as fh:
        fh.write(data)
    return path, hashlib.sha256(data).hexdigest()


def cwx_activate(tmp, args, entry):
    """Handshake, activate `entry`, answer every registration; returns (kinds+names, result)."""
    h = Cwx(tmp, args)
    regs = []
    try:
        hello = h.next(20)
        expect(hello and hello.get("method") == "host/hello", "no host/hello: %r" % (hello,))
        h.send({"jsonrpc": "2.0", "id": 1, "method": "host/initialize",
                "params": {"protocol": 1, "limits": {"max_frame": 1 << 20, "max_inflight": 16,
                                                     "dispose_deadline_ms": 2000, "activate_deadline_ms": 4000}}})
        got_init = got_ready = False
        for _ in range(4):
            m = h.next(10)
            if m is None:
                break
            got_init |= m.get("id") == 1 and "result" in m
            got_ready |= m.get("method") == "host/ready"
            if got_init and got_ready:
                break
        expect(got_init and got_ready, "initialize/ready missing")
        owner = {"plugin_id": "p1", "generation": 1, "owner_token": "0123456789abcdef0123456789abcdef"}
        h.send({"jsonrpc": "2.0", "id": 2, "method": "ext/activate",
                "params": {"owner": owner, "plugin_name": "p1", "entry": {"path": entry[0], "sha256": entry[1]},
                           "config": {}}})
        handle = 100
        result = None
        end = time.monotonic() + 8
        while time.monotonic() < end:
            m = h.next(max(0.1, end - time.monotonic()))
            if m is None:
                break
            if m.get("method") == "registry/register":
                regs.append((m["params"]["kind"], m["params"]["spec"]["name"]))
                handle += 1
                h.send({"jsonrpc": "2.0", "id": m["id"], "result": {"handle": handle}})
            elif m.get("id") == 2:
                result = m.get("result")
                break
        h.send({"jsonrpc": "2.0", "id": 3, "method": "host/shutdown", "params": {}})
        m = None
        for _ in range(3):
            m = h.next(3)
            if m is None or m.get("id") == 3:
                break
        expect(m is not None and m.get("id") == 3, "host/shutdown not answered")
    finally:
        code = h.close()
    expect(code == 0, "host exit code %r" % code)
    return regs, result


@check
def cwx_default_and_orders(tmp):
    entry = write_ext(tmp, "one_each")
    want = {None: ["tool", "command", "hook"],
            "order_hook_command_tool": ["hook", "command", "tool"],
            "order_tool_hook_command": ["tool", "hook", "command"],
            "order_command_tool_hook": ["command", "tool", "hook"]}
    for variant, kinds in want.items():
        regs, result = cwx_activate(tmp, ["--variant", variant] if variant else [], entry)
        expect([k for k, _ in regs] == kinds, "%s: registered %r" % (variant, regs))
        expect(result and result.get("status") == "ok", "%s: activation %r" % (variant, result))
    # with several items of each kind, kinds stay grouped in the variant's order
    entry = write_ext(tmp, "two_each", 2, 2, 2)
    regs, _ = cwx_activate(tmp, ["--variant", "order_hook_command_tool"], entry)
    expect([k for k, _ in regs] == ["hook"] * 2 + ["command"] * 2 + ["tool"] * 2, "grouping: %r" % regs)


@check
def cwx_two_of_each(tmp):
    for counts in ((1, 1, 1), (3, 0, 2)):
        entry = write_ext(tmp, "ext_%d%d%d" % counts, *counts)
        regs, result = cwx_activate(tmp, ["--variant", "two_of_each"], entry)
        kinds = [k for k, _ in regs]
        expect(kinds.count("tool") == 2 and kinds.count("command") == 2 and kinds.count("hook") == 2
               and len(kinds) == 6, "two_of_each %r: %r" % (counts, regs))
        names = [n for k, n in regs if k != "hook"]
        expect(len(set(names)) == len(names), "duplicate names %r" % names)
        expect(result["status"] == "ok" and len(result["tools"]) == 2 and len(result["commands"]) == 2,
               "activation result %r" % (result,))


@check
def cwx_fallback_entry(tmp):
    path = os.path.join(tmp, "bundle.js")
    data = b"export function apply(api, config) {}\n"
    with open(path, "wb") as fh:
        fh.write(data)
    regs, result = cwx_activate(tmp, [], (path, hashlib.sha256(data).hexdigest()))
    expect([k for k, _ in regs] == ["tool", "tool", "command", "hook"], "fallback registrations %r" % regs)
    regs, result = cwx_activate(tmp, ["--no-fallback"], (path, hashlib.sha256(data).hexdigest()))
    expect(not regs and result["status"] == "failed", "--no-fallback: %r %r" % (regs, result))


@check
def cwx_silent(tmp):
    h = Cwx(tmp, ["--deviation", "silent"])
    try:
        h.send({"jsonrpc": "2.0", "id": 1, "method": "host/ping", "params": {}})
        expect(h.next(1.5) is None, "silent host wrote a frame")
    finally:
        code = h.close(10)
    expect(code == 0, "silent host did not exit on stdin close (%r)" % code)


# ---------------------------------------------------------------------------
# agent socket
# ---------------------------------------------------------------------------

def as_start(tmp, args):
    d = tempfile.mkdtemp(dir=tmp)
    os.chmod(d, 0o700)
    path = os.path.join(d, "agent.sock")
    err = open(os.path.join(tmp, "as-%d.log" % time.monotonic_ns()), "wb")
    proc = subprocess.Popen([sys.executable, AS_SERVER, path, "--max-lifetime", "60", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp)
    end = time.monotonic() + 20
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.05)
    expect(os.path.exists(path), "socket not created")
    return proc, path, err


def as_stop(proc, path, err):
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        code = None
    err.close()
    return code


def as_call(path, method, params, rid=1, timeout=5.0, shut_wr=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    try:
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
                             separators=(",", ":")).encode() + b"\n")
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        buf = b""
        try:
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except socket.timeout:
            pass
        return buf
    finally:
        s.close()


@check
def as_correct(tmp):
    proc, path, err = as_start(tmp, [])
    try:
        expect(oct(os.stat(path).st_mode & 0o777) == oct(0o600), "socket mode is not 0600")
        r = json.loads(as_call(path, "agent/initialize", {"protocolVersion": 2, "vibeVersion": "0"}))
        expect(r["id"] == 1 and r["result"]["protocolVersion"] == 2, "initialize %r" % r)
        expect(r["result"]["workspace"] == tmp and r["result"]["python"], "workspace/python %r" % r)
        r = json.loads(as_call(path, "sandbox/execute", {"command": "echo hi; echo err >&2; exit 3", "cwd": tmp,
                                                          "timeout": 10}, rid=2))
        expect(r["result"] == {"exitCode": 3, "stdout": "hi\n", "stderr": "err\n"}, "execute %r" % r)
        r = json.loads(as_call(path, "sandbox/execute", {"command": "sleep 5", "cwd": tmp, "timeout": 0.5}, rid=3))
        expect(r["error"]["code"] == -32001, "timeout %r" % r)
        with open(os.path.join(tmp, "f.txt"), "wb") as fh:
            fh.write(b"hello")
        r = json.loads(as_call(path, "sandbox/readFile", {"path": os.path.join(tmp, "f.txt"), "maxBytes": 3}, rid=4))
        expect(base64.b64decode(r["result"]["contentBase64"]) == b"hel", "readFile %r" % r)
        r = json.loads(as_call(path, "sandbox/readFile", {"path": os.path.join(tmp, "nope"), "maxBytes": 3}, rid="s"))
        expect(r["id"] == "s" and r["result"]["contentBase64"] is None, "missing file %r" % r)
        r = json.loads(as_call(path, "tools/call", {"callbackId": "cb1", "name": "client.echo", "input": {"a": 1},
                                                    "toolCallId": "tc1", "caller": None}, rid=5))
        expect(r["result"]["output"] == {"a": 1} and r["result"]["error"] is None, "tools/call %r" % r)
        r = json.loads(as_call(path, "nope/x", {}, rid=6))
        expect(r["error"]["code"] == -32601, "unknown %r" % r)
    finally:
        code = as_stop(proc, path, err)
    expect(code == 0 and not os.path.exists(path), "server did not exit cleanly (%r)" % code)


@check
def as_silent(tmp):
    proc, path, err = as_start(tmp, ["--deviation", "silent"])
    try:
        expect(as_call(path, "agent/initialize", {"protocolVersion": 2, "vibeVersion": "0"},
                       timeout=1.0) == b"", "silent server answered (connection kept open)")
        expect(as_call(path, "agent/initialize", {"protocolVersion": 2, "vibeVersion": "0"},
                       timeout=3.0, shut_wr=True) == b"", "silent server answered (after end of input)")
    finally:
        code = as_stop(proc, path, err)
    expect(code == 0, "silent server did not exit on stdin close (%r)" % code)


SPEC_ROOTS = {"docs/protocol/v1/": "/work/wt/acp-docs/docs/protocol/v1/",
              "schema.json": "/work/shared/specs/acp/schema.json",
              "cwx/protocol.rs.txt": "/work/shared/specs/cwx/protocol.rs.txt",
              "agent-socket/agent_socket.py": "/work/shared/specs/agent-socket/agent_socket.py"}


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def sentence_found(sentence, source):
    """True/False when the source file is available here, None when it cannot be checked."""
    src = source.split(" ")[0].split("#")[0]
    for prefix, real in SPEC_ROOTS.items():
        if not src.startswith(prefix):
            continue
        target = real + src[len(prefix):] if prefix.endswith("/") else real
        if not os.path.isfile(target):
            return None
        with open(target, encoding="utf-8") as fh:
            body = fh.read()
        if target.endswith(".json"):
            return any(sentence in text for text in _strings(json.loads(body)))
        squash = lambda t: " ".join(t.split())
        return squash(sentence) in squash(body)
    return None  # e.g. the JSON-RPC 2.0 specification: not a file here


@check
def variations_json(tmp):
    with open(os.path.join(HERE, "variations.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    keys = {"file", "name", "kind", "sentence", "source", "level", "what", "how_to_provoke"}
    checked = 0
    for v in doc:
        expect(set(v) == keys, "variations.json entry keys %r" % sorted(v))
        expect(v["kind"] in ("variant", "deviation"), "kind %r" % v["kind"])
        expect(os.path.isfile(os.path.join(HERE, v["file"])), "no file %s" % v["file"])
        if v["kind"] == "deviation":
            expect(v["sentence"], "%s has no sentence" % v["name"])
        if v["sentence"]:
            found = sentence_found(v["sentence"], v["source"])
            expect(found is not False, "%s: sentence not found in %s" % (v["name"], v["source"]))
            checked += found is True
    for f, flag in (("cwx_host.py", ["--list"]), ("as_server.py", ["--list"])):
        out = subprocess.run([sys.executable, os.path.join(HERE, f), *flag], capture_output=True,
                             timeout=10, text=True).stdout
        names = {tuple(line.split("\t")[:2]) for line in out.splitlines()}
        want = {(v["kind"], v["name"]) for v in doc if v["file"] == f}
        expect(names == want, "%s --list %r differs from variations.json %r" % (f, names, want))


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default=None)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    checks = [c for c in CHECKS if not args.k or args.k in c.__name__]
    if args.list:
        print("\n".join(c.__name__ for c in checks))
        return 0
    results = {}

    def run(fn):
        tmp = tempfile.mkdtemp(prefix="round2-")
        t0 = time.monotonic()
        try:
            fn(tmp)
            results[fn.__name__] = ("ok", time.monotonic() - t0, "")
        except Exception as e:
            detail = str(e) if isinstance(e, Fail) else traceback.format_exc()
            results[fn.__name__] = ("FAIL", time.monotonic() - t0, detail)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in checks]
    for t in threads:
        t.start()
    end = time.monotonic() + TOTAL_BUDGET
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    failed = 0
    for fn in checks:
        status, took, detail = results.get(fn.__name__, ("TIMEOUT", TOTAL_BUDGET, "did not finish"))
        print("%-48s %-7s %5.1fs %s" % (fn.__name__, status, took, detail.strip().splitlines()[0] if detail else ""))
        if status != "ok":
            failed += 1
            if detail and "\n" in detail.strip():
                print(detail)
    print("%d/%d checks passed" % (len(checks) - failed, len(checks)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
