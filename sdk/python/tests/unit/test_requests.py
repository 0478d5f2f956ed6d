"""Unit tests of what the SDK sends: the Sandbox it creates, URLs and paths, the bodies of
processes, renewals and network patches, and how the proxy session keeps to its sandbox."""

import unittest
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from kube_sandbox import Client, Sandbox
from kube_sandbox._util import file_path, format_time, parse_time, sandbox_path, seconds, whole_seconds
from kube_sandbox.client import _query_items
from kube_sandbox.files import FileInfo, mode_param
from kube_sandbox.processes import process_body
from kube_sandbox.sandbox import ProxySession, create_body, proxy_base

HOST = "https://10.0.0.1:6443"


def client():
    return Client.from_token(HOST, "tok", namespace="team-a", verify=False)


class CreateBodyTest(unittest.TestCase):
    def test_pool(self):
        body = create_body("python", namespace="ns")
        self.assertEqual(body["apiVersion"], "sandbox.kube-sandbox.io/v1alpha1")
        self.assertEqual(body["kind"], "Sandbox")
        self.assertEqual(body["metadata"], {"generateName": "sbx-", "namespace": "ns"})
        self.assertEqual(body["spec"], {"poolRef": {"name": "python"}})

    def test_image_with_everything(self):
        body = create_body(image="python:3.12", name="agent", timeout=timedelta(minutes=10), env={"A": "1"},
                           allow=["example.com:443", "*.cdn.example.org:443,80"], labels={"team": "a"},
                           runtime_class="gvisor", auto_renew=600)
        self.assertEqual(body["metadata"], {"name": "agent", "labels": {"team": "a"}})
        spec = body["spec"]
        self.assertEqual(spec["template"], {"spec": {"containers": [{"name": "sandbox", "image": "python:3.12"}],
                                                     "runtimeClassName": "gvisor"}})
        self.assertEqual(spec["timeoutSeconds"], 600)
        self.assertEqual(spec["env"], [{"name": "A", "value": "1"}])
        self.assertEqual(spec["autoRenew"], {"extendSeconds": 600})
        self.assertEqual(spec["networkPolicy"], {"defaultAction": "Deny", "egress": [
            {"action": "Allow", "to": "example.com", "ports": [{"port": 443}]},
            {"action": "Allow", "to": "*.cdn.example.org", "ports": [{"port": 443}, {"port": 80}]},
        ]})

    def test_empty_allow_denies_everything(self):
        self.assertEqual(create_body("p", allow=[])["spec"]["networkPolicy"], {"defaultAction": "Deny"})

    def test_refusals(self):
        with self.assertRaises(ValueError):
            create_body()
        with self.assertRaises(ValueError):
            create_body("pool", "image")
        with self.assertRaises(ValueError):
            create_body("pool", runtime_class="gvisor")
        with self.assertRaises(ValueError):
            create_body("pool", allow=["example.com:0"])
        with self.assertRaises(ValueError):
            create_body("pool", timeout=-1)
        with self.assertRaises(TypeError):
            create_body("pool", timeout="10")


class PathsTest(unittest.TestCase):
    def test_sandbox_path(self):
        self.assertEqual(sandbox_path("ns", "sb"), "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/ns/sandboxes/sb")
        self.assertEqual(sandbox_path("ns", "sb", "processes", "p-1", "signal"),
                         "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/ns/sandboxes/sb/processes/p-1/signal")
        self.assertTrue(sandbox_path("ns", "a/b").endswith("/sandboxes/a%2Fb"))

    def test_file_path(self):
        self.assertEqual(file_path("/tmp/a b/c?d#e"), "tmp/a%20b/c%3Fd%23e")
        self.assertEqual(file_path("tmp//./x/"), "tmp/x")
        self.assertEqual(file_path("/"), "")
        self.assertEqual(file_path("100%"), "100%25")
        for bad in ("/tmp/../etc", "..", "a/\x00"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                file_path(bad)

    def test_client_url(self):
        c = client()
        self.assertEqual(c.url("/api", {"a": [1, 2], "b": True, "c": None, "d": "x y"}),
                         HOST + "/api?a=1&a=2&b=true&d=x+y")
        self.assertEqual(c.namespace, "team-a")
        self.assertEqual(_query_items([("x", False)]), [("x", "false")])

    def test_proxy_url(self):
        sb = Sandbox(client(), {"metadata": {"name": "web", "namespace": "ns"}})
        base = HOST + "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/ns/sandboxes/web/proxy/8080/"
        self.assertEqual(sb.proxy_url(8080), base)
        self.assertEqual(sb.proxy_url(8080, "/api/v1?q=1"), base + "api/v1?q=1")
        self.assertEqual(sb.proxy_url(8080, replica=2), base.replace("/8080/", "/2:8080/"))
        for bad in (0, 70000, "80", True):
            with self.subTest(port=bad), self.assertRaises(ValueError):
                proxy_base(client(), "ns", "web", bad)


class ProxySessionTest(unittest.TestCase):
    def setUp(self):
        c = client()
        self.base = proxy_base(c, "ns", "web", 8080)
        self.session = ProxySession(self.base, c.configuration)
        self.addCleanup(self.session.close)

    def test_credentials(self):
        self.assertFalse(self.session.trust_env)
        prepared = self.session.prepare_request(
            __import__("requests").Request("GET", self.session.resolve("/x")))
        self.assertEqual(prepared.headers["Authorization"], "Bearer tok")

    def test_resolve(self):
        self.assertEqual(self.session.resolve("/healthz"), self.base + "healthz")
        self.assertEqual(self.session.resolve("healthz?a=1"), self.base + "healthz?a=1")
        self.assertEqual(self.session.resolve(""), self.base)
        self.assertEqual(self.session.resolve(self.base + "x"), self.base + "x")
        self.assertEqual(self.session.resolve("/a/../b"), self.base + "b")
        for bad in ("/../../secrets", "https://example.com/", HOST + "/api/v1/secrets"):
            with self.subTest(url=bad), self.assertRaises(ValueError):
                self.session.resolve(bad)

    def redirect(self, location, url=None):
        resp = SimpleNamespace(is_redirect=True, headers={"location": location}, url=url or self.base + "a/b")
        return self.session.get_redirect_target(resp)

    def test_redirects_stay_in_the_sandbox(self):
        self.assertEqual(self.redirect("/login"), self.base + "login")
        self.assertEqual(self.redirect("c"), self.base + "a/c")
        self.assertEqual(self.redirect(self.base + "d"), self.base + "d")
        self.assertIsNone(self.redirect("https://evil.example/"))
        self.assertIsNone(self.redirect(HOST + "/api/v1/namespaces"))
        self.assertIsNone(self.redirect("../../../../../../api"))


class BodiesTest(unittest.TestCase):
    def test_process_body(self):
        self.assertEqual(process_body("echo hi"), {
            "apiVersion": "sandbox.kube-sandbox.io/v1alpha1", "kind": "SandboxProcess",
            "spec": {"command": ["sh", "-c", "echo hi"]}})
        spec = process_body(["python3", "-m", "http.server"], env={"A": "1"}, workdir="/w", tty=True, stdin=True,
                            timeout=timedelta(seconds=90), replica=1)["spec"]
        self.assertEqual(spec, {"command": ["python3", "-m", "http.server"], "replica": 1,
                                "env": [{"name": "A", "value": "1"}], "workingDir": "/w", "tty": True,
                                "stdin": True, "timeoutSeconds": 90})

    def test_mode_param(self):
        self.assertEqual(mode_param(0o755), "0755")
        self.assertEqual(mode_param("644"), "0644")
        self.assertEqual(mode_param("0o600"), "0600")
        self.assertIsNone(mode_param(None))
        for bad in ("0999", "rwx", 0o17777, -1):
            with self.subTest(mode=bad), self.assertRaises(ValueError):
                mode_param(bad)

    def test_file_info(self):
        item = {"name": "b.txt", "path": "a/b.txt", "type": "file", "size": 5, "mode": "0600",
                "modTime": "2026-12-06T08:42:43Z"}
        f = FileInfo.from_api(item, "/tmp/x")
        self.assertEqual(f.path, "/tmp/x/a/b.txt")
        self.assertEqual(f.mode, 0o600)
        self.assertTrue(f.is_file)
        self.assertEqual(f.mtime, datetime(2026, 12, 6, 8, 42, 43, tzinfo=timezone.utc))
        self.assertEqual(FileInfo.from_api({"name": "tmp", "path": "tmp", "type": "dir"}).path, "/tmp")
        self.assertEqual(FileInfo.from_api({"name": "", "path": "", "type": "dir"}).path, "/")


class TimeTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_time("2026-11-29T12:00:00Z"), datetime(2026, 11, 29, 12, tzinfo=timezone.utc))
        self.assertEqual(parse_time("2026-11-29T12:00:00.123456789Z"),
                         datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=timezone.utc))
        self.assertEqual(parse_time("2026-11-29T14:00:00+02:00"), datetime(2026, 11, 29, 12, tzinfo=timezone.utc))
        self.assertIsNone(parse_time(None))

    def test_format(self):
        t = datetime(2026, 11, 29, 14, 0, 0, 999, tzinfo=timezone(timedelta(hours=2)))
        self.assertEqual(format_time(t), "2026-11-29T12:00:00Z")
        with self.assertRaises(ValueError):
            format_time(datetime(2026, 1, 1))

    def test_durations(self):
        self.assertEqual(seconds(timedelta(minutes=2)), 120.0)
        self.assertEqual(whole_seconds(1.2), 2)
        self.assertIsNone(whole_seconds(None))
        with self.assertRaises(ValueError):
            seconds(-1)


class SandboxObjectTest(unittest.TestCase):
    def test_properties(self):
        sb = Sandbox(client(), {
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}},
            "spec": {"poolRef": {"name": "python"}, "timeoutSeconds": 3600, "paused": False},
            "status": {"phase": "Running", "expiresAt": "2026-11-29T12:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "PodsReady"}],
                       "pods": [{"replica": 0, "name": "demo-0", "ready": True}]},
        })
        self.assertEqual((sb.name, sb.namespace, sb.uid, sb.phase, sb.pool), ("demo", "ns", "u1", "Running", "python"))
        self.assertTrue(sb.ready)
        self.assertEqual(sb.expires_at, datetime(2026, 11, 29, 12, tzinfo=timezone.utc))
        self.assertEqual(sb.timeout_seconds, 3600)
        self.assertEqual(sb.labels, {"a": "b"})
        self.assertEqual(sb.pods[0]["name"], "demo-0")
        self.assertEqual(repr(sb), "Sandbox(ns/demo, phase=Running)")

    def test_renew_needs_a_timeout(self):
        sb = Sandbox(client(), {"metadata": {"name": "demo", "namespace": "ns"}, "spec": {}})
        with self.assertRaises(ValueError):
            sb.renew()
        with self.assertRaises(ValueError):
            sb.renew(60, expires_at=datetime.now(timezone.utc))


if __name__ == "__main__":
    unittest.main()
