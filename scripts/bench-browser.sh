#!/usr/bin/env bash
# The browser driver's latencies (BENCHMARKS.md, "Browser driver"): a
# release sandtopd with --browser firefox-esr on a private Xvfb, the demo
# form on loopback, 30 calls of each kind through the daemon's Unix socket
# (Python's http.client as the client). Needs `make guest-image` (or a
# release build of sandtopd and sandtop-demo), Xvfb and firefox-esr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
DIR="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$DIR/display" &
pids+=($!)
for _ in $(seq 50); do [ -s "$DIR/display" ] && break; sleep 0.1; done
display=":$(cat "$DIR/display")"
port=$((20000 + RANDOM % 20000))
"$BIN/sandtop-demo" --listen "127.0.0.1:$port" --store "$DIR/sub.jsonl" >/dev/null 2>&1 &
pids+=($!)
"$BIN/sandtopd" serve --socket "$DIR/s.sock" --token-file "$DIR/token" --display "$display" \
    --browser firefox-esr --browser-profiles "$DIR" >"$DIR/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$DIR/s.sock" ] && [ -s "$DIR/token" ] && break; sleep 0.1; done
python3 - "$DIR" "$port" <<'PY'
import http.client, json, socket, sys, time
d, port = sys.argv[1], sys.argv[2]
class C(http.client.HTTPConnection):
    def __init__(s): super().__init__("sandtopd")
    def connect(s):
        s.sock = socket.socket(socket.AF_UNIX); s.sock.connect(d + "/s.sock")
tok = open(d + "/token").read().strip()
c = C()
def call(body, path="/v1/browser/call"):
    c.request("POST", path, json.dumps(body), {"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    r = c.getresponse(); out = json.loads(r.read())
    assert r.status == 200, out
    return out
t = time.perf_counter(); call({}, "/v1/browser/state")
print("first call (starts Firefox): %.0f ms" % ((time.perf_counter() - t) * 1000))
def timeit(name, f, n=30):
    xs = []
    for _ in range(n):
        t = time.perf_counter(); f(); xs.append((time.perf_counter() - t) * 1000)
    xs.sort()
    print("%-30s p50 %6.1f ms   p90 %6.1f ms" % (name, xs[n // 2], xs[int(n * 0.9)]))
url = "http://127.0.0.1:%s/" % port
timeit("navigate to the demo form", lambda: call({"member": "navigate", "tab_id": None, "url": url}))
timeit("read_page of the demo form", lambda: call({"member": "read_page", "tab_id": None, "filter": "all"}))
r = call({"member": "read_page", "tab_id": None, "filter": "interactive"})
ref = [e for e in r["outcome"]["elements"] if e["label"] == "Message"][0]["ref"]
timeit("click by ref (state included)", lambda: call({"member": "click", "tab_id": None, "target": ref}))
timeit("state (tabs)", lambda: call({}, "/v1/browser/state"))
PY
