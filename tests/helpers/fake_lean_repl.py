"""A scripted fake Lean REPL that speaks the leanprover-community/repl JSON protocol (no Lean
here), and a miniF2F statement for it; `CRASH`, `CRASHONCE`, `HANG`, `GOOD` and `sorry` in a
command pick its answer. Run as `python fake_repl.py LOG`: it appends each command to LOG."""

FAKE = r'''
import json, os, sys, time
log = sys.argv[1]
n = 0
def reply(obj):
    print("some chatter before the reply")          # the parser skips non-JSON lines
    print(json.dumps(obj, indent=1))                # multi-line, as the real REPL's
    print(flush=True)
buf = []
for line in sys.stdin:
    if line.strip():
        buf.append(line); continue
    if not buf:
        continue
    cmd = json.loads("".join(buf)); buf = []
    code = cmd["cmd"]
    with open(log, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "cmd": code, "env": cmd.get("env")}) + "\n")
    n += 1
    if code.startswith("import"):
        reply({"env": 0}); continue
    if "CRASHONCE" in code and not os.path.exists(log + ".crashed"):
        open(log + ".crashed", "w").close()
        sys.stderr.write("PANIC at fake\n"); sys.exit(3)
    if "CRASH" in code and "CRASHONCE" not in code:
        sys.stderr.write("PANIC at fake\n"); sys.exit(3)
    if "HANG" in code:
        time.sleep(60)
    if "GOOD" in code or "CRASHONCE" in code:
        reply({"env": n, "messages": []})
    elif "sorry" in code:
        reply({"env": n, "sorries": [{"pos": {"line": 2, "column": 2}, "goal": "x = 1"}],
               "messages": [{"severity": "warning", "pos": {"line": 1, "column": 8},
                             "data": "declaration uses 'sorry'"}]})
    else:
        msg = "unsolved goals\nx : Nat\n⊢ x = 1 (command " + str(n) + ")"
        reply({"env": n, "messages": [{"severity": "error", "pos": {"line": 2, "column": 2}, "data": msg}]})
'''

STATEMENT = "theorem t1 (x : Nat) (h : x = 1) : x = 1 := by"
