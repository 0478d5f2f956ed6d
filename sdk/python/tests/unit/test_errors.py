"""Unit tests of kube_sandbox.errors: how Status objects and HTTP answers become exceptions."""

import json
import unittest

from kubernetes.client.rest import ApiException

from kube_sandbox.errors import (ConflictError, ExpiredError, ForbiddenError, InvalidError, NotFoundError,
                                 SandboxError, UnauthorizedError, WaitTimeoutError, error_from_api_exception,
                                 error_from_http, error_from_status)


def status(code, reason, message, **details):
    out = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
           "message": message}
    if details:
        out["details"] = details
    return out


class ErrorFromStatusTest(unittest.TestCase):
    def test_codes_pick_the_class(self):
        for code, cls in [(401, UnauthorizedError), (403, ForbiddenError), (404, NotFoundError),
                          (409, ConflictError), (422, InvalidError), (500, SandboxError), (503, SandboxError)]:
            with self.subTest(code=code):
                err = error_from_status(status(code, "R", "m"))
                self.assertIs(type(err), cls)
                self.assertEqual(err.code, code)
                self.assertEqual(err.reason, "R")
                self.assertEqual(err.message, "m")
                self.assertEqual(err.status["code"], code)
                self.assertIsInstance(err, SandboxError)

    def test_http_code_when_the_status_has_none(self):
        err = error_from_status({"status": "Failure", "message": "gone"}, 404)
        self.assertIsInstance(err, NotFoundError)
        self.assertEqual(err.code, 404)
        self.assertEqual(err.status["kind"], "Status")

    def test_an_expired_conflict_is_expired(self):
        err = error_from_status(status(409, "Conflict", 'Operation cannot be fulfilled on sandboxes "a": '
                                                         "the sandbox expired at 2026-01-01T00:00:00Z"))
        self.assertIsInstance(err, ExpiredError)
        self.assertIsInstance(err, ConflictError)
        other = error_from_status(status(409, "Conflict", "the object has been modified"))
        self.assertNotIsInstance(other, ExpiredError)

    def test_invalid_has_its_causes(self):
        err = error_from_status(status(422, "Invalid", "bad", causes=[
            {"reason": "FieldValueInvalid", "message": "must be at least 60", "field": "spec.timeoutSeconds"},
            {"reason": "FieldValueRequired", "message": "Required value"},
        ]))
        self.assertIsInstance(err, InvalidError)
        self.assertEqual(err.fields, ["spec.timeoutSeconds"])
        self.assertEqual(err.causes[0].reason, "FieldValueInvalid")
        self.assertEqual(err.causes[1].field, "")

    def test_wait_timeout_is_a_timeout(self):
        err = WaitTimeoutError("slow")
        self.assertIsInstance(err, TimeoutError)
        self.assertIsInstance(err, SandboxError)
        self.assertEqual(str(err), "slow")
        with self.assertRaises(TimeoutError):
            raise err


class ErrorFromHTTPTest(unittest.TestCase):
    def test_status_body(self):
        body = json.dumps(status(403, "Forbidden", 'User "eve" cannot create resource "sandboxes/exec"')).encode()
        err = error_from_http(403, body)
        self.assertIsInstance(err, ForbiddenError)
        self.assertIn("eve", err.message)

    def test_text_body(self):
        err = error_from_http(502, b"no answer from port 8080 in the sandbox\n", "GET proxy/8080/")
        self.assertIs(type(err), SandboxError)
        self.assertEqual(err.code, 502)
        self.assertEqual(err.reason, "BadGateway")
        self.assertEqual(err.message, "GET proxy/8080/: no answer from port 8080 in the sandbox")

    def test_empty_body(self):
        err = error_from_http(404, b"")
        self.assertIsInstance(err, NotFoundError)
        self.assertEqual(err.message, "the server answered 404")

    def test_json_that_is_not_a_status(self):
        err = error_from_http(409, b'{"kind":"Other"}')
        self.assertIsInstance(err, ConflictError)
        self.assertEqual(err.message, '{"kind":"Other"}')


class ErrorFromApiExceptionTest(unittest.TestCase):
    def test_body_with_status(self):
        exc = ApiException(status=404, reason="Not Found")
        exc.body = json.dumps(status(404, "NotFound", 'sandboxes.sandbox.kube-sandbox.io "x" not found'))
        err = error_from_api_exception(exc)
        self.assertIsInstance(err, NotFoundError)
        self.assertEqual(err.message, 'sandboxes.sandbox.kube-sandbox.io "x" not found')

    def test_watch_error_without_body(self):
        # kubernetes.watch raises ApiException(status=..., reason="REASON: MESSAGE") for ERROR events.
        err = error_from_api_exception(ApiException(status=403, reason="Forbidden: no watch for you"))
        self.assertIsInstance(err, ForbiddenError)
        self.assertEqual(err.message, "Forbidden: no watch for you")

    def test_no_status_code(self):
        err = error_from_api_exception(ApiException(reason="boom"))
        self.assertIs(type(err), SandboxError)
        self.assertIsNone(err.code)


if __name__ == "__main__":
    unittest.main()
