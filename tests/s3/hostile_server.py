#!/usr/bin/env python3
"""An S3 endpoint that misbehaves on purpose, for the S3 client's tests (tests/s3/client/hostile_server_test.cc).

    hostile_server.py MODE [ARG]

Listens on 127.0.0.1 on an ephemeral port, prints the port on the first line of stdout, and serves until killed.
Every reply of a mode is the same whatever the request, except in `store` and where said. Modes:

  store              a well-behaved bucket kept in memory (PUT, GET with Range, HEAD, DELETE); refuses a request
                     without a SigV4 Authorization and x-amz-content-sha256 header (400 MissingSecurityHeader);
                     GET of a key ending in __headers answers the request's headers, of one ending in __connections
                     how many TCP connections the server accepted so far
  truncated          200 announcing Content-Length 1000, sends 10 bytes, closes the connection
  long-range         206 with 16 bytes more than the Range asked
  malformed-xml      200 with a body that is not well-formed XML
  complete-error     200 with an <Error> document of code ARG (default InternalError)
  slowdown           503 SlowDown for the first ARG requests (default 2), then behaves as `store`
  stall              reads the request, then sends nothing and keeps the connection open
  reset              reads the request, then resets the connection (TCP RST)
  status             every request answered HTTP ARG ("404:NoSuchBucket"), with an error document of that code
"""
import hashlib
import http.server
import socket
import struct
import sys
import threading
import time

MODE = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else None
OBJECTS = {}
LOCK = threading.Lock()
REQUESTS_SEEN = [0]
CONNECTIONS = set()


def error_document(code, message="injected by hostile_server.py"):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f'<Resource>/x</Resource><RequestId>hostile-1</RequestId></Error>').encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def requested_range(self, size):
        spec = self.headers.get("Range")
        if not spec:
            return 0, size
        first, last = spec.split("=")[1].split("-")
        return int(first), min(int(last) + 1, size)

    def store(self):
        if (not self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 ")
                or not self.headers.get("x-amz-content-sha256")):
            return self.reply(400, error_document("MissingSecurityHeader"))
        key = self.path.split("?")[0]
        payload = self.body()
        if key.endswith("__headers"):
            return self.reply(200, str(self.headers).encode())
        if key.endswith("__connections"):
            return self.reply(200, str(len(CONNECTIONS)).encode())
        with LOCK:
            if self.command == "PUT":
                OBJECTS[key] = payload
                return self.reply(200, headers={"ETag": '"%s"' % hashlib.md5(payload).hexdigest()})
            if self.command == "DELETE":
                OBJECTS.pop(key, None)
                return self.reply(204)
            data = OBJECTS.get(key)
        if data is None:
            return self.reply(404, error_document("NoSuchKey", "The specified key does not exist."))
        first, end = self.requested_range(len(data))
        return self.reply(206 if self.headers.get("Range") else 200, data[first:end],
                          {"ETag": '"%s"' % hashlib.md5(data).hexdigest(),
                           "Last-Modified": "Wed, 02 Dec 2026 12:00:00 GMT"})

    def handle_any(self):
        with LOCK:
            CONNECTIONS.add(self.client_address)
            REQUESTS_SEEN[0] += 1
            seen = REQUESTS_SEEN[0]
        if MODE == "store":
            return self.store()
        if MODE == "slowdown":
            if seen <= int(ARG or 2):
                self.body()
                return self.reply(503, error_document("SlowDown", "Please reduce your request rate."))
            return self.store()
        self.body()
        if MODE == "truncated":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 10)
            self.wfile.flush()
            self.close_connection = True
            return
        if MODE == "long-range":
            first, end = self.requested_range(1 << 20)
            return self.reply(206, b"y" * (end - first + 16))
        if MODE == "malformed-xml":
            return self.reply(200, b"<?xml version='1.0'?><ListBucketResult><Contents><Key>a</Contents>")
        if MODE == "complete-error":
            return self.reply(200, error_document(ARG or "InternalError"))
        if MODE == "stall":
            time.sleep(3600)
            return
        if MODE == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if MODE == "status":
            status, code = ARG.split(":")
            return self.reply(int(status), error_document(code))
        raise SystemExit(f"unknown mode {MODE}")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
