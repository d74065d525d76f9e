#!/usr/bin/env python3
"""selftest_round3.py -- checks the round-3 deviations of agent.py (deviations-round3.json).

    python3 selftest_round3.py                    # reference clean in every round-3 scenario,
                                                  # each round-3 deviation shows its finding in
                                                  # its scenario and none in the others
    python3 selftest_round3.py --deviation NAME   # one round-3 deviation

It reuses selftest.py's client (AgentProc: schema validation of every message, the fake
editor, findings) and its Scenario class.  Every wait is bounded; the whole run takes
well under a minute.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import selftest as T  # noqa: E402
from selftest import AgentExited, Scenario, requests_of, stop_reason, updates_of  # noqa: E402

ROUND3_JSON = os.path.join(HERE, "deviations-round3.json")
FS_CAPS = {"fs": {"readTextFile": True, "writeTextFile": True}}


def r3_ids(s: Scenario):
    a = s.agent()
    a.initialize({})
    for rid in (-7, 0, -1):
        r = a.call("session/new", {"cwd": s.tmp, "mcpServers": []}, rid=rid, timeout=3.0)
        if r is None:
            s.find("id_not_echoed", f"no response carrying id {rid}")


def r3_version(s: Scenario):
    a = s.agent()
    r = a.initialize({})
    version = (r or {}).get("result", {}).get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or version != 1:
        s.find("protocol_version_not_integer", repr(version))


def r3_permission_ids(s: Scenario):
    a = s.agent()
    a.initialize(FS_CAPS)
    s.write("a.txt", "alpha\n")
    sid = a.new_session(s.tmp)
    _, during, _ = a.prompt(sid, "Read the file a.txt, then write 'done' to b.txt "
                                 "and ask me for permission first")
    last_announced, asked = None, 0
    for m in during:
        if m.get("method") == "session/update":
            update = (m.get("params") or {}).get("update") or {}
            if update.get("sessionUpdate") == "tool_call":
                last_announced = update.get("toolCallId")
        elif m.get("method") == "session/request_permission":
            asked += 1
            tid = ((m.get("params") or {}).get("toolCall") or {}).get("toolCallId")
            if tid != last_announced:
                s.find("permission_tool_call_id_mismatch",
                       f"permission #{asked} names {tid!r}; the tool call just announced is "
                       f"{last_announced!r}")
    if asked < 2:
        s.find("selftest_setup", f"expected two permission requests, saw {asked}")


def r3_fs_sessions(s: Scenario):
    a = s.agent()
    a.initialize(FS_CAPS)
    s.write("a.txt", "alpha\nbeta\n")
    sids = [a.new_session(s.tmp), a.new_session(s.tmp)]
    for sid in sids:
        _, during, _ = a.prompt(sid, "Read the file a.txt")
        reads = requests_of(during, "fs/read_text_file")
        if not reads:
            s.find("selftest_setup", "no fs/read_text_file")
        for m in reads:
            if (m.get("params") or {}).get("sessionId") != sid:
                s.find("fs_request_wrong_session",
                       f"fs/read_text_file for the turn of {sid} names "
                       f"{(m.get('params') or {}).get('sessionId')}")


def r3_terminal(s: Scenario):
    a = s.agent()
    a.initialize({"terminal": True})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "Run the command `echo hello-terminal` in a terminal")
    if stop_reason(response) != "end_turn":
        s.find("selftest_setup", f"stop reason {stop_reason(response)!r}")
    # AgentProc records "terminal_used_after_release" itself


def r3_cancel_two(s: Scenario):
    a = s.agent()
    a.initialize({})
    first, second = a.new_session(s.tmp), a.new_session(s.tmp)
    r1 = a.request("session/prompt", {"sessionId": first,
                                      "prompt": [{"type": "text", "text": "wait 3 seconds"}]})
    time.sleep(0.1)
    r2 = a.request("session/prompt", {"sessionId": second,
                                      "prompt": [{"type": "text", "text": "wait 3 seconds"}]})
    time.sleep(0.3)
    t0 = time.monotonic()
    a.notify("session/cancel", {"sessionId": first})
    resp1 = a.response_for(r1, 1.5)
    if stop_reason(resp1) != "cancelled":
        s.find("cancel_hit_wrong_session",
               f"the cancelled session's prompt: {stop_reason(resp1)!r} after "
               f"{time.monotonic() - t0:.1f} s (want cancelled at once)")
    resp2 = a.response_for(r2, 6.0)
    if stop_reason(resp2) != "end_turn":
        s.find("cancel_hit_wrong_session", f"the other session's prompt: {stop_reason(resp2)!r}")
    a.response_for(r1, 4.0)


def r3_message_ids(s: Scenario):
    a = s.agent()
    a.initialize({})
    sid = a.new_session(s.tmp)
    _, during, _ = a.prompt(sid, "hello \u00e9\u4e2d\u6587")
    chunks = updates_of(during, sid, "agent_message_chunk")
    ids = [c.get("messageId") for c in chunks]
    if len(chunks) < 2:
        s.find("selftest_setup", f"expected a reply in two chunks, got {len(chunks)}")
    elif len(set(ids)) != 1:
        s.find("message_split_ids", f"one reply, message ids {ids}")


def r3_list_cursor(s: Scenario):
    a = s.agent()
    a.initialize({})
    a.new_session(s.tmp)
    r = a.call("session/list", {})
    result = (r or {}).get("result") or {}
    if len(result.get("sessions") or []) != 1:
        s.find("selftest_setup", f"session/list: {result}")
    if "nextCursor" in result:
        r2 = a.call("session/list", {"cursor": result["nextCursor"]})
        s.find("next_cursor_on_last_page",
               f"1 session, nextCursor present; the next page holds "
               f"{len(((r2 or {}).get('result') or {}).get('sessions') or [])}")


SCENARIOS = {
    "r3_ids": r3_ids,
    "r3_version": r3_version,
    "r3_permission_ids": r3_permission_ids,
    "r3_fs_sessions": r3_fs_sessions,
    "r3_terminal": r3_terminal,
    "r3_cancel_two": r3_cancel_two,
    "r3_message_ids": r3_message_ids,
    "r3_list_cursor": r3_list_cursor,
}

EXPECT = {
    "negative_id_positive": ("r3_ids", "id_not_echoed"),
    "protocol_version_string": ("r3_version", "protocol_version_not_integer"),
    "permission_stale_tool_call_id": ("r3_permission_ids", "permission_tool_call_id_mismatch"),
    "fs_read_stale_session": ("r3_fs_sessions", "fs_request_wrong_session"),
    "terminal_output_after_release": ("r3_terminal", "terminal_used_after_release"),
    "cancel_wrong_session": ("r3_cancel_two", "cancel_hit_wrong_session"),
    "message_id_split": ("r3_message_ids", "message_split_ids"),
    "list_cursor_on_last_page": ("r3_list_cursor", "next_cursor_on_last_page"),
}


# Findings in another scenario that are the same broken message (every scenario starts with
# initialize), not a second deviation.
SAME_DEVIATION = {
    "protocol_version_string": lambda f: set(f) == {"schema"} and "protocolVersion" in f["schema"],
}


def run_scenario(name: str, dev: str | None, budget: float = 40.0) -> dict:
    scenario = Scenario(dev)

    def body():
        try:
            SCENARIOS[name](scenario)
        except AgentExited:
            scenario.find("agent_exited")
        except Exception as exc:  # noqa: BLE001
            scenario.find("selftest_error", f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(budget)
    if worker.is_alive():
        scenario.find("scenario_timeout", f"{name} exceeded {budget}s")
    return scenario.finish()


def check_round3_json() -> list[str]:
    import agent  # noqa: E402
    problems = []
    entries = json.load(open(ROUND3_JSON, encoding="utf-8"))
    names = [e.get("name") for e in entries]
    if sorted(names) != sorted(agent.DEVIATIONS_ROUND3) or set(names) & set(agent.DEVIATIONS):
        problems.append(f"names differ from agent.DEVIATIONS_ROUND3: {names}")
    if sorted(EXPECT) != sorted(agent.DEVIATIONS_ROUND3):
        problems.append("EXPECT and agent.DEVIATIONS_ROUND3 differ")
    for e in entries:
        for key in ("name", "sentence", "source", "level", "what", "how_to_provoke", "only"):
            if not isinstance(e.get(key), str) or not e.get(key):
                problems.append(f"{e.get('name')}: missing {key}")
        if e.get("level") not in ("MUST", "SHOULD", "MAY", "implied"):
            problems.append(f"{e.get('name')}: level {e.get('level')!r}")
        if e.get("level") == "implied" and not e.get("why_normative"):
            problems.append(f"{e.get('name')}: implied without why_normative")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deviation")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    t0 = time.monotonic()
    failures = 0
    for p in check_round3_json():
        print("FAIL deviations-round3.json:", p)
        failures += 1
    names = [args.deviation] if args.deviation else list(EXPECT)
    if any(n not in EXPECT for n in names):
        print("unknown round-3 deviation:", names)
        return 2
    tasks = [(sc, None) for sc in SCENARIOS] + [(sc, n) for n in names for sc in SCENARIOS]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = dict(zip(tasks, pool.map(lambda t: run_scenario(*t), tasks, timeout=200)))
    for sc in SCENARIOS:
        ref = results[(sc, None)]
        ok = not ref
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} reference {sc}" + ("" if ok else f": {json.dumps(ref)}"))
    for name in names:
        scen, code = EXPECT[name]
        var = results[(scen, name)]
        shown = code in var and code not in results[(scen, None)]
        elsewhere = {sc: results[(sc, name)] for sc in SCENARIOS
                     if sc != scen and results[(sc, name)]
                     and not SAME_DEVIATION.get(name, lambda f: False)(results[(sc, name)])}
        ok = shown and not elsewhere
        failures += not ok
        extra = sorted(set(var) - {code})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {code!r} in {scen} "
              f"{'shown' if shown else 'NOT shown'}: {var.get(code, '')[:150]}"
              + (f" [also: {', '.join(extra)}]" if extra else "")
              + (f" [findings in other scenarios: {json.dumps(elsewhere)[:300]}]"
                 if elsewhere else ""))
    print(f"{len(names)} round-3 deviation(s), {failures} problem(s), "
          f"{time.monotonic() - t0:.1f} s")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
