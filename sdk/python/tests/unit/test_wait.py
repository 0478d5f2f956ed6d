"""Unit tests of the waits (Sandbox.wait_ready, wait_for, delete(wait=True)): they read the
sandbox, then watch it from the version read, with the Kubernetes client's Watch over a fake
API whose GETs and watch events the tests script."""

import json
import unittest

from kube_sandbox import Client, ExpiredError, NotFoundError, Sandbox, SandboxError, WaitTimeoutError


def sandbox(phase, ready=None, uid="u1", rv="1", reason="", message=""):
    conds = []
    if ready is not None:
        conds.append({"type": "Ready", "status": ready, "reason": reason, "message": message})
    return {"apiVersion": "sandbox.kube-sandbox.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "demo", "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "status": {"phase": phase, "conditions": conds}}


class FakeResponse:
    """What the Watch reads: an urllib3 response that streams the events' lines."""

    def __init__(self, events):
        self.data = "".join(json.dumps(e) + "\n" for e in events).encode()

    def stream(self, amt=None, decode_content=False):
        # In two pieces, to split a line.
        yield self.data[: len(self.data) // 2]
        yield self.data[len(self.data) // 2:]

    def close(self):
        pass

    def release_conn(self):
        pass


class FakeAPI:
    """Scripted answers: ``gets`` for GETs (an exception is raised), ``watches`` (lists of
    events) for watches; what was asked is recorded."""

    def __init__(self, gets, watches):
        self.gets, self.watches = list(gets), list(watches)
        self.calls, self.watch_kwargs = [], []

    def call(self, method, path, **kw):
        self.calls.append((method, path))
        if method == "DELETE":
            return {}
        answer = self.gets.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def list_namespaced_custom_object(self, group, version, namespace, plural, **kwargs):
        """A list.

        :return: object
        """
        self.watch_kwargs.append(dict(kwargs, group=group, version=version, namespace=namespace, plural=plural))
        return FakeResponse(self.watches.pop(0) if self.watches else [])


def fake(gets, watches):
    c = Client.from_token("https://127.0.0.1:6443", "tok", namespace="ns")
    api = FakeAPI(gets, watches)
    c.call = api.call
    c._custom = api
    sb = Sandbox(c, sandbox("Pending", "False", reason="Allocating"))
    return sb, api


def gone():
    return NotFoundError("not found", code=404, reason="NotFound")


class WaitReadyTest(unittest.TestCase):
    def test_ready_through_the_watch(self):
        sb, api = fake([sandbox("Pending", "False", rv="5")], [[
            {"type": "MODIFIED", "object": sandbox("Pending", "False", rv="6")},
            {"type": "MODIFIED", "object": sandbox("Running", "True", rv="7")},
            {"type": "MODIFIED", "object": sandbox("Failed", "False", rv="8")},  # never read
        ]])
        sb.wait_ready(timeout=30)
        self.assertEqual((sb.phase, sb.ready, sb.resource_version), ("Running", True, "7"))
        self.assertEqual(len(api.calls), 1)
        kw = api.watch_kwargs[0]
        self.assertEqual(kw["field_selector"], "metadata.name=demo")
        self.assertEqual(kw["resource_version"], "5")
        self.assertTrue(kw["watch"])
        self.assertEqual((kw["group"], kw["version"], kw["namespace"], kw["plural"]),
                         ("sandbox.kube-sandbox.io", "v1alpha1", "ns", "sandboxes"))
        self.assertLessEqual(kw["timeout_seconds"], 30)

    def test_ready_at_once_needs_no_watch(self):
        sb, api = fake([sandbox("Running", "True")], [])
        sb.wait_ready()
        self.assertEqual(api.watch_kwargs, [])

    def test_failed_raises_with_the_reason(self):
        sb, _ = fake([sandbox("Pending", "False")], [[
            {"type": "MODIFIED", "object": sandbox("Failed", "False", reason="PodFailed", message="OOMKilled")}]])
        with self.assertRaises(SandboxError) as cm:
            sb.wait_ready()
        self.assertEqual(cm.exception.reason, "PodFailed")
        self.assertIn("PodFailed: OOMKilled", cm.exception.message)

    def test_expired_and_deleted(self):
        sb, _ = fake([sandbox("Pending", "False")], [[{"type": "MODIFIED", "object": sandbox("Expired", "False")}]])
        with self.assertRaises(ExpiredError):
            sb.wait_ready()
        sb, _ = fake([sandbox("Pending", "False")], [[{"type": "DELETED", "object": sandbox("Pending", "False")}]])
        with self.assertRaises(NotFoundError):
            sb.wait_ready()
        sb, _ = fake([gone()], [])
        with self.assertRaises(NotFoundError):
            sb.wait_ready()

    def test_another_sandbox_of_the_same_name_does_not_count(self):
        sb, _ = fake([sandbox("Pending", "False")], [[
            {"type": "MODIFIED", "object": sandbox("Running", "True", uid="u2")},
            {"type": "MODIFIED", "object": sandbox("Running", "True", uid="u1")},
        ]])
        sb.wait_ready()
        self.assertEqual(sb.uid, "u1")

    def test_a_watch_that_ends_is_followed_by_a_read(self):
        sb, api = fake([sandbox("Pending", "False", rv="1"), sandbox("Running", "True", rv="9")], [[]])
        sb.wait_ready()
        self.assertEqual(len(api.calls), 2)
        self.assertEqual(sb.resource_version, "9")

    def test_timeout_says_what_it_was(self):
        sb, api = fake([sandbox("Pending", "False", reason="PoolExhausted", message="pool py is full")] * 1000, [])
        with self.assertRaises(WaitTimeoutError) as cm:
            sb.wait_ready(timeout=0.5)
        self.assertIn("Pending (Ready False: PoolExhausted: pool py is full)", cm.exception.message)
        self.assertIsInstance(cm.exception, TimeoutError)
        # Watches that end at once are retried with a backoff, not in a tight loop.
        self.assertLess(len(api.calls), 10)


class DeleteWaitTest(unittest.TestCase):
    def test_delete_waits_for_the_deleted_event(self):
        sb, api = fake([sandbox("Terminating", "False")], [[{"type": "DELETED", "object": sandbox("Terminating")}]])
        sb.delete(wait=True)
        self.assertEqual(api.calls[0][0], "DELETE")

    def test_delete_of_a_gone_sandbox_returns(self):
        sb, api = fake([gone()], [])
        sb.delete(wait=True)
        self.assertEqual([m for m, _ in api.calls], ["DELETE", "GET"])


if __name__ == "__main__":
    unittest.main()
