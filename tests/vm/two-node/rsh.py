#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""The remote shell of the two-guest lab: what mpirun's rsh agent
(plm_rsh_agent) calls to start its daemon on the other guest, over the
guests' private link only.

  rsh.py serve ADDR PORT     run commands for clients until one asks to stop
  rsh.py HOST COMMAND...     run COMMAND (words joined by spaces, run by
                             /bin/sh -c, as ssh does) on HOST; its output
                             comes back on stdout, its exit status is ours
  rsh.py --stop HOST         tell HOST's server to stop (exits 0 once it did)

The port is 7022, or RSH_PORT.

Each request is one JSON line {"cmd": "..."} or {"stop": true}; the
server answers with frames of a type byte and a 4-byte big-endian length:
b"o" output bytes, b"x" the exit status as text.  A client that goes away
kills what it started, as a closed ssh session would.
"""
import json
import os
import select
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import time

PORT = int(os.environ.get("RSH_PORT", "7022"))


def frame(kind, data):
    return kind + struct.pack(">I", len(data)) + data


class Session(socketserver.StreamRequestHandler):
    def handle(self):
        req = json.loads(self.rfile.readline())
        if req.get("stop"):
            self.wfile.write(frame(b"x", b"0"))
            # A handler thread, not the serving one: shutdown() may wait.
            self.server.shutdown()
            return
        proc = subprocess.Popen(["/bin/sh", "-c", req["cmd"]], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        out = proc.stdout.fileno()
        sock = self.connection
        try:
            while True:
                ready, _, _ = select.select([out, sock], [], [])
                if sock in ready and not sock.recv(1, socket.MSG_PEEK):
                    raise ConnectionError("client went away")
                if out in ready:
                    data = os.read(out, 65536)
                    if not data:
                        break
                    sock.sendall(frame(b"o", data))
            status = proc.wait()
            sock.sendall(frame(b"x", str(status if status >= 0 else 128 - status).encode()))
        except (ConnectionError, OSError):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(addr, port):
    with Server((addr, port), Session) as srv:
        print(f"rsh.py: serving on {addr}:{port}", flush=True)
        srv.serve_forever(poll_interval=0.2)
    print("rsh.py: stopped", flush=True)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return buf


def request(host, req, wait_s=0):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            sock = socket.create_connection((host, PORT), timeout=5)
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)
    sock.settimeout(None)
    sock.sendall(json.dumps(req).encode() + b"\n")
    while True:
        kind, n = struct.unpack(">cI", recv_exact(sock, 5))
        data = recv_exact(sock, n)
        if kind == b"o":
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        elif kind == b"x":
            return int(data)


def main(argv):
    if len(argv) == 4 and argv[1] == "serve":
        serve(argv[2], int(argv[3]))
        return 0
    if len(argv) == 3 and argv[1] == "--stop":
        return request(argv[2], {"stop": True})
    if len(argv) >= 3 and not argv[1].startswith("-"):
        # The server may still be starting: the first guest to boot waits
        # for the other (RSH_WAIT seconds, default none).
        return request(argv[1], {"cmd": " ".join(argv[2:])}, float(os.environ.get("RSH_WAIT", "0")))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ConnectionError) as e:
        print(f"rsh.py: {e}", file=sys.stderr)
        sys.exit(255)
