import json, os, socket, ssl, sys, threading, time, urllib.error, urllib.request

PROXY = ("127.0.0.1", 3128)
T = 20

def tls_ctx():
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    return c

def read_response(s, eof):
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    length = None
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    body = b""
    if length is not None:
        while len(body) < length:
            b = s.recv(length - len(body))
            if not b:
                break
            body += b
    elif eof and status is not None:
        while True:
            b = s.recv(65536)
            if not b:
                break
            body += b
    return status, body.decode("utf-8", "replace")

def op_get(o):
    # An absolute-form request to the proxy.
    s = socket.create_connection(PROXY, timeout=T)
    auth = o["authority"]
    s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
        % (auth, o.get("path", "/"), o.get("host", auth))).encode())
    status, body = read_response(s, True)
    return {"status": status, "body": body}

def op_tls(o):
    # CONNECT, then TLS with a chosen server name, then a GET.
    auth = o["authority"]
    s = socket.create_connection(PROXY, timeout=T)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"
        % (auth, o.get("connect_host", auth))).encode())
    status, body = read_response(s, False)
    r = {"connect_status": status}
    if status != 200:
        r["body"] = body
        return r
    sni = o.get("sni", auth.rsplit(":", 1)[0])
    try:
        t = tls_ctx().wrap_socket(s, server_hostname=sni)
    except Exception as e:
        r["tls_error"] = repr(e)
        return r
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
        % (o.get("path", "/"), o.get("host", sni))).encode())
    r["status"], r["body"] = read_response(t, True)
    return r

def op_urllib(o):
    # What tools do: the proxy from the environment.
    os.environ["http_proxy"] = os.environ["https_proxy"] = "http://127.0.0.1:3128"
    try:
        r = urllib.request.urlopen(o["url"], context=tls_ctx(), timeout=T)
        return {"status": r.status, "body": r.read().decode("utf-8", "replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode("utf-8", "replace")}

def op_direct(o):
    # Straight to an address, skipping the proxy.
    if o.get("udp"):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(b"sandtop", (o["ip"], o["port"]))
        return {"ok": True}
    s = socket.create_connection((o["ip"], o["port"]), timeout=3)
    r = {"ok": True}
    if "path" in o:
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
            % (o["path"], o.get("host", o["ip"]))).encode())
        r["status"], r["body"] = read_response(s, True)
    return r

def op_dns(o):
    res = {}
    def run():
        try:
            res["addrs"] = sorted({a[4][0] for a in socket.getaddrinfo(o["name"], 80)})
        except Exception as e:
            res["error"] = repr(e)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(5)
    if th.is_alive():
        return {"ok": False, "error": "timed out after 5 s"}
    if "error" in res:
        return {"ok": False, "error": res["error"]}
    return {"ok": True, "addrs": res["addrs"]}

def op_ifaces(o):
    names = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
    routes = len(open("/proc/net/route").read().splitlines()) - 1
    try:
        v6 = [l.split()[-1] for l in open("/proc/net/if_inet6").read().splitlines()]
    except OSError:
        v6 = []
    return {"interfaces": names, "ipv4_routes": routes, "ipv6_interfaces": v6}

def op_relay(o):
    # The relay at 127.0.0.1:3128 without a proxy behind it.
    try:
        s = socket.create_connection(PROXY, timeout=3)
    except Exception as e:
        return {"connected": False, "error": repr(e), "bytes": 0}
    data = b""
    try:
        s.sendall(b"GET http://allowed.test/n1-relay HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        return {"connected": True, "closed": True, "bytes": len(data)}
    except socket.timeout:
        return {"connected": True, "closed": False, "error": "timeout", "bytes": len(data)}
    except Exception as e:
        return {"connected": True, "closed": True, "error": repr(e), "bytes": len(data)}

def desktop_env():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open("/proc/%s/comm" % pid).read().strip() != "sandtopd":
                continue
            raw = open("/proc/%s/environ" % pid, "rb").read()
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)
        return pid, env
    return None, {}

def op_proxy_env(o):
    # What the desktop (sandtopd, and so the browser it starts) was given.
    pid, env = desktop_env()
    keys = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "SANDTOP_EGRESS"]
    return {"pid": pid, "env": {k: env.get(k) for k in keys}}

def op_scan(o):
    # Where a secret's value could hide: environments, command lines, files.
    # (This process carries the needles in its own argv: skipped.)
    needles = [n.encode() for n in o["needles"]]
    hits, unreadable, read = [], 0, 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for f in ("environ", "cmdline"):
            try:
                b = open("/proc/%s/%s" % (pid, f), "rb").read()
                read += 1
            except OSError:
                unreadable += 1
                continue
            hits += ["/proc/%s/%s" % (pid, f) for n in needles if n in b]
    for root in ("/run/sandtop", "/home/user", "/tmp"):
        for d, _, files in os.walk(root):
            for f in files:
                p = os.path.join(d, f)
                try:
                    if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > 4 << 20:
                        continue
                    b = open(p, "rb").read()
                    read += 1
                except OSError:
                    unreadable += 1
                    continue
                hits += [p for n in needles if n in b]
    return {"hits": hits, "read": read, "unreadable": unreadable}

def op_par(o):
    out = [None] * len(o["ops"])
    def one(i, sub):
        out[i] = run(sub)
    ths = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(o["ops"])]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return {"results": out}

def run(o):
    t0 = time.monotonic()
    try:
        r = globals()["op_" + o["op"]](o)
    except Exception as e:
        r = {"ok": False, "error": repr(e)}
    r["ms"] = int((time.monotonic() - t0) * 1000)
    r["req"] = o
    return r

print(json.dumps([run(o) for o in json.loads(sys.argv[1])]))
