"""One step of each provider's loop against its mock over HTTP (docs/contract.md
rule 69, BENCHMARKS.md): `host-cli run` drives 20 steps of one pointer move each on
one guest, against testkit's mock-responses (`--provider openai`) and
against python/tests/mock_messages.py (`--provider anthropic`, every request
validated with the anthropic SDK's types), twice each, alternating; it
prints the loop overhead p50 host-cli reports and the wall time.

    SANDTOP_HOST_CLI=target/debug/host-cli SANDTOP_MOCK_RESPONSES=target/debug/mock-responses \
        target/sdk-venv/bin/python scripts/bench-provider-step.py

(needs Docker, the guest image and the `make sdk-test` venv)."""
import json, os, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from guest import Mock, guest_session  # noqa: E402
from mock_messages import MockMessages, tool_use  # noqa: E402

HOST = os.environ["SANDTOP_HOST_CLI"]; MOCKEXE = os.environ["SANDTOP_MOCK_RESPONSES"]
N = 20
KEY = "sk-mock-" + os.urandom(6).hex()

def openai_run(session):
    work = tempfile.mkdtemp()
    m = Mock(MOCKEXE, os.path.join(work, "rec.jsonl"), KEY)
    for i in range(N):
        m.push({"items": [{"type": "computer_call", "id": f"cu_{i}", "call_id": f"c{i}", "status": "completed",
                            "pending_safety_checks": [],
                            "actions": [{"type": "move", "x": 100 + 10 * i, "y": 100 + 5 * i}]}]})
    m.push({"done": "done"})
    env = {**os.environ, "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": m.base_url}
    t = time.monotonic()
    p = subprocess.run([HOST, "run", "--session", session, "--no-ask-user", "--max-steps", str(N + 2), "-q", "go"],
                       env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    wall = time.monotonic() - t
    m.close()
    return p, wall

def anthropic_run(session):
    i = {"n": 0}
    def script(body):
        if i["n"] == N:
            return "done"
        i["n"] += 1
        return [tool_use("mouse_move", {"coordinate": [100 + 10 * i["n"], 100 + 5 * i["n"]]}, "computer")]
    mock = MockMessages(KEY, script)
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url}
    t = time.monotonic()
    p = subprocess.run([HOST, "run", "--provider", "anthropic", "--model", "claude-mock", "--session", session,
                        "--no-ask-user", "--max-steps", str(N + 2), "-q", "go"],
                       env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    wall = time.monotonic() - t
    mock.close()
    assert all(r["problems"] == [] for r in mock.requests)
    return p, wall

with guest_session("bench-step-") as (host_cli, session):
    for round_ in range(2):
        for name, f in (("openai", openai_run), ("anthropic", anthropic_run)):
            p, wall = f(session.name)
            out = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
            print(name, "rc", p.returncode, "steps", out.get("steps"), "overhead_p50_ms",
                  round(out.get("loop_overhead_ms_p50") or -1, 2), "wall_s", round(wall, 2), flush=True)
            if p.returncode != 0:
                print(p.stderr[-1500:])
