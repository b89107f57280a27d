#!/usr/bin/env bash
# Starts the guest image the hardened way and checks it from inside:
# uid 2000000000 (no host account), no setuid/setgid bits, no compiler, capabilities/no_new_privs/
# seccomp, Xvfb + openbox + the demo form + session D-Bus running, the form
# storing a POST with non-ASCII text byte-exact, Firefox loading the form on
# DISPLAY=:0, and the container's memory idle and with the browser.
# Removes its container (and session folder) on exit, whatever happens.
#
#   guest-image/smoke-test.sh              # IMAGE=sandtop-guest:latest
#   KEEP=1 guest-image/smoke-test.sh       # leave the container running
#
# Needs: docker; root to give the session folder to the guest uid 2000000000.
#
# Commands in single quotes run inside the guest, on purpose:
# shellcheck disable=SC2016
set -euo pipefail
export LC_ALL=C
exec </dev/null

IMAGE="${IMAGE:-sandtop-guest:latest}"
NAME="sandtop-smoke-$$"
FAILS=0
SESSION="$(mktemp -d "${TMPDIR:-/tmp}/sandtop-smoke.XXXXXX")"

cleanup() {
    if [[ "${KEEP:-0}" == 1 ]]; then
        echo "kept: docker rm -f $NAME; rm -rf $SESSION"
        return
    fi
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    rm -rf "$SESSION"
}
trap cleanup EXIT

ok() { printf 'ok    %s\n' "$*"; }
fail() {
    printf 'FAIL  %s\n' "$*"
    FAILS=$((FAILS + 1))
}
guest() { docker exec "$NAME" sh -c "$1"; }

if ((EUID == 0)); then
    chown 2000000000:2000000000 "$SESSION"
    chmod 0700 "$SESSION"
else
    chmod 0777 "$SESSION" # not root: let the guest uid in anyway
fi

docker run -d --name "$NAME" --label sandtop.test=smoke \
    --read-only \
    --tmpfs /tmp:rw,nosuid,nodev,noexec,size=256m,mode=1777 \
    --tmpfs /home/user:rw,nosuid,nodev,noexec,size=512m,uid=2000000000,gid=2000000000,mode=0700 \
    --cap-drop ALL --security-opt no-new-privileges --network none \
    --memory 2g --memory-swap 2g --pids-limit 512 --shm-size 256m \
    -e SANDTOP_DEMO_LOG=debug \
    -v "$SESSION:/run/sandtop" \
    "$IMAGE" >/dev/null

health=""
for _ in $(seq 60); do
    health="$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$NAME")"
    [[ "$health" == healthy || "$(docker inspect -f '{{.State.Running}}' "$NAME")" != true ]] && break
    sleep 0.5
done
if [[ "$health" == healthy ]]; then ok "container healthy"; else
    fail "container not healthy (health: ${health:-none}); log tail:"
    docker logs --tail 20 "$NAME" 2>&1 | sed 's/^/      /'
fi

ids="$(guest 'echo "$(id -u):$(id -g)"')"
if [[ "$ids" == 2000000000:2000000000 ]]; then ok "runs as 2000000000:2000000000"; else fail "uid:gid $ids"; fi
suid="$(guest 'find / -xdev -perm /6000 2>/dev/null' || true)"
if [[ -z "$suid" ]]; then ok "no setuid/setgid bits"; else fail "setuid/setgid: $suid"; fi
compilers="$(guest 'for c in cc gcc c++ g++ clang rustc cargo go tcc as ld sudo; do command -v $c; done' || true)"
if [[ -z "$compilers" ]]; then ok "no compiler, no sudo"; else fail "found: $compilers"; fi
status="$(guest 'grep -E "^(CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status' | tr -s '\t ' ' ' | tr '\n' ' ')"
if [[ "$status" == "CapPrm: 0000000000000000 CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 " ]]; then
    ok "no capabilities, no_new_privs, seccomp filter"
else
    fail "status: $status"
fi
procs="$(guest 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null; echo; done')"
for want in Xvfb openbox sandtop-demo dbus-daemon; do
    if grep -q "$want" <<<"$procs"; then ok "$want running"; else fail "$want not running"; fi
done
if grep -q -- '-nolisten tcp' <<<"$procs"; then ok "Xvfb -nolisten tcp"; else fail "Xvfb without -nolisten tcp"; fi
ok "idle: $(docker stats --no-stream --format 'mem {{.MemUsage}}, pids {{.PIDs}}' "$NAME")"

if guest 'command -v python3 >/dev/null'; then
    if out="$(docker exec -i "$NAME" python3 - 2>&1 <<'EOF'
import json, urllib.parse, urllib.request
v = {"name": "Zoë Ångström 山田太郎 👩‍💻", "email": "zoë+tag@例え.jp",
     "message": "Héllo <b>&amp;</b> \"q\" $(id) `id`\r\n第二行 🎉\tж✓€"}
body = urllib.parse.urlencode(v).encode()
req = urllib.request.Request("http://127.0.0.1:8080/submit", data=body,
      headers={"Content-Type": "application/x-www-form-urlencoded"})
page = urllib.request.urlopen(req).read().decode()
assert "Saved submission" in page, page
last = json.load(urllib.request.urlopen("http://127.0.0.1:8080/submissions"))[-1]
assert all(last[k].encode() == v[k].encode() for k in v), last
print("seq", last["seq"])
EOF
    )"; then ok "demo form stored a non-ASCII submission byte-exact ($out)"; else
        fail "demo form round trip: $out"
    fi
else
    fail "no python3 in the guest to POST the form"
fi

docker exec -d -e XDG_RUNTIME_DIR=/tmp/runtime-user \
    -e DBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/runtime-user/bus -e NO_AT_BRIDGE=1 \
    "$NAME" sh -c 'exec firefox-esr http://127.0.0.1:8080/ >/tmp/firefox.log 2>&1'
loaded=0
for _ in $(seq 60); do
    if docker logs "$NAME" 2>&1 | grep -q 'served the form'; then
        loaded=1
        break
    fi
    sleep 0.5
done
if ((loaded)); then ok "firefox-esr loaded http://127.0.0.1:8080/ on :0"; else fail "firefox-esr did not load the form"; fi
sleep 5
procs="$(guest 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null; echo; done')"
if grep -q '^firefox-esr ' <<<"$procs"; then
    ok "firefox-esr still up; with browser: $(docker stats --no-stream --format 'mem {{.MemUsage}}, pids {{.PIDs}}' "$NAME")"
else
    fail "firefox-esr exited: $(guest 'tail -n 5 /tmp/firefox.log' || true)"
fi

if ((FAILS)); then
    echo "$FAILS check(s) failed"
    exit 1
fi
echo "all checks passed"
