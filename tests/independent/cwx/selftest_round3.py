#!/usr/bin/env python3
"""Self-test of the round-3 host deviations (deviations-round3.json).

  python3 selftest_round3.py                    the reference host through every round-3 scenario
                                                (no finding allowed), each round-3 deviation in
                                                its own scenario (a finding required), and each
                                                deviation through the other round-3 scenarios and
                                                `basic` (no finding allowed: one deviation only).
  python3 selftest_round3.py --deviation NAME   one round-3 deviation, with its findings.

It reuses selftest.py's session class S (a host read through core.Channel with the strict
host->core checks).  Every process is started and ended here; every wait is bounded.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import core as C  # noqa: E402
import selftest as T  # noqa: E402
from selftest import Abort, is_err, is_ok  # noqa: E402

ROUND3 = os.path.join(HERE, "deviations-round3.json")


def new_owner(gen):
    return C.new_owner("toy", gen)


def activate_with_config(s, owner, config):
    params = {"owner": owner, "plugin_name": "toy",
              "entry": {"path": T.TOY, "sha256": C.sha256_file(T.TOY)}}
    if config is not None:
        params["config"] = config
    out = s.call("ext/activate", params, s.act_ms / 1000.0 + 1.5)
    if not (is_ok(out) and out[1].get("status") == "ok"):
        s.fail("ext/activate: %r" % (out,))
        raise Abort()
    return owner


# ---------------------------------------------------------------------------
# Scenarios

def r3_frame_exact(s):
    limit = 4096
    s.handshake(max_frame=limit)
    owner = s.activate_ok()
    rid = 9000
    bare = {"jsonrpc": "2.0", "id": rid,
            "result": {"content": [{"type": "text", "text": ""}], "is_error": False}}
    n = limit - len(json.dumps(bare, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    params = {"handle": s.handles(owner)[("tool", "big")], "call_id": "exact",
              "input": {"bytes": n, "char": "x"}, "deadline_ms": 5000}
    out = s.ch.call("tool/call", params, 5.0, rid=rid)
    s.expect(is_ok(out) and out[1].get("content") == [{"type": "text", "text": "x" * n}],
             "a response of exactly max_frame (%d) bytes: %r (want the result)"
             % (limit, (out[0], str(out[1])[:120])))
    params["input"] = {"bytes": n + 1, "char": "x"}
    out = s.ch.call("tool/call", params, 5.0, rid=rid + 1)
    s.expect(is_err(out), "a response of max_frame + 1 bytes: %r (want an error)" % (out[0],))


def r3_id_zero(s):
    s.handshake()
    out = s.ch.call("host/ping", {}, 2.0, rid=0)
    s.expect(is_ok(out), "host/ping with id 0: %r (want a result with id 0)" % (out,))
    s.expect(is_ok(s.call("host/ping", {})), "host/ping with an ordinary id")


def r3_hello_modules(s):
    s.handshake()
    s.expect(s.ch.hello is not None and
             s.ch.hello.get("builtin_modules") == T.FIX["modules_sorted"],
             "host/hello builtin_modules %r (want %r)"
             % (s.ch.hello and s.ch.hello.get("builtin_modules"), T.FIX["modules_sorted"]))
    s.expect(is_ok(s.call("host/ping", {})), "host/ping")


def r3_config(s):
    s.handshake()
    first = activate_with_config(s, new_owner(1), {"theme": "dark"})
    out = s.tool(first, "config", {})
    s.expect(is_ok(out) and out[1].get("structured", {}).get("config") == {"theme": "dark"},
             "config of the first activation: %r" % (out,))
    out = s.call("ext/deactivate", {"owner": first}, s.disp_ms / 1000.0 + 1.5)
    s.expect(is_ok(out), "ext/deactivate: %r" % (out,))
    for gen, config in ((2, None), (3, {})):
        if gen == 3:
            out = s.call("ext/deactivate", {"owner": second}, s.disp_ms / 1000.0 + 1.5)
            s.expect(is_ok(out), "ext/deactivate: %r" % (out,))
        second = activate_with_config(s, new_owner(gen), config)
        out = s.tool(second, "config", {})
        s.expect(is_ok(out) and out[1].get("structured", {}).get("config") == {},
                 "config of activation %d (config %s): %r (want {})"
                 % (gen, "absent" if config is None else "{}", out[1].get("structured")
                    if is_ok(out) else out))


def r3_unregister(s):
    s.handshake()
    owner = s.activate_ok()
    victim = s.handles(owner)[("tool", "error_result")]
    out = s.command(owner, "retire", "error_result")
    s.expect(is_ok(out) and out[1].get("kind") == "success", "retire: %r" % (out,))
    out = s.call("tool/call", {"handle": victim, "call_id": "after-unregister", "input": {},
                               "deadline_ms": 5000})
    s.expect(is_err(out, -32001), "tool/call on an unregistered handle: %r (want -32001)"
             % (out,))
    out = s.tool(owner, "echo", {"text": "still here"})
    s.expect(is_ok(out), "echo after the unregistration: %r" % (out,))


def r3_string_input(s):
    s.handshake()
    owner = s.activate_ok()
    text = "plain \u2713 string"
    out = s.tool(owner, "echo", text)
    s.expect(is_ok(out) and out[1].get("structured") == text
             and out[1].get("content") == [{"type": "text",
                                            "text": json.dumps(text, ensure_ascii=False)}],
             "echo with a string input: %r (want a result)" % (out,))


def r3_cancel_two(s):
    s.handshake()
    owner = s.activate_ok()
    handle = s.handles(owner)[("tool", "sleep")]

    def sleeper(call_id):
        return s.ch.request("tool/call", {"handle": handle, "call_id": call_id,
                                          "input": {"ms": 2500}, "deadline_ms": 10000})
    first = sleeper("first")
    time.sleep(0.1)
    second = sleeper("second")
    time.sleep(0.2)
    s.ch.notify("$/cancel", {"id": first.id})
    s.expect(s.ch.wait(first, 1.2) and is_err(first.outcome, -32800),
             "the cancelled call (id %d): %r within 1.2 s (want -32800)"
             % (first.id, first.outcome))
    s.expect(s.ch.wait(second, 5.0) and is_ok(second.outcome),
             "the other call (id %d), not cancelled: %r (want its result)"
             % (second.id, second.outcome))


def r3_shutdown(s):
    s.handshake()
    t0 = time.monotonic()
    out = s.call("host/shutdown", {}, 2.0, allow_timeout=True)
    s.expect(is_ok(out), "host/shutdown: %r after %.1f s (want a result within its 2 s)"
             % (out, time.monotonic() - t0))
    s.exits_within(3.0, "host/shutdown")


MODULE_ARGS = object()

SCENARIOS = {
    "r3_frame_exact": r3_frame_exact,
    "r3_id_zero": r3_id_zero,
    "r3_hello_modules": r3_hello_modules,
    "r3_config": r3_config,
    "r3_unregister": r3_unregister,
    "r3_string_input": r3_string_input,
    "r3_cancel_two": r3_cancel_two,
    "r3_shutdown": r3_shutdown,
}

SCENARIO_OF = {
    "frame_limit_off_by_one": "r3_frame_exact",
    "id_zero_unanswered": "r3_id_zero",
    "hello_module_dropped": "r3_hello_modules",
    "config_leaks": "r3_config",
    "unregister_handle_still_served": "r3_unregister",
    "string_input_refused": "r3_string_input",
    "cancel_wrong_call": "r3_cancel_two",
    "shutdown_late_answer": "r3_shutdown",
}


def run(name, dev=None, tier="plugin"):
    if name == "basic":
        return T.run_scenario("basic", tier, dev)[0]
    extra, modules = (), ()
    if name == "r3_hello_modules":
        extra, modules = ("--builtin-modules", T.FIX["modules"]), T.FIX["modules_sorted"]
    s = T.S(tier, dev, extra=extra, modules=modules)
    try:
        SCENARIOS[name](s)
    except Abort:
        pass
    except Exception as e:  # noqa: BLE001
        s.fail("selftest error: %r" % e)
    finally:
        s.close()
    try:
        os.unlink(s.logpath)
    except OSError:
        pass
    return list(s.ch.findings) + s.issues


def check_round3_json():
    import host as H
    problems = []
    with open(ROUND3) as f:
        devs = json.load(f)
    lines = {}
    with open(T.SPEC, encoding="utf-8") as f:
        for raw in f:
            m = re.match(r"^(\d+) (.*)$", raw.rstrip("\n"))
            if m:
                lines.setdefault(int(m.group(1)), m.group(2))
    for d in devs:
        for k in ("name", "side", "sentence", "source", "level", "what", "how_to_provoke", "only"):
            if not d.get(k):
                problems.append("%s: missing %s" % (d.get("name"), k))
        m = re.match(r"^protocol\.rs:(\d+): (.*)$", d.get("sentence", ""))
        if not m or m.group(2) not in lines.get(int(m.group(1)), ""):
            problems.append("%s: sentence not found on its line" % d.get("name"))
    names = [d["name"] for d in devs]
    if sorted(names) != sorted(H.DEVIATIONS_ROUND3) or set(names) & set(H.DEVIATIONS):
        problems.append("names differ from host.DEVIATIONS_ROUND3")
    if set(names) != set(SCENARIO_OF):
        problems.append("a round-3 deviation has no scenario")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deviation")
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    T.TMP = tempfile.mkdtemp(prefix="cwx-r3-")
    t0 = time.monotonic()
    bad = 0
    try:
        T.FIX.update(T.make_fixtures())
        problems = check_round3_json()
        print("deviations-round3.json: %s" % ("ok" if not problems else "PROBLEMS"))
        for p in problems:
            print("  " + p)
        bad += len(problems)
        devs = [args.deviation] if args.deviation else list(SCENARIO_OF)
        tasks = [("ref", sc, None) for sc in list(SCENARIOS) + ["basic"]]
        for dev in devs:
            for sc in list(SCENARIOS) + ["basic"]:
                tasks.append(("dev" if sc == SCENARIO_OF[dev] else "other", sc, dev))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            results = list(ex.map(lambda t: (t, run(t[1], t[2])), tasks, timeout=240))
        for (kind, sc, dev), findings in results:
            if kind == "ref":
                ok = not findings
                label = "reference host     %-18s" % sc
            elif kind == "dev":
                ok = bool(findings)
                label = "dev %-30s in its scenario %s" % (dev, sc)
            else:
                # one deviation only: clean elsewhere (basic ends with host/shutdown)
                if dev == "shutdown_late_answer" and sc == "basic":
                    ok = bool(findings)
                    label = "dev %-30s in %-17s (shows it too)" % (dev, sc)
                else:
                    ok = not findings
                    label = "dev %-30s in %-17s (must be clean)" % (dev, sc)
                if ok and not args.deviation:
                    continue
            first = findings[0] if findings else ("-", "no finding")
            print("%-4s %s  [%s] %s" % ("ok" if ok else "FAIL", label, first[0], first[1][:150]))
            if not ok:
                bad += 1
                if len(findings) > 1:
                    print("      " + "\n      ".join("[%s] %s" % f for f in findings[1:4]))
        print("%d problem(s), %d runs, %.1f s" % (bad, len(tasks), time.monotonic() - t0))
    finally:
        shutil.rmtree(T.TMP, ignore_errors=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
