"""Unit tests of what a sandbox uses (kube_sandbox.stats): the paths and queries of
``Sandbox.stats`` and ``list_stats``, how the server's figures become ``ReplicaStats``, and the
typed errors of a refusal, over a fake of the Kubernetes ApiClient's ``call_api``."""

import json
import unittest
from datetime import datetime, timezone

from kubernetes.client.rest import ApiException

from kube_sandbox import Client, ForbiddenError, NotFoundError, ReplicaStats, Sandbox, SandboxStats, list_stats
from kube_sandbox.stats import parse_duration, stats_path

API = "/apis/sandbox.kube-sandbox.io/v1alpha1"

WEB = {
    "kind": "SandboxStats", "apiVersion": "sandbox.kube-sandbox.io/v1alpha1",
    "metadata": {"name": "web", "namespace": "ns", "creationTimestamp": "2026-12-06T10:00:01Z"},
    "replicas": [
        {
            "replica": 0, "pod": "web-a", "node": "node-1", "timestamp": "2026-12-06T10:00:00Z", "window": "10s",
            "cpu": {"usageNanoCores": 998000000, "usageCoreNanoSeconds": 42000000000},
            "memory": {"workingSetBytes": 203 << 20, "rssBytes": 150 << 20, "usageBytes": 300 << 20,
                       "limitBytes": 512 << 20, "peakBytes": 260 << 20, "oomKills": 2},
            "disk": {"writableLayerBytes": 10 << 20, "emptyDirBytes": 2 << 20},
            "network": {"rxBytes": 1500, "txBytes": 300, "rxPackets": 10, "txPackets": 5,
                        "connectionsAllowed": 7, "connectionsDenied": 3},
            "processes": 14,
        },
        {"replica": 1, "reason": "NoPod", "message": "the replica has no pod now"},
        {
            "replica": 2, "node": "node-2", "timestamp": "2026-12-06T10:00:00Z",
            "cpu": {"usageNanoCores": 5, "usageCoreNanoSeconds": 1000000000},
            "memory": {"workingSetBytes": 512, "rssBytes": 0, "usageBytes": 512, "oomKills": 0},
            "reason": "Partial", "message": "disk: the writable layer could not be read",
        },
    ],
}


def status(code, reason, message):
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
                       "message": message})


class FakeApiClient:
    """Answers ``call_api`` from ``answers`` (path → dict, or an ApiException to raise) and
    records each call as (method, path, query)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def call_api(self, path, method, query_params=None, **kw):
        self.calls.append((method, path, list(query_params or [])))
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer


def fake(answers):
    c = Client.from_token("https://127.0.0.1:6443", "tok", namespace="ns")
    api = FakeApiClient(answers)
    c.api_client = api
    return c, api


class StatsTest(unittest.TestCase):
    def test_a_sandbox(self):
        c, api = fake({API + "/namespaces/ns/sandboxes/web/stats": WEB})
        stats = Sandbox(c, {"metadata": {"name": "web", "namespace": "ns"}}).stats()
        self.assertEqual(api.calls, [("GET", API + "/namespaces/ns/sandboxes/web/stats", [])])
        self.assertIsInstance(stats, SandboxStats)
        self.assertEqual((stats.name, stats.namespace, len(stats.replicas)), ("web", "ns", 3))
        self.assertEqual(stats.raw["kind"], "SandboxStats")

        r = stats.replicas[0]
        self.assertIsInstance(r, ReplicaStats)
        self.assertEqual((r.replica, r.pod, r.node, r.reason), (0, "web-a", "node-1", None))
        self.assertEqual(r.timestamp, datetime(2026, 12, 6, 10, tzinfo=timezone.utc))
        self.assertEqual(r.window, 10.0)
        self.assertAlmostEqual(r.cpu_cores, 0.998)
        self.assertEqual(r.cpu_seconds, 42.0)
        self.assertEqual((r.memory_bytes, r.memory_rss_bytes, r.memory_usage_bytes, r.memory_limit_bytes,
                          r.memory_peak_bytes, r.oom_kills), (203 << 20, 150 << 20, 300 << 20, 512 << 20, 260 << 20, 2))
        self.assertEqual((r.disk_bytes, r.disk_writable_layer_bytes, r.disk_empty_dir_bytes), (12 << 20, 10 << 20, 2 << 20))
        self.assertEqual((r.net_rx_bytes, r.net_tx_bytes, r.net_rx_packets, r.net_tx_packets), (1500, 300, 10, 5))
        self.assertEqual((r.connections_allowed, r.connections_denied, r.processes), (7, 3, 14))

    def test_missing_figures_are_none_with_a_reason(self):
        c, _ = fake({API + "/namespaces/ns/sandboxes/web/stats": WEB})
        stats = Sandbox(c, {"metadata": {"name": "web", "namespace": "ns"}}).stats()
        no_pod = stats.replicas[1]
        self.assertEqual((no_pod.reason, no_pod.message), ("NoPod", "the replica has no pod now"))
        for name in ("timestamp", "window", "cpu_cores", "cpu_seconds", "memory_bytes", "oom_kills", "disk_bytes",
                     "net_rx_bytes", "connections_denied", "processes", "node", "pod"):
            with self.subTest(figure=name):
                self.assertIsNone(getattr(no_pod, name))
        partial = stats.replicas[2]
        self.assertEqual(partial.reason, "Partial")
        # Read once: no window, so no CPU rate, though the CPU time is there.
        self.assertIsNone(partial.window)
        self.assertIsNone(partial.cpu_cores)
        self.assertEqual(partial.cpu_seconds, 1.0)
        # No limit and no peak are None, not 0.
        self.assertEqual(partial.memory_bytes, 512)
        self.assertIsNone(partial.memory_limit_bytes)
        self.assertIsNone(partial.memory_peak_bytes)
        self.assertIsNone(partial.disk_bytes)

    def test_list(self):
        listed = {"kind": "SandboxStatsList", "items": [WEB]}
        c, api = fake({API + "/namespaces/ns/sandboxstats": listed, API + "/namespaces/other/sandboxstats": listed,
                       API + "/sandboxstats": listed})
        out = list_stats(client=c)
        self.assertEqual([s.name for s in out], ["web"])
        list_stats("other", label_selector="team=ml", client=c)
        Sandbox.list_stats(all_namespaces=True, client=c)
        self.assertEqual(api.calls, [
            ("GET", API + "/namespaces/ns/sandboxstats", []),
            ("GET", API + "/namespaces/other/sandboxstats", [("labelSelector", "team=ml")]),
            ("GET", API + "/sandboxstats", []),
        ])
        with self.assertRaises(ValueError):
            list_stats("ns", all_namespaces=True, client=c)

    def test_errors_are_typed(self):
        forbidden = ApiException(status=403, reason="Forbidden")
        forbidden.body = status(403, "Forbidden", 'sandboxes.sandbox.kube-sandbox.io "web" is forbidden: User "eve" '
                                                  'cannot get resource "sandboxes/stats"')
        missing = ApiException(status=404, reason="Not Found")
        missing.body = status(404, "NotFound", 'sandboxes.sandbox.kube-sandbox.io "ghost" not found')
        denied = ApiException(status=403, reason="Forbidden")
        denied.body = status(403, "Forbidden", 'cannot list resource "sandboxstats"')
        c, _ = fake({API + "/namespaces/ns/sandboxes/web/stats": forbidden,
                     API + "/namespaces/ns/sandboxes/ghost/stats": missing, API + "/sandboxstats": denied})
        with self.assertRaises(ForbiddenError) as e:
            Sandbox(c, {"metadata": {"name": "web", "namespace": "ns"}}).stats()
        self.assertIn('"sandboxes/stats"', e.exception.message)
        with self.assertRaises(NotFoundError):
            Sandbox(c, {"metadata": {"name": "ghost", "namespace": "ns"}}).stats()
        with self.assertRaises(ForbiddenError):
            list_stats(all_namespaces=True, client=c)


class HelpersTest(unittest.TestCase):
    def test_parse_duration(self):
        cases = {"10s": 10.0, "0s": 0.0, "0": 0.0, "1m30s": 90.0, "1h2m3.5s": 3723.5, "500ms": 0.5, "1.5s": 1.5,
                 "250us": 0.00025, "-2s": -2.0}
        for value, want in cases.items():
            with self.subTest(value=value):
                self.assertAlmostEqual(parse_duration(value), want)
        self.assertIsNone(parse_duration(None))
        self.assertIsNone(parse_duration(""))
        for bad in ("10", "s", "1x", "1s2", "ten seconds"):
            with self.subTest(value=bad), self.assertRaises(ValueError):
                parse_duration(bad)

    def test_stats_path(self):
        self.assertEqual(stats_path("a b"), API + "/namespaces/a%20b/sandboxstats")
        self.assertEqual(stats_path(None), API + "/sandboxstats")


if __name__ == "__main__":
    unittest.main()
