"""A sandbox's outbound network policy: ``sb.network``, and the ``allow=`` of ``create``.

A policy (``spec.networkPolicy``) is a list of egress rules, of which the first that matches a
connection decides, and a default action for what none matches. Targets are written as
``kubectl sandbox`` takes them (``--allow``):

* a DNS name (``example.com``), a wildcard for its subdomains at any depth
  (``*.cdn.example.org``; the bare name needs its own rule), an IPv4 or IPv6 address, or a
  CIDR (``10.0.0.0/8``);
* optionally ``:PORTS``: a port, a range, ``/UDP`` for UDP (TCP otherwise):
  ``example.com:443``, ``10.0.0.0/8:8080-8090/UDP``; an IPv6 address goes in brackets to take
  ports (``[2001:db8::1]:443``);
* several, separated by commas; a port alone after a target with ports adds to its ports:
  ``example.com:80,443`` is one rule with two ports.

::

    sb = Sandbox.create(pool="python", allow=["example.com:443", "*.cdn.example.org:443"])
    sb.network.allow("api.openai.com:443")
    sb.network.deny("203.0.113.0/24")
    print(sb.network.show())

The server checks every rule (a bad one is a 422 naming the field); this module parses the
syntax and keeps the list tidy.
"""

from __future__ import annotations

import ipaddress
import re
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from .errors import ConflictError, SandboxError
from ._util import Duration, condition, condition_text

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["EgressPort", "EgressRule", "NetworkPolicy", "Network", "parse_rules", "ALLOW", "DENY"]

ALLOW = "Allow"
DENY = "Deny"
MAX_PORTS = 16

_PORT_ITEM = re.compile(r"^[0-9]+(-[0-9]+)?(/[A-Za-z]+)?$")


@dataclass(frozen=True)
class EgressPort:
    """A port or a range of ports of a rule.

    Attributes:
        port: The port, or the first of the range (1-65535).
        end_port: The last port of a range (inclusive), or None.
        protocol: ``TCP`` or ``UDP``; empty means TCP (the API's default).
    """

    port: int
    end_port: Optional[int] = None
    protocol: str = ""

    def to_api(self) -> Dict[str, Any]:
        """The port as the API writes it."""
        out: Dict[str, Any] = {"port": self.port}
        if self.end_port is not None and self.end_port != self.port:
            out["endPort"] = self.end_port
        if self.protocol:
            out["protocol"] = self.protocol
        return out

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> "EgressPort":
        """A port from the API's dict."""
        end = obj.get("endPort")
        return cls(port=int(obj.get("port") or 0), end_port=int(end) if end is not None else None,
                   protocol=str(obj.get("protocol") or ""))

    def __str__(self) -> str:
        s = str(self.port)
        if self.end_port is not None and self.end_port != self.port:
            s += f"-{self.end_port}"
        if self.protocol.upper() == "UDP":
            s += "/UDP"
        return s


@dataclass(frozen=True)
class EgressRule:
    """An egress rule: ``action`` (Allow or Deny) for connections to ``to`` on ``ports``
    (every port and protocol when empty)."""

    action: str
    to: str
    ports: Tuple[EgressPort, ...] = ()

    def to_api(self) -> Dict[str, Any]:
        """The rule as the API writes it."""
        out: Dict[str, Any] = {"action": self.action, "to": self.to}
        if self.ports:
            out["ports"] = [p.to_api() for p in self.ports]
        return out

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> "EgressRule":
        """A rule from the API's dict."""
        return cls(action=str(obj.get("action") or ""), to=str(obj.get("to") or ""),
                   ports=tuple(EgressPort.from_api(p) for p in obj.get("ports") or []))

    @property
    def target(self) -> str:
        """The target and ports in the ``TARGET[:PORTS]`` syntax, like ``example.com:443``."""
        if not self.ports:
            return self.to
        host = f"[{self.to}]" if ":" in self.to else self.to
        return host + ":" + ",".join(str(p) for p in self.ports)

    def matches_same(self, other: "EgressRule") -> bool:
        """Whether both rules match the same traffic, whatever their actions."""
        return target_key(self.to) == target_key(other.to) and port_key(self.ports) == port_key(other.ports)

    def __str__(self) -> str:
        return f"{self.action} {self.target}"


@dataclass
class NetworkPolicy:
    """An outbound policy: ``rules`` in order (the first match decides), and
    ``default_action`` (``Allow`` or ``Deny``) for what none matches."""

    default_action: str = DENY
    rules: List[EgressRule] = field(default_factory=list)

    def to_api(self) -> Dict[str, Any]:
        """The policy as ``spec.networkPolicy`` holds it."""
        out: Dict[str, Any] = {"defaultAction": self.default_action or DENY}
        if self.rules:
            out["egress"] = [r.to_api() for r in self.rules]
        return out

    @classmethod
    def from_api(cls, obj: Optional[Mapping[str, Any]]) -> Optional["NetworkPolicy"]:
        """A policy from ``spec.networkPolicy`` (None stays None)."""
        if obj is None:
            return None
        action = ALLOW if obj.get("defaultAction") == ALLOW else DENY
        return cls(default_action=action, rules=[EgressRule.from_api(r) for r in obj.get("egress") or []])

    def __str__(self) -> str:
        lines = [f"default {self.default_action}"]
        lines += [f"{i + 1}. {r}" for i, r in enumerate(self.rules)]
        return "\n".join(lines)


def target_key(to: str) -> str:
    """What a target matches, so that ``Example.COM.`` and ``example.com``, or ``10.1.2.3/8`` and
    ``10.0.0.0/8``, compare equal."""
    t = to.strip()
    try:
        if "/" in t:
            return str(ipaddress.ip_network(t, strict=False))
        return str(ipaddress.ip_address(t))
    except ValueError:
        return t.lower().rstrip(".")


def port_key(ports: Iterable[EgressPort]) -> Tuple[Tuple[str, int, int], ...]:
    """A rule's ports in a canonical form: sorted, TCP explicit, single ports as ranges."""
    spans = {((p.protocol or "TCP").upper(), p.port, p.end_port if p.end_port is not None else p.port) for p in ports}
    return tuple(sorted(spans))


def _port_number(s: str) -> int:
    if not s or not s.isdigit():
        raise ValueError(f"{s!r} is not a port number")
    n = int(s)
    if not 1 <= n <= 65535:
        raise ValueError(f"port {s} is out of range (1-65535)")
    return n


def parse_port(s: str) -> EgressPort:
    """``PORT[-END][/PROTO]`` as a port."""
    spec, slash, proto = s.partition("/")
    protocol = ""
    if slash:
        if proto.upper() not in ("TCP", "UDP"):
            raise ValueError(f"unknown protocol {proto!r}: must be TCP or UDP")
        protocol = proto.upper()
    first, dash, end = spec.partition("-")
    port = _port_number(first)
    end_port: Optional[int] = None
    if dash:
        e = _port_number(end)
        if e < port:
            raise ValueError(f"the port range {spec} ends before it starts")
        if e > port:
            end_port = e
    return EgressPort(port=port, end_port=end_port, protocol=protocol)


def _is_ip_or_cidr(s: str) -> bool:
    try:
        if "/" in s:
            ipaddress.ip_network(s, strict=False)
        else:
            ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def split_host_port(item: str) -> Tuple[str, str]:
    """``TARGET[:PORT]`` or ``[ADDRESS]:PORT`` as (target, port); a bare IPv6 address or CIDR
    has no port."""
    if item.startswith("["):
        host, sep, rest = item[1:].partition("]")
        if not sep:
            raise ValueError("missing ] after the address")
        if not _is_ip_or_cidr(host):
            raise ValueError("brackets hold an IP address or a CIDR, as in [2001:db8::1]:443")
        if not rest:
            return host, ""
        if not rest.startswith(":") or len(rest) == 1:
            raise ValueError("expected :PORT after ]")
        return host, rest[1:]
    colons = item.count(":")
    if colons == 0:
        return item, ""
    if colons == 1:
        host, _, port = item.partition(":")
        if not port:
            raise ValueError("missing port after :")
        return host, port
    if _is_ip_or_cidr(item):
        return item, ""
    raise ValueError("put an IPv6 address in brackets to give it a port, as in [2001:db8::1]:443")


def parse_rules(values: Iterable[str], action: str) -> List[EgressRule]:
    """Parses ``TARGET[:PORTS]`` values, each possibly a comma-separated list, into rules
    with ``action``, in order.

    Raises:
        ValueError: a value does not parse; the message names it.
    """
    if action not in (ALLOW, DENY):
        raise ValueError(f"action must be {ALLOW} or {DENY}, not {action!r}")
    if isinstance(values, str):
        values = [values]
    rules: List[EgressRule] = []
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"a target must be a str like 'example.com:443', not {type(value).__name__}")
        last = -1  # the rule a bare port adds to; -1 when that would narrow a rule without ports
        for raw in value.split(","):
            item = raw.strip()
            if not item:
                raise ValueError(f"{value!r}: empty target in the list")
            if _PORT_ITEM.match(item):
                if last < 0:
                    raise ValueError(f"{item!r}: a port needs a target with a port before it, as in example.com:80,443")
                try:
                    port = parse_port(item)
                except ValueError as e:
                    raise ValueError(f"{item!r}: {e}") from None
                r = rules[last]
                if len(r.ports) >= MAX_PORTS:
                    raise ValueError(f"{value!r}: at most {MAX_PORTS} ports per target")
                rules[last] = EgressRule(r.action, r.to, r.ports + (port,))
                continue
            try:
                host, ports = split_host_port(item)
                if not host or host != host.strip():
                    raise ValueError("empty target")
                rule = EgressRule(action, host, (parse_port(ports),) if ports else ())
            except ValueError as e:
                raise ValueError(f"{item!r}: {e}") from None
            rules.append(rule)
            last = len(rules) - 1 if rule.ports else -1
    return rules


def add_rules(old: Optional[NetworkPolicy], rules: List[EgressRule]) -> NetworkPolicy:
    """``old`` with ``rules`` put first, so that they decide for what they name. A rule of
    ``old`` that matches the same traffic as a new one (the same target and ports) is
    dropped, whatever its action. Without ``old``, the policy is default Deny and
    ``rules``."""
    added: List[EgressRule] = []
    for r in rules:
        if not any(a.matches_same(r) for a in added):
            added.append(r)
    base = old.rules if old is not None else []
    rest = [e for e in base if not any(a.matches_same(e) for a in added)]
    return NetworkPolicy(default_action=old.default_action if old is not None else DENY, rules=added + rest)


def remove_rules(old: Optional[NetworkPolicy], targets: List[EgressRule]) -> NetworkPolicy:
    """``old`` without the rules for ``targets``: a target without ports removes every rule
    for it, one with ports the rules with exactly those ports.

    Raises:
        ValueError: a target matches no rule (and nothing is removed).
    """
    if old is None:
        raise ValueError("the sandbox has no network policy of its own")
    keep = list(old.rules)
    for t in targets:
        def hit(e: EgressRule) -> bool:
            return target_key(e.to) == target_key(t.to) and (not t.ports or port_key(e.ports) == port_key(t.ports))
        if not any(hit(e) for e in keep):
            raise ValueError(f"no rule for {t.target}")
        keep = [e for e in keep if not hit(e)]
    return NetworkPolicy(default_action=old.default_action, rules=keep)


def policy_patch(resource_version: Optional[str], policy: Optional[NetworkPolicy]) -> Dict[str, Any]:
    """The JSON merge patch that sets ``spec.networkPolicy`` to ``policy`` (removes it for
    None), conditional on ``resource_version``. A merge patch merges objects field by field,
    so the fields the new policy lacks are set to null, not left out; lists are replaced
    whole."""
    value: Optional[Dict[str, Any]] = None
    if policy is not None:
        value = {"defaultAction": policy.default_action or DENY, "egress": [r.to_api() for r in policy.rules] or None}
    patch: Dict[str, Any] = {"spec": {"networkPolicy": value}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


class Network:
    """The outbound policy of a sandbox (``sb.network``).

    Every change reads the sandbox, computes the new policy and sends it as a merge patch
    conditional on the version read, so that concurrent changes are never lost (a conflict
    reads again). With ``wait=True`` a change returns once every pod enforces it (the
    condition ``EgressReady``); it is in force within about a second anyway.
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def show(self) -> Optional[NetworkPolicy]:
        """The sandbox's own policy, read anew; None when it has none (its pool's policy, or
        the platform's default, which denies everything, applies)."""
        self._sb.refresh()
        return NetworkPolicy.from_api((self._sb.raw.get("spec") or {}).get("networkPolicy"))

    def allow(self, *targets: str, wait: bool = False, timeout: Duration = 60) -> NetworkPolicy:
        """Allows ``targets`` (``TARGET[:PORTS]``, see the module's doc), ahead of the other
        rules. A sandbox without a policy of its own gets one: default Deny and these rules,
        which replaces its pool's policy (a warning says so)."""
        rules = parse_rules(targets, ALLOW)
        return self._edit(lambda old: add_rules(old, rules), wait=wait, timeout=timeout)

    def deny(self, *targets: str, wait: bool = False, timeout: Duration = 60) -> NetworkPolicy:
        """Denies ``targets``, ahead of the other rules (so that a broader Allow rule, like
        one for ``*.example.com``, no longer lets them through)."""
        rules = parse_rules(targets, DENY)
        return self._edit(lambda old: add_rules(old, rules), wait=wait, timeout=timeout)

    def remove(self, *targets: str, wait: bool = False, timeout: Duration = 60) -> NetworkPolicy:
        """Removes the rules for ``targets`` (a target without ports: every rule for it).

        Raises:
            ValueError: a target matches no rule.
        """
        rules = parse_rules(targets, ALLOW)
        return self._edit(lambda old: remove_rules(old, rules), wait=wait, timeout=timeout)  # type: ignore[return-value]

    def set(self, policy: Optional[NetworkPolicy], *, wait: bool = False, timeout: Duration = 60) -> Optional[NetworkPolicy]:
        """Replaces the policy with ``policy``; None removes the sandbox's own, so that its
        pool's (or the platform's default) applies again."""
        return self._edit(lambda old: policy, wait=wait, timeout=timeout, warn=False)

    def deny_all(self, *, wait: bool = False, timeout: Duration = 60) -> NetworkPolicy:
        """Denies all outbound traffic: no rules, default Deny."""
        return self.set(NetworkPolicy(DENY, []), wait=wait, timeout=timeout)  # type: ignore[return-value]

    def reset(self, *, wait: bool = False, timeout: Duration = 60) -> None:
        """Removes the sandbox's own policy (its pool's, or the platform's default, applies)."""
        self.set(None, wait=wait, timeout=timeout)

    def _edit(
        self,
        edit: Callable[[Optional[NetworkPolicy]], Optional[NetworkPolicy]],
        *,
        wait: bool,
        timeout: Duration,
        warn: bool = True,
    ) -> Optional[NetworkPolicy]:
        sb = self._sb
        for _ in range(10):
            sb.refresh()
            raw_old = (sb.raw.get("spec") or {}).get("networkPolicy")
            old = NetworkPolicy.from_api(raw_old)
            new = edit(old)
            if new is not None and old is not None and new.to_api() == old.to_api():
                return new
            if new is None and old is None:
                return None
            try:
                sb._patch(policy_patch(sb.resource_version, new))
            except ConflictError as e:
                if "resourceVersion" in e.message or "modified" in e.message or "latest version" in e.message:
                    continue  # changed meanwhile: read again
                raise
            stored = NetworkPolicy.from_api((sb.raw.get("spec") or {}).get("networkPolicy"))
            if (stored.to_api() if stored else None) != (new.to_api() if new else None):
                raise SandboxError(f"the server did not store the network policy of sandbox {sb.name} as sent")
            if old is None and new is not None and warn:
                warnings.warn(
                    f"sandbox {sb.name} had no network policy of its own, so its pool's or the platform's "
                    "default applied; it now has its own, which replaces that one and denies what no rule allows",
                    stacklevel=3)
            if wait:
                self._wait_in_force(timeout)
            return new
        raise ConflictError(f"sandbox {sb.name} kept changing while its network policy was edited", code=409,
                            reason="Conflict")

    def _wait_in_force(self, timeout: Duration) -> None:
        generation = int((self._sb.raw.get("metadata") or {}).get("generation") or 0)

        def in_force(obj: Optional[Dict[str, Any]]) -> bool:
            if obj is None:
                return False
            c = condition(obj, "EgressReady")
            if not c or int(c.get("observedGeneration") or 0) < generation:
                return False
            if c.get("status") == "True":
                return True
            if c.get("reason") == "PolicyFailed":
                raise SandboxError(f"sandbox {self._sb.name}: the network policy failed to apply: {condition_text(c)}",
                                   reason="PolicyFailed")
            return False

        self._sb.wait_for(in_force, timeout=timeout, what="its network policy in force")
