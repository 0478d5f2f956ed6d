"""Unit tests of exec: the channel protocol's frames, the Status to exit code rule, the
WebSocket handshake and the send/receive loop, against fake servers on local sockets."""

import base64
import hashlib
import json
import socket
import threading
import time
import unittest

import websocket

from kube_sandbox.channel import (CLOSE, ERROR, PROTOCOL_V4, PROTOCOL_V5, STDIN, STDOUT, Channel, accept_key,
                                  close_frame, decode_frame, encode_frame, exit_code_from_status, open_channel,
                                  parse_status)
from kube_sandbox.commands import exec_query, pump
from kube_sandbox.errors import ForbiddenError, NotFoundError, SandboxError


def failure(code):
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: command terminated with exit code {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class FramesTest(unittest.TestCase):
    def test_encode_decode(self):
        self.assertEqual(encode_frame(STDIN, b"abc"), b"\x00abc")
        self.assertEqual(decode_frame(b"\x01out"), (STDOUT, b"out"))
        self.assertEqual(decode_frame(b"\x03"), (ERROR, b""))
        self.assertEqual(close_frame(STDIN), b"\xff\x00")
        with self.assertRaises(ValueError):
            decode_frame(b"")
        with self.assertRaises(ValueError):
            encode_frame(256, b"")

    def test_accept_key_of_rfc6455(self):
        self.assertEqual(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")


class StatusTest(unittest.TestCase):
    def test_success_is_zero(self):
        self.assertEqual(exit_code_from_status({"metadata": {}, "status": "Success"}), 0)

    def test_exit_code_cause(self):
        self.assertEqual(exit_code_from_status(failure(3)), 3)
        self.assertEqual(exit_code_from_status(failure(137)), 137)

    def test_failure_without_exit_code_raises(self):
        st = {"status": "Failure", "reason": "InternalError", "code": 500, "message": "execd is gone"}
        with self.assertRaises(SandboxError) as cm:
            exit_code_from_status(st)
        self.assertEqual(cm.exception.message, "execd is gone")
        self.assertEqual(cm.exception.code, 500)

    def test_parse_status(self):
        self.assertEqual(parse_status(json.dumps(failure(2)).encode()), failure(2))
        self.assertEqual(parse_status(b""), {"kind": "Status", "status": "Success"})
        self.assertEqual(parse_status(b"plain error text")["message"], "plain error text")
        self.assertEqual(parse_status(b"plain error text")["status"], "Failure")


class ExecQueryTest(unittest.TestCase):
    def test_string_runs_under_sh(self):
        q = exec_query("echo hi | wc -c")
        self.assertEqual(q[:3], [("command", "sh"), ("command", "-c"), ("command", "echo hi | wc -c")])
        self.assertIn(("stdout", "true"), q)
        self.assertIn(("stderr", "true"), q)
        self.assertNotIn(("stdin", "true"), q)

    def test_options(self):
        q = exec_query(["python3", "-c", "1"], stdin=True, env={"A": "1", "B": "x=y"}, workdir="/work",
                       timeout=2.5, replica=2)
        self.assertEqual([v for k, v in q if k == "command"], ["python3", "-c", "1"])
        self.assertIn(("stdin", "true"), q)
        self.assertEqual([v for k, v in q if k == "env"], ["A=1", "B=x=y"])
        self.assertIn(("workingDir", "/work"), q)
        self.assertIn(("timeoutSeconds", "3"), q)
        self.assertIn(("replica", "2"), q)

    def test_refusals(self):
        for bad in ("", "   ", []):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                exec_query(bad)
        with self.assertRaises(ValueError):
            exec_query("true", env={"A=B": "1"})


def server_frame(data, opcode=websocket.ABNF.OPCODE_BINARY, fin=1):
    """A frame as a server sends it: unmasked."""
    return websocket.ABNF(fin=fin, opcode=opcode, mask=0, data=data).format()


class FakeExecServer(threading.Thread):
    """The server side of a channel socket: echoes stdin to stdout (upper-cased) as it comes,
    and at its end writes to stderr and sends the exit status."""

    def __init__(self, sock, status, extra=b""):
        super().__init__(daemon=True)
        sock.settimeout(10)
        self.sock, self.status, self.extra = sock, status, extra
        self.ws = websocket.WebSocket(skip_utf8_validation=True)
        self.ws.sock, self.ws.connected = sock, True
        self.received = bytearray()
        self.error = None

    def run(self):
        try:
            # Fragmented and control frames first: the client must put them together.
            self.sock.sendall(server_frame(b"\x01he", fin=0) + server_frame(b"llo ", websocket.ABNF.OPCODE_CONT)
                              + server_frame(b"hi", websocket.ABNF.OPCODE_PING))
            while True:
                frame = self.ws.recv_frame()
                if frame.opcode == websocket.ABNF.OPCODE_PONG:
                    continue
                ch, data = frame.data[0], frame.data[1:]
                if ch == CLOSE:
                    break
                self.received += data
                self.sock.sendall(server_frame(bytes([STDOUT]) + data.upper()))
            self.sock.sendall(server_frame(b"\x02warning\n") + self.extra)
            if self.status is not None:
                self.sock.sendall(server_frame(b"\x03" + json.dumps(self.status).encode()))
            self.sock.sendall(server_frame(b"\x03\xe8", websocket.ABNF.OPCODE_CLOSE))
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            self.sock.close()


class PumpTest(unittest.TestCase):
    def run_pump(self, stdin, status, protocol=PROTOCOL_V5, extra=b""):
        client, server = socket.socketpair()
        fake = FakeExecServer(server, status, extra)
        fake.start()
        channel = Channel(client, protocol)
        chunks = []
        try:
            result = pump(channel, stdin, deadline=time.monotonic() + 10, on_stdout=chunks.append)
        finally:
            channel.close()
            fake.join(5)
        self.assertIsNone(fake.error)
        return result, fake, chunks

    def test_stdin_out_and_exit_code(self):
        data = bytes(range(256)) * 2048  # 512 KiB, more than socket buffers hold
        result, fake, chunks = self.run_pump(data, failure(3))
        self.assertEqual(bytes(fake.received), data)
        self.assertEqual(result.stdout_bytes, b"hello " + data.upper())
        self.assertEqual(b"".join(chunks), result.stdout_bytes)
        self.assertEqual(result.stderr, "warning\n")
        self.assertEqual(result.exit_code, 3)
        self.assertFalse(result.ok)

    def test_text_stdin_and_success(self):
        result, fake, _ = self.run_pump("ünïcode", {"metadata": {}, "status": "Success"})
        self.assertEqual(bytes(fake.received), "ünïcode".encode())
        self.assertEqual(result.exit_code, 0)
        self.assertTrue(result.ok)
        self.assertEqual(result.stdout, "hello üNïCODE")  # bytes.upper() leaves non-ASCII

    def test_undecodable_output_is_replaced(self):
        result, _, _ = self.run_pump(b"\xff", {"status": "Success"})
        self.assertEqual(result.stdout_bytes, b"hello \xff")
        self.assertEqual(result.stdout, "hello \ufffd")

    def test_no_status_is_an_error(self):
        with self.assertRaises(SandboxError) as cm:
            self.run_pump(b"x", None)
        self.assertIn("exit status", cm.exception.message)

    def test_failure_status_raises(self):
        with self.assertRaises(NotFoundError):
            self.run_pump(b"x", {"status": "Failure", "code": 404, "reason": "NotFound", "message": "no pod"})

    def test_v4_cannot_end_stdin(self):
        client, server = socket.socketpair()
        try:
            with self.assertRaises(SandboxError):
                pump(Channel(client, PROTOCOL_V4), b"x")
        finally:
            client.close()
            server.close()


class FakeHandshakeServer(threading.Thread):
    """A one-connection HTTP server that answers a WebSocket handshake as told."""

    def __init__(self, answer):
        super().__init__(daemon=True)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.answer = answer
        self.request = b""

    def run(self):
        conn, _ = self.listener.accept()
        with conn:
            while b"\r\n\r\n" not in self.request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                self.request += chunk
            headers = {}
            for line in self.request.decode().split("\r\n")[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            conn.sendall(self.answer(headers))
            if b" 101 " in self.answer(headers).split(b"\r\n", 1)[0]:
                conn.sendall(server_frame(b"\x01ok") + server_frame(b"\x03" + b'{"status":"Success"}')
                             + server_frame(b"\x03\xe8", websocket.ABNF.OPCODE_CLOSE))
        self.listener.close()


def switching(headers, protocol=PROTOCOL_V5, accept=None):
    key = headers["sec-websocket-key"]
    accept = accept or base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    return (f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n").encode()


class HandshakeTest(unittest.TestCase):
    def open(self, answer, **kw):
        srv = FakeHandshakeServer(answer)
        srv.start()
        try:
            ch = open_channel(f"http://127.0.0.1:{srv.port}/apis/x/exec?command=true", ssl_context=None,
                              authorization="Bearer tok", **kw)
        finally:
            srv.join(5)
        return ch, srv

    def test_upgrade(self):
        ch, srv = self.open(switching)
        try:
            self.assertEqual(ch.protocol, PROTOCOL_V5)
            req = srv.request.decode()
            self.assertTrue(req.startswith("GET /apis/x/exec?command=true HTTP/1.1\r\n"))
            self.assertIn("Authorization: Bearer tok\r\n", req)
            self.assertIn(f"Sec-WebSocket-Protocol: {PROTOCOL_V5}, {PROTOCOL_V4}\r\n", req)
            result = pump(ch)
            self.assertEqual((result.stdout, result.exit_code), ("ok", 0))
        finally:
            ch.close()

    def test_refusal_carries_the_status(self):
        body = json.dumps({"kind": "Status", "status": "Failure", "code": 403, "reason": "Forbidden",
                           "message": 'User "eve" cannot create resource "sandboxes/exec"'}).encode()
        answer = (b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        with self.assertRaises(ForbiddenError) as cm:
            self.open(lambda h: answer)
        self.assertIn('"eve"', cm.exception.message)

    def test_chunked_refusal(self):
        body = b'{"kind":"Status","status":"Failure","code":404,"reason":"NotFound","message":"no sandbox"}'
        answer = (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n")
        with self.assertRaises(NotFoundError) as cm:
            self.open(lambda h: answer)
        self.assertEqual(cm.exception.message, "no sandbox")

    def test_wrong_accept(self):
        with self.assertRaises(SandboxError) as cm:
            self.open(lambda h: switching(h, accept="bogus"))
        self.assertIn("Sec-WebSocket-Accept", cm.exception.message)

    def test_unoffered_protocol(self):
        with self.assertRaises(SandboxError) as cm:
            self.open(lambda h: switching(h, protocol="base64.channel.k8s.io"))
        self.assertIn("subprotocol", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
