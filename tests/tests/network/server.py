import json, ssl, subprocess, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "/tmp/key.pem",
    "-out", "/tmp/cert.pem", "-days", "2", "-subj", "/CN=allowed.test",
    "-addext", "subjectAltName=DNS:allowed.test,DNS:blocked.test"],
    check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
snis = {}
def on_sni(sock, name, _ctx):
    snis[id(sock)] = name
ctx.sni_callback = on_sni

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        tls = isinstance(self.connection, ssl.SSLSocket)
        sni = snis.pop(id(self.connection), None) if tls else None
        vhost = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        body = json.dumps({"vhost": vhost, "sni": sni, "tls": tls,
            "port": self.server.server_address[1], "path": self.path}).encode()
        print("served " + body.decode(), flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    daemon_threads = True
    tls = False
    def finish_request(self, request, client_address):
        request.settimeout(10)
        if self.tls:
            try:
                request = ctx.wrap_socket(request, server_side=True)
            except Exception as e:
                print("tls handshake failed: " + repr(e), flush=True)
                return
        super().finish_request(request, client_address)

for port, tls in [(80, False), (8080, False), (443, True), (8443, True)]:
    s = Server(("0.0.0.0", port), Handler)
    s.tls = tls
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
