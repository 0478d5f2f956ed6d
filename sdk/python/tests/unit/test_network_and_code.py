"""Unit tests of egress target parsing and policy edits (kube_sandbox.network), and of how a
code run's JSON lines become an Execution (kube_sandbox.code)."""

import json
import unittest

from kube_sandbox.code import collect
from kube_sandbox.errors import ForbiddenError, SandboxError
from kube_sandbox.network import (ALLOW, DENY, EgressPort, EgressRule, NetworkPolicy, add_rules, parse_rules,
                                  policy_patch, remove_rules)


def api(rules):
    return [r.to_api() for r in rules]


class ParseRulesTest(unittest.TestCase):
    def test_targets(self):
        cases = {
            "example.com": {"action": "Allow", "to": "example.com"},
            "example.com:443": {"action": "Allow", "to": "example.com", "ports": [{"port": 443}]},
            "*.cdn.example.org:443": {"action": "Allow", "to": "*.cdn.example.org", "ports": [{"port": 443}]},
            "10.0.0.0/8:8080-8090/udp": {"action": "Allow", "to": "10.0.0.0/8",
                                         "ports": [{"port": 8080, "endPort": 8090, "protocol": "UDP"}]},
            "[2001:db8::1]:443": {"action": "Allow", "to": "2001:db8::1", "ports": [{"port": 443}]},
            "2001:db8::/32": {"action": "Allow", "to": "2001:db8::/32"},
            "[2001:db8::/32]": {"action": "Allow", "to": "2001:db8::/32"},
            "a.com:53/TCP": {"action": "Allow", "to": "a.com", "ports": [{"port": 53, "protocol": "TCP"}]},
            "a.com:80-80": {"action": "Allow", "to": "a.com", "ports": [{"port": 80}]},
        }
        for value, want in cases.items():
            with self.subTest(value=value):
                self.assertEqual(api(parse_rules([value], ALLOW)), [want])

    def test_lists_and_port_items(self):
        rules = parse_rules(["example.com:80,443", "a.com, b.com:22"], DENY)
        self.assertEqual(api(rules), [
            {"action": "Deny", "to": "example.com", "ports": [{"port": 80}, {"port": 443}]},
            {"action": "Deny", "to": "a.com"},
            {"action": "Deny", "to": "b.com", "ports": [{"port": 22}]},
        ])
        self.assertEqual(len(parse_rules("a.com", ALLOW)), 1)  # a bare string is one value

    def test_errors(self):
        for bad in ("", "a.com,", "443", "a.com,443", "a.com:", "a.com:0", "a.com:65536", "a.com:90-80",
                    "a.com:80/SCTP", "2001:db8::1:443x", "[a.com]:443", "[2001:db8::1", "[2001:db8::1]443"):
            with self.subTest(value=bad), self.assertRaises(ValueError):
                parse_rules([bad], ALLOW)
        with self.assertRaises(ValueError):
            parse_rules(["a.com:" + ",".join(str(p) for p in range(1, 18))], ALLOW)
        with self.assertRaises(ValueError):
            parse_rules(["a.com"], "Maybe")

    def test_rule_text(self):
        r = parse_rules(["[2001:db8::1]:443,8000-8010/UDP"], ALLOW)[0]
        self.assertEqual(str(r), "Allow [2001:db8::1]:443,8000-8010/UDP")


class EditTest(unittest.TestCase):
    def test_add_puts_new_rules_first_and_replaces_the_same_match(self):
        old = NetworkPolicy(DENY, parse_rules(["a.com:443", "b.com"], ALLOW) + parse_rules(["c.com"], DENY))
        new = add_rules(old, parse_rules(["A.com.:443", "d.com"], DENY))
        self.assertEqual([str(r) for r in new.rules], ["Deny A.com.:443", "Deny d.com", "Allow b.com", "Deny c.com"])
        self.assertEqual(new.default_action, DENY)
        self.assertEqual([str(r) for r in old.rules], ["Allow a.com:443", "Allow b.com", "Deny c.com"])

    def test_add_without_a_policy_denies_the_rest(self):
        new = add_rules(None, parse_rules(["x.org", "x.org"], ALLOW))
        self.assertEqual(new.to_api(), {"defaultAction": "Deny", "egress": [{"action": "Allow", "to": "x.org"}]})

    def test_same_match_normalizes_cidrs_and_ports(self):
        a = EgressRule(ALLOW, "10.1.2.3/8", (EgressPort(443), EgressPort(80, protocol="TCP")))
        b = EgressRule(DENY, "10.0.0.0/8", (EgressPort(80), EgressPort(443, 443)))
        self.assertTrue(a.matches_same(b))
        self.assertFalse(a.matches_same(EgressRule(ALLOW, "10.0.0.0/8")))

    def test_remove(self):
        old = NetworkPolicy(ALLOW, parse_rules(["a.com:443", "a.com:80", "b.com"], DENY))
        self.assertEqual([str(r) for r in remove_rules(old, parse_rules(["a.com:443"], ALLOW)).rules],
                         ["Deny a.com:80", "Deny b.com"])
        self.assertEqual([str(r) for r in remove_rules(old, parse_rules(["a.com"], ALLOW)).rules], ["Deny b.com"])
        with self.assertRaises(ValueError):
            remove_rules(old, parse_rules(["z.com"], ALLOW))
        with self.assertRaises(ValueError):
            remove_rules(None, parse_rules(["a.com"], ALLOW))

    def test_patch_nulls_what_the_policy_lacks(self):
        self.assertEqual(policy_patch("42", NetworkPolicy(DENY, [])),
                         {"metadata": {"resourceVersion": "42"}, "spec": {"networkPolicy": {"defaultAction": "Deny",
                                                                                            "egress": None}}})
        self.assertEqual(policy_patch("7", None), {"metadata": {"resourceVersion": "7"}, "spec": {"networkPolicy": None}})

    def test_policy_round_trip(self):
        raw = {"defaultAction": "Allow", "egress": [{"action": "Deny", "to": "192.0.2.0/24",
                                                     "ports": [{"port": 5000, "endPort": 5010, "protocol": "UDP"}]}]}
        self.assertEqual(NetworkPolicy.from_api(raw).to_api(), raw)
        self.assertIsNone(NetworkPolicy.from_api(None))
        self.assertEqual(NetworkPolicy.from_api({}).default_action, DENY)


def lines(*events):
    return [json.dumps(e).encode() for e in events]


class CollectTest(unittest.TestCase):
    def test_a_run(self):
        seen = []
        ex = collect(lines(
            {"type": "stdout", "text": "a"},
            {"type": "stderr", "text": "warn\n"},
            {"type": "stdout", "text": "b\n"},
            {"type": "display", "text": "<Figure>", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}},
            {"type": "result", "text": "42", "data": {"text/html": "<b>42</b>"}, "executionCount": 3},
            {"type": "end", "status": "ok", "executionCount": 3},
        ) + [b""], seen.append)
        self.assertEqual((ex.stdout, ex.stderr), ("ab\n", "warn\n"))
        self.assertEqual(ex.text, "42")
        self.assertEqual(ex.results, [{"image/png": "iVBOR", "text/plain": "<Figure>"},
                                      {"text/html": "<b>42</b>", "text/plain": "42"}])
        self.assertEqual(ex.execution_count, 3)
        self.assertTrue(ex.ok)
        self.assertIsNone(ex.error)
        self.assertEqual(len(seen), 6)

    def test_an_exception(self):
        ex = collect(lines(
            {"type": "error", "error": {"name": "ZeroDivisionError", "value": "division by zero",
                                        "traceback": ["Traceback", "ZeroDivisionError: division by zero"]}},
            {"type": "end", "status": "error"},
        ))
        self.assertFalse(ex.ok)
        self.assertEqual(ex.error.name, "ZeroDivisionError")
        self.assertEqual(str(ex.error), "Traceback\nZeroDivisionError: division by zero")
        self.assertIsNone(ex.text)

    def test_interrupted(self):
        ex = collect(lines({"type": "end", "status": "aborted", "reason": "DeadlineExceeded", "message": "too long",
                            "truncated": True}))
        self.assertEqual((ex.status, ex.reason, ex.message, ex.truncated), ("aborted", "DeadlineExceeded", "too long", True))

    def test_no_end(self):
        with self.assertRaises(SandboxError):
            collect(lines({"type": "stdout", "text": "a"}))

    def test_garbage_and_status_lines(self):
        with self.assertRaises(SandboxError):
            collect([b"not json"])
        with self.assertRaises(ForbiddenError):
            collect(lines({"kind": "Status", "status": "Failure", "code": 403, "message": "no"}))


if __name__ == "__main__":
    unittest.main()
