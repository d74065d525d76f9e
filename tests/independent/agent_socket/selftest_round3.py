#!/usr/bin/env python3
"""Self test of the round-3 deviations of server.py (deviations-round3.json).

    python3 selftest_round3.py                    # reference passes every round-3 check,
                                                  # and each round-3 deviation fails its own
    python3 selftest_round3.py --deviation NAME   # one round-3 deviation only

It reuses the client of selftest.py (Server, exchange, vibe_reply, ...). Every
server is stopped and every temporary directory removed; every wait is bounded
(the whole run takes well under a minute).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import selftest as T  # noqa: E402
from selftest import CheckFailed, expect  # noqa: E402

ROUND3_FILE = HERE / "deviations-round3.json"
HOME_FILE = "agent-socket-round3-home.txt"
HOME_TEXT = b"home sweet home\n"


def r3_id_zero(srv) -> str:
    raw, _ = T.call(srv, "agent/initialize", T.init_params(), rid=0)
    reply = T.vibe_reply(raw, 0)
    expect(reply.kind == "result", f"agent/initialize with id 0: {reply!r}")
    # a second exchange with an ordinary id still works either way
    T.result_of(srv, "agent/initialize", T.init_params())
    return "id 0 echoed as 0"


def r3_notification(srv) -> str:
    line = T.encode({"jsonrpc": "2.0", "method": "agent/initialize", "params": T.init_params()})
    raw = T.exchange(srv.sock, line, timeout=3.0)
    expect(raw == b"", f"a notification got a reply: {raw[:200]!r}")
    return "no reply to a notification"


def r3_batch_notifications(srv) -> str:
    batch = [{"jsonrpc": "2.0", "method": "agent/initialize", "params": T.init_params()},
             {"jsonrpc": "2.0", "method": "sandbox/readFile",
              "params": {"path": "x", "maxBytes": 1}}]
    raw = T.exchange(srv.sock, T.encode(batch), timeout=3.0)
    expect(raw == b"", f"a batch of notifications got a reply: {raw[:200]!r}")
    # a batch with one request still gets an array of one reply
    batch[1]["id"] = 91
    raw = T.exchange(srv.sock, T.encode(batch), timeout=5.0)
    replies = json.loads(raw)
    expect(isinstance(replies, list) and len(replies) == 1 and replies[0].get("id") == 91,
           f"mixed batch: {raw[:200]!r}")
    return "nothing for notifications only; one reply for one request"


def r3_timeout_int(srv) -> str:
    result = T.vibe_execute(T.result_of(srv, "sandbox/execute",
                                        {"command": "echo int", "cwd": ".", "timeout": 5}))
    expect(result["exitCode"] == 0 and result["stdout"] == "int\n", f"result {result!r}")
    return "timeout 5 (an integer) runs the command"


def r3_command_nonascii(srv) -> str:
    text = "h\u00e9llo \u4e2d\u6587 \U0001F600"
    result = T.vibe_execute(T.result_of(srv, "sandbox/execute",
                                        {"command": f"printf '%s\\n' '{text}'", "cwd": ".",
                                         "timeout": 5.0}))
    expect(result["stdout"] == text + "\n", f"stdout {result['stdout']!r}, want {text!r}")
    return "non-ASCII command text reaches the shell"


def r3_maxbytes_zero(srv) -> str:
    (srv.workspace / "r3-zero.txt").write_bytes(b"not empty")
    content = T.vibe_read(T.result_of(srv, "sandbox/readFile",
                                      {"path": "r3-zero.txt", "maxBytes": 0}), 0)
    expect(content == b"", f"maxBytes 0 of an existing file: {content!r}, want b''")
    missing = T.vibe_read(T.result_of(srv, "sandbox/readFile",
                                      {"path": "r3-missing.txt", "maxBytes": 0}), 0)
    expect(missing is None, f"maxBytes 0 of a missing file: {missing!r}")
    return "maxBytes 0: '' for a file, null for no file"


def r3_tilde(srv) -> str:
    content = T.vibe_read(T.result_of(srv, "sandbox/readFile",
                                      {"path": "~/" + HOME_FILE, "maxBytes": 100}), 100)
    expect(content == HOME_TEXT, f"~/{HOME_FILE}: {content!r}, want {HOME_TEXT!r}")
    return "~ expanded against the sandbox's home"


def r3_input_null(srv) -> str:
    caller = {"sessionId": "s", "rootSessionId": "s", "parentSessionId": None, "name": None,
              "agentType": None}
    result = T.vibe_tool_result(T.result_of(srv, "tools/call",
                                            T.tool_params("demo.whoami", None, caller)))
    expect(result["error"] is None and isinstance(result["output"], dict)
           and result["output"].get("kind") == "root", f"whoami with input null: {result!r}")
    return "input null is a JSON value: demo.whoami answers"


CHECKS = {
    "r3_id_zero": r3_id_zero,
    "r3_notification": r3_notification,
    "r3_batch_notifications": r3_batch_notifications,
    "r3_timeout_int": r3_timeout_int,
    "r3_command_nonascii": r3_command_nonascii,
    "r3_maxbytes_zero": r3_maxbytes_zero,
    "r3_tilde": r3_tilde,
    "r3_input_null": r3_input_null,
}

CHECK_OF = {
    "id-zero-null": "r3_id_zero",
    "notification-answered": "r3_notification",
    "batch-empty-array": "r3_batch_notifications",
    "timeout-int-refused": "r3_timeout_int",
    "command-nonascii-dropped": "r3_command_nonascii",
    "readfile-maxbytes-zero-null": "r3_maxbytes_zero",
    "readfile-tilde-literal": "r3_tilde",
    "tool-input-null-refused": "r3_input_null",
}


def run_check(srv, name: str) -> tuple[bool, str]:
    try:
        return True, CHECKS[name](srv)
    except CheckFailed as e:
        return False, str(e)
    except Exception as e:  # noqa: BLE001
        return False, f"{type(e).__name__}: {e}"


def check_round3_file() -> list[tuple[str, bool, str]]:
    import server  # noqa: E402
    entries = json.loads(ROUND3_FILE.read_text())
    names = [e["name"] for e in entries]
    out = [("round-3 names", sorted(names) == sorted(server.DEVIATIONS_ROUND3)
            and not set(names) & set(server.DEVIATIONS),
            f"{len(names)} entries; server has {len(server.DEVIATIONS_ROUND3)}")]
    texts = {p.name: " ".join(p.read_text().split()) for p in T.SOURCES.glob("*.py")}
    bad = []
    for e in entries:
        for key in ("name", "sentence", "source", "level", "what", "how_to_provoke", "only"):
            if not e.get(key):
                bad.append(f"{e.get('name')}: no {key}")
        src = e["source"].split(",")[0].strip()
        if src in texts and " ".join(e["sentence"].split()) not in texts[src]:
            bad.append(f"{e['name']}: sentence not in {src}")
    out.append(("round-3 entries", not bad, "; ".join(bad) or "fields present, quotes found"))
    out.append(("every round-3 deviation has a check", set(CHECK_OF) == set(names),
                f"{sorted(set(names) ^ set(CHECK_OF))}" if set(CHECK_OF) != set(names) else "yes"))
    return out


def run_deviation(root: Path, tag: str, name: str) -> tuple[bool, str, list[str]]:
    srv = T.Server(root, tag, deviation=name)
    try:
        check = CHECK_OF[name]
        passed, detail = run_check(srv, check)
        # every other round-3 check must still pass: one deviation, nothing else
        also = [other for other in CHECKS if other != check and not run_check(srv, other)[0]]
    finally:
        srv.stop()
    return (not passed) and not also, f"{check}: {detail}", also


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deviation")
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agent-socket-r3-"))
    home = root / "home"
    home.mkdir()
    (home / HOME_FILE).write_bytes(HOME_TEXT)
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)  # the servers inherit it: the sandbox's own home
    ok = True
    t0 = time.monotonic()
    try:
        ref = T.Server(root, "ref")
        try:
            rows = [(name, *run_check(ref, name)) for name in CHECKS]
            rows += check_round3_file()
            ok &= T.show(rows, "reference (round 3):")
        finally:
            rc = ref.stop()
        ok &= T.show([("reference exit", rc == 0, f"exit code {rc} on SIGTERM")], "")
        names = [args.deviation] if args.deviation else list(CHECK_OF)
        print("round-3 deviations (the reference passes the check; the deviation fails it "
              "and only it):")
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {n: pool.submit(run_deviation, root, f"r3d{i}", n)
                       for i, n in enumerate(names)}
            for n in names:
                shown, detail, also = futures[n].result(timeout=120)
                ok &= shown
                extra = f"  (also fails: {', '.join(also)})" if also else ""
                print(f"  [{'ok' if shown else 'FAIL'}] {n}: {detail}{extra}")
    finally:
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'PASS' if ok else 'FAILED'} ({time.monotonic() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
