# SPDX-License-Identifier: Apache-2.0
"""A loopback TLS proxy in front of a real kube-apiserver, for the faults a
real server cannot be made to give at a chosen moment: the next N matching
requests answered with an HTTP error, or held past the client's timeout,
every open watch ended at once with a 410 Expired event, and the watches'
bookmarks held back (quiet: a resource where nothing changes). Everything
else passes through unchanged: nrm talks to the real server, with its own
token, and the server's answers are the real ones. The proxy serves the
API server's own certificate, so nrm's kubeconfig keeps the cluster's CA;
it records each request (time, method, path, query, status, and a hash of
its bearer token: token_id) for the tests to count lists and watches, and
whose they are."""

import hashlib
import http.client
import http.server
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "upgrade"}
EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "too old resource version (injected by the test's proxy)",
                                       "reason": "Expired", "code": 410}}


def token_id(token):
    """What a request record keeps of its bearer token: a short hash, never
    the token (None where the request had none)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16] if token else None


class FaultProxy:
    def __init__(self, cluster):
        self.cluster = cluster
        self.requests = []
        self.lock = threading.Lock()
        self.faults = []  # [kind, remaining, code_or_seconds, method, path_contains]
        self.watches = set()  # the handlers streaming a watch now
        # Bookmarks held back while set: a stand-in for a resource where
        # nothing changes, on which the server sends none (its bookmarks
        # carry the last change's resourceVersion); the test cluster's own
        # clients keep that moving, so its watches are never that quiet.
        self.quiet = False
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    proxy.forward(self)
                except OSError:  # the client went away: nothing to answer
                    self.close_connection = True

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        pki = os.path.join(cluster.dir, "pki")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(pki, "apiserver.crt"), os.path.join(pki, "apiserver.key"))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.upstream = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.url = "https://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, src, dst):
        """A copy of the kubeconfig src that reaches the server through the proxy."""
        with open(src) as fh:
            kc = json.load(fh)
        for c in kc["clusters"]:
            c["cluster"]["server"] = self.url
        with open(dst, "w") as fh:
            json.dump(kc, fh)
        return dst

    # --- what the tests inject ---------------------------------------------------
    def fail_next(self, n, code=500, method=None, path_contains=""):
        with self.lock:
            self.faults.append(["fail", n, code, method, path_contains])

    def delay_next(self, n, seconds, method=None, path_contains=""):
        with self.lock:
            self.faults.append(["delay", n, seconds, method, path_contains])

    def expire_watches(self):
        """Every watch open now gets an ERROR event with a 410 Expired
        Status and ends, as from a server whose watch cache fell behind."""
        with self.lock:
            open_now = list(self.watches)
        for h in open_now:
            h.expire = True
        return len(open_now)

    def open_watches(self):
        with self.lock:
            return len(self.watches)

    def clear(self):
        with self.lock:
            self.requests = []

    # --- the pass-through ----------------------------------------------------------
    def _fault(self, method, path):
        with self.lock:
            for f in self.faults:
                if f[1] > 0 and (f[3] is None or f[3] == method) and f[4] in path:
                    f[1] -= 1
                    return f[0], f[2]
        return None, None

    def forward(self, h):
        u = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(u.query))
        watch = query.get("watch") in ("true", "1")
        auth = h.headers.get("Authorization") or ""
        rec = {"t": time.monotonic(), "method": h.command, "path": u.path, "query": query, "status": None,
               "watch": watch, "token": token_id(auth[7:].strip() if auth[:7].lower() == "bearer " else "")}
        with self.lock:
            self.requests.append(rec)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        kind, arg = self._fault(h.command, h.path)
        if kind == "fail":
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": arg,
                      "message": "injected by the test's proxy", "reason": "InternalError"}
            self._reply(h, arg, json.dumps(status).encode(), "application/json")
            rec["status"] = arg
            return
        if kind == "delay":
            time.sleep(arg)
        up = http.client.HTTPSConnection("127.0.0.1", self.cluster.port, context=self.upstream,
                                         timeout=None if watch else 120)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP and k.lower() != "host"}
        try:
            up.request(h.command, h.path, body=body or None, headers=headers)
            r = up.getresponse()
        except OSError as e:
            self._reply(h, 502, str(e).encode(), "text/plain")
            rec["status"] = 502
            return
        rec["status"] = r.status
        out = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP]
        if not (watch and r.status == 200):
            data = r.read()
            up.close()
            h.send_response(r.status)
            for k, v in out:
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(r.status)
        for k, v in out:
            h.send_header(k, v)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.expire = False
        with self.lock:
            self.watches.add(h)
        # A reader thread: the event lines, or the injected end, whichever first.
        lines = []
        done = threading.Event()
        cond = threading.Condition()

        def read():
            try:
                while True:
                    line = r.readline()
                    if not line:
                        break
                    with cond:
                        lines.append(line)
                        cond.notify()
            except Exception:  # noqa: BLE001 - the stream ended or was cut under it
                pass
            done.set()
            with cond:
                cond.notify()

        threading.Thread(target=read, daemon=True).start()
        try:
            while True:
                with cond:
                    cond.wait_for(lambda: lines or done.is_set() or h.expire, 0.1)
                    batch, lines[:] = lines[:], []
                for line in batch:
                    if not (self.quiet and line.startswith(b'{"type":"BOOKMARK"')):
                        self._chunk(h, line)
                if h.expire:
                    self._chunk(h, json.dumps(EXPIRED).encode() + b"\n")
                    rec["expired"] = True
                    break
                if done.is_set() and not lines:
                    break
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:
            pass
        finally:
            with self.lock:
                self.watches.discard(h)
            try:
                up.sock and up.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            up.close()
            h.close_connection = True

    @staticmethod
    def _chunk(h, data):
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    @staticmethod
    def _reply(h, status, data, ctype):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def lists(requests, resource):
    """The list requests (not watches) of a resource among requests."""
    return [r for r in requests if r["method"] == "GET" and not r["watch"]
            and re.search(r"/%s$" % re.escape(resource), r["path"])]
