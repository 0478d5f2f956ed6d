"""End-to-end tests of the kube-sandbox SDK against a real cluster.

They need a cluster with kube-sandbox, a namespace of their own and a Pool in it of an image
with python3 (the sample Python image), named by the environment:

    KUBECONFIG              the admin's kubeconfig (as for kubectl)
    KUBE_SANDBOX_NAMESPACE  the namespace to work in (the tests make sandboxes, a
                            ServiceAccount, a Role and a RoleBinding there)
    KUBE_SANDBOX_POOL       the Pool to take sandboxes from

test/e2e/python_sdk_test.go (``go test -tags e2e ./test/e2e -run TestPythonSDK``) makes the
namespace and the pool and runs them with
``/usr/bin/python3 -m unittest discover -v -s sdk/python/tests/e2e -t sdk/python``.
Without the variables every test is skipped.

Waits are on watches (the SDK's own) or on streams that end when the awaited thing happens
(a process's log); the one poll is for RBAC, which has nothing to watch.
"""

import hashlib
import os
import time
import unittest
import uuid
import warnings
from datetime import datetime, timedelta, timezone

from kubernetes import client as k8s_client

from kube_sandbox import (Client, ConflictError, ForbiddenError, InvalidError, NotFoundError, Sandbox, SandboxError,
                          WaitTimeoutError)

NAMESPACE = os.environ.get("KUBE_SANDBOX_NAMESPACE", "")
POOL = os.environ.get("KUBE_SANDBOX_POOL", "")
#: A label on every sandbox of this run, to find them (and what a failed create left).
RUN = uuid.uuid4().hex[:8]
LABELS = {"kube-sandbox-sdk-e2e": RUN}

client: Client
shared: Sandbox


def setUpModule():
    global client, shared
    if not NAMESPACE or not POOL:
        raise unittest.SkipTest("set KUBE_SANDBOX_NAMESPACE and KUBE_SANDBOX_POOL (and KUBECONFIG) to run the e2e tests")
    client = Client(namespace=NAMESPACE)
    shared = Sandbox.create(pool=POOL, client=client, timeout=1800, labels=LABELS)


def tearDownModule():
    try:
        shared.delete()
    except (NameError, SandboxError):
        pass
    try:
        client.close()
    except NameError:
        pass


def new_sandbox(**kw):
    """A sandbox of the pool, deleted when the test ends."""
    kw.setdefault("labels", LABELS)
    sb = Sandbox.create(pool=POOL, client=client, **kw)
    return sb


class AgentLoopTest(unittest.TestCase):
    def test_create_write_exec_read_delete(self):
        start = time.monotonic()
        sb = new_sandbox(env={"GREETING": "hello"})
        self.addCleanup(lambda: _delete_quietly(sb))
        self.assertTrue(sb.ready)
        self.assertEqual(sb.phase, "Running")
        self.assertTrue(sb.name.startswith("sbx-"), sb.name)
        self.assertEqual(sb.pool, POOL)
        self.assertEqual(sb.namespace, NAMESPACE)
        self.assertLess(time.monotonic() - start, 120)

        program = "import os, sys\nprint(os.environ['GREETING'], sum(range(10)))\nopen('/tmp/out.txt', 'w').write('done')\n"
        info = sb.files.write("/work/agent/main.py", program)
        self.assertEqual((info.path, info.type, info.size), ("/work/agent/main.py", "file", len(program)))

        result = sb.exec(["python3", "/work/agent/main.py"])
        self.assertEqual((result.exit_code, result.stdout, result.stderr), (0, "hello 45\n", ""))
        self.assertEqual(sb.files.read("/tmp/out.txt"), b"done")

        # A sandbox without a timeout has no expiry to renew.
        self.assertIsNone(sb.expires_at)
        with self.assertRaises(ConflictError):
            sb.renew(600)

        sb.delete(wait=True, timeout=120)
        with self.assertRaises(NotFoundError):
            Sandbox.get(sb.name, client=client)
        with self.assertRaises(NotFoundError):
            sb.exec("true")


class ExecTest(unittest.TestCase):
    def test_exit_code_and_stderr(self):
        r = shared.exec("echo to-out; echo to-err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.ok), (3, "to-out\n", "to-err\n", False))
        r = shared.exec(["python3", "-c", "import sys; sys.stdout.write('x'); sys.exit(0)"])
        self.assertEqual((r.exit_code, r.stdout, r.ok), (0, "x", True))

    def test_command_not_found(self):
        r = shared.exec(["no-such-command-here"])
        self.assertEqual(r.exit_code, 127)
        self.assertIn("no-such-command-here", r.stderr)

    def test_stdin_env_workdir(self):
        data = os.urandom(3 << 20)
        r = shared.exec("sha256sum", stdin=data)
        self.assertEqual(r.stdout.split()[0], hashlib.sha256(data).hexdigest())
        r = shared.exec("cat", stdin="text ✓")
        self.assertEqual(r.stdout, "text ✓")
        r = shared.exec("echo $A-$B; pwd", env={"A": "1", "B": "two words"}, workdir="/tmp")
        self.assertEqual(r.stdout, "1-two words\n/tmp\n")

    def test_timeout_kills(self):
        start = time.monotonic()
        r = shared.exec("sleep 60", timeout=1)
        self.assertNotEqual(r.exit_code, 0)
        self.assertLess(time.monotonic() - start, 30)

    def test_streaming_callbacks(self):
        out = []
        r = shared.exec("for i in 1 2 3; do echo $i; done", on_stdout=out.append)
        self.assertEqual(b"".join(out), r.stdout_bytes)
        self.assertEqual(r.stdout, "1\n2\n3\n")


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = f"/tmp/files-{uuid.uuid4().hex[:6]}"
        self.addCleanup(lambda: shared.files.remove(self.dir, recursive=True) if shared.files.exists(self.dir) else None)

    def test_write_list_stat_read_remove(self):
        files = shared.files
        files.write(f"{self.dir}/a.txt", b"alpha")
        files.write(f"{self.dir}/sub/b.sh", "#!/bin/sh\necho b\n", mode=0o755)
        files.mkdir(f"{self.dir}/empty")

        entries = files.list(self.dir)
        self.assertEqual([(e.name, e.type) for e in entries], [("a.txt", "file"), ("empty", "dir"), ("sub", "dir")])
        self.assertEqual(entries[0].path, f"{self.dir}/a.txt")
        self.assertEqual(entries[0].size, 5)
        deep = files.list(self.dir, depth=2)
        self.assertIn(f"{self.dir}/sub/b.sh", [e.path for e in deep])

        st = files.stat(f"{self.dir}/sub/b.sh")
        self.assertEqual((st.type, st.mode, st.size), ("file", 0o755, 17))
        self.assertLess(abs((st.mtime - datetime.now(timezone.utc)).total_seconds()), 300)
        self.assertEqual(shared.exec(f"{self.dir}/sub/b.sh").stdout, "b\n")

        self.assertTrue(files.exists(f"{self.dir}/a.txt"))
        self.assertFalse(files.exists(f"{self.dir}/nope"))
        with self.assertRaises(NotFoundError):
            files.read(f"{self.dir}/nope")
        with self.assertRaises(SandboxError) as cm:
            files.read(self.dir)
        self.assertEqual(cm.exception.reason, "IsADirectory")

        with self.assertRaises(ConflictError):
            files.remove(f"{self.dir}/sub")
        files.remove(f"{self.dir}/a.txt")
        files.remove(f"{self.dir}/sub", recursive=True)
        self.assertEqual([e.name for e in files.list(self.dir)], ["empty"])
        with self.assertRaises(NotFoundError):
            files.remove(f"{self.dir}/a.txt")

    def test_binary_and_odd_names(self):
        data = bytes(range(256)) * 1000
        name = f"{self.dir}/odd name ?#%.bin"
        shared.files.write(name, data)
        self.assertEqual(shared.files.read(name), data)
        self.assertEqual([e.name for e in shared.files.list(self.dir)], ["odd name ?#%.bin"])
        moved = shared.files.move(name, f"{self.dir}/plain.bin")
        self.assertEqual(moved.path, f"{self.dir}/plain.bin")
        self.assertEqual(shared.files.read(f"{self.dir}/plain.bin"), data)


class ProxyTest(unittest.TestCase):
    def test_http_server_through_the_proxy(self):
        www = f"/tmp/www-{uuid.uuid4().hex[:6]}"
        shared.files.write(f"{www}/hello.txt", "hello through the proxy\n")
        server = shared.processes.start(["python3", "-u", "-m", "http.server", "8080"], workdir=www)
        self.addCleanup(lambda: server.kill("KILL") if server.refresh().running else None)
        # The server prints its banner once it listens: follow its log until then.
        for line in shared.processes.log(server.id, follow=True):
            if "Serving HTTP" in line:
                break
        else:
            self.fail(f"the server ended without serving: {server.refresh()}")

        url = shared.proxy_url(8080, "/hello.txt")
        self.assertTrue(url.startswith(client.host + "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/"), url)
        with shared.http_session(8080) as session:
            r = session.get("/hello.txt", timeout=30)
            self.assertEqual((r.status_code, r.text), (200, "hello through the proxy\n"))
            r = session.get(url, timeout=30)
            self.assertEqual(r.status_code, 200)
            self.assertEqual(session.get("/missing", timeout=30).status_code, 404)
            # (Redirects cannot be tested here: the kube-apiserver turns a redirect from an
            # aggregated API server into a 502, see --aggregator-reject-forwarding-redirect.)
            shared.files.write(f"{www}/dir/index.html", "<p>index</p>")
            r = session.get("/dir/?q=1", timeout=30)
            self.assertEqual((r.status_code, r.text), (200, "<p>index</p>"))
            with self.assertRaises(ValueError):
                session.get("/../../../secrets")

        server.kill()
        server.wait(timeout=30)
        self.assertEqual((server.phase, server.signal, server.exit_code), ("Exited", "TERM", None))
        self.assertIn('"GET /hello.txt HTTP/1.1" 200', server.log())


class ProcessesTest(unittest.TestCase):
    def test_start_list_log_kill(self):
        p = shared.processes.start("echo started; exec sleep 600")
        self.assertEqual(p.phase, "Running")
        self.assertTrue(p.id)
        self.assertIn(p.id, [x.id for x in shared.processes.list()])
        for line in shared.processes.log(p.id, follow=True):
            self.assertEqual(line, "started\n")
            break
        self.assertEqual(p.log(), "started\n")
        with self.assertRaises(WaitTimeoutError):
            p.wait(timeout=1)
        p.kill("TERM")
        p.wait(timeout=30)
        self.assertEqual((p.phase, p.signal, p.exit_code), ("Exited", "TERM", None))
        self.assertEqual(shared.processes.get(p.id).phase, "Exited")

    def test_foreground_exit_code_and_output(self):
        p = shared.processes.start("echo out-$X; echo err >&2; exit 5", background=False, env={"X": "y"})
        self.assertEqual((p.phase, p.exit_code, p.reason), ("Exited", 5, "Error"))
        # stdout and stderr are two pipes: their lines interleave in no set order.
        self.assertEqual(sorted(p.log().splitlines(keepends=True)), ["err\n", "out-y\n"])
        lines = list(shared.processes.log(p.id, follow=True))
        self.assertEqual(sorted(lines), ["err\n", "out-y\n"])

    def test_unknown_process(self):
        with self.assertRaises(NotFoundError):
            shared.processes.get("p-doesnotexist")
        with self.assertRaises(NotFoundError):
            shared.processes.kill("p-doesnotexist")


class RunCodeTest(unittest.TestCase):
    def test_state_persists_between_runs(self):
        ctx = f"c{uuid.uuid4().hex[:6]}"
        shared.contexts.create(ctx)
        self.addCleanup(lambda: shared.contexts.delete(ctx))
        first = shared.run_code("x = 41\nprint('set')", context=ctx)
        self.assertEqual((first.stdout, first.text, first.status), ("set\n", None, "ok"))
        second = shared.run_code("x + 1", context=ctx)
        self.assertEqual(second.text, "42")
        self.assertEqual(second.results[0]["text/plain"], "42")
        self.assertTrue(second.ok)
        self.assertIn(ctx, [c.id for c in shared.contexts.list()])

    def test_default_context_error_and_timeout(self):
        events = []
        ex = shared.run_code("y = 'kept'\ndef f():\n    return 1/0\nf()", on_event=events.append)
        self.assertEqual(ex.status, "error")
        self.assertEqual(ex.error.name, "ZeroDivisionError")
        self.assertTrue(any("1/0" in line for line in ex.error.traceback))
        self.assertEqual(events[-1]["type"], "end")
        ex = shared.run_code("import time\ntime.sleep(60)", timeout=1)
        self.assertFalse(ex.ok)
        self.assertEqual(ex.reason, "DeadlineExceeded")
        self.assertEqual(shared.run_code("y").text, "'kept'")

    def test_unknown_context(self):
        with self.assertRaises(NotFoundError):
            shared.run_code("1", context="no-such-context")


class LifecycleTest(unittest.TestCase):
    def test_renew(self):
        sb = new_sandbox(timeout=300)
        self.addCleanup(lambda: _delete_quietly(sb))
        before = sb.expires_at
        self.assertIsNotNone(before)
        self.assertGreater(before, datetime.now(timezone.utc))
        sb.renew(900)
        self.assertGreater(sb.expires_at, before)
        later = datetime.now(timezone.utc) + timedelta(minutes=30)
        sb.renew(expires_at=later)
        self.assertEqual(sb.expires_at, later.replace(microsecond=0))
        # Only forward: a shorter renewal changes nothing.
        sb.renew(120)
        self.assertEqual(sb.expires_at, later.replace(microsecond=0))
        self.assertEqual(sb.refresh().expires_at, later.replace(microsecond=0))
        with self.assertRaises(InvalidError) as cm:
            sb.renew(expires_at=datetime.now(timezone.utc) - timedelta(hours=1))
        self.assertEqual(cm.exception.fields, ["expiresAt"])

    def test_context_manager_deletes(self):
        with new_sandbox() as sb:
            self.assertEqual(sb.exec("echo in").stdout, "in\n")
        # Deleted on exit: gone, or going (its pods are being deleted).
        try:
            obj = Sandbox.get(sb.name, client=client)
            self.assertTrue(obj.metadata.get("deletionTimestamp") or obj.phase == "Terminating", obj.raw)
        except NotFoundError:
            pass
        sb.wait_for(lambda o: o is None, timeout=120, what="its deletion")

    def test_pause_and_resume_keep_files(self):
        sb = new_sandbox(timeout=900)
        self.addCleanup(lambda: _delete_quietly(sb))
        sb.files.write("/root/kept.txt", "kept across the pause")
        sb.pause(timeout=300)
        self.assertEqual(sb.phase, "Paused")
        self.assertEqual(sb.pods, [])
        with self.assertRaises(ConflictError):
            sb.exec("true")
        sb.resume(timeout=300)
        self.assertEqual(sb.phase, "Running")
        self.assertEqual(sb.files.read("/root/kept.txt"), b"kept across the pause")

    def test_network_policy(self):
        sb = new_sandbox(allow=["example.com:443"])
        self.addCleanup(lambda: _delete_quietly(sb))
        policy = sb.network.show()
        self.assertEqual(policy.default_action, "Deny")
        self.assertEqual([str(r) for r in policy.rules], ["Allow example.com:443"])
        sb.network.allow("*.cdn.example.org:443", "10.0.0.0/8:8080-8090/UDP", wait=True)
        sb.network.deny("example.com:443")
        self.assertEqual([str(r) for r in sb.network.show().rules],
                         ["Deny example.com:443", "Allow *.cdn.example.org:443", "Allow 10.0.0.0/8:8080-8090/UDP"])
        sb.network.remove("10.0.0.0/8")
        self.assertEqual(len(sb.network.show().rules), 2)
        with self.assertRaises(InvalidError) as cm:
            sb.network.allow("not a name!")
        self.assertEqual(cm.exception.fields, ["spec.networkPolicy.egress[0].to"])
        sb.network.reset()
        self.assertIsNone(sb.network.show())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sb.network.allow("example.org")
        self.assertTrue(any("no network policy of its own" in str(w.message) for w in caught))


class ErrorsTest(unittest.TestCase):
    def test_not_found(self):
        with self.assertRaises(NotFoundError) as cm:
            Sandbox.get("does-not-exist", client=client)
        self.assertEqual((cm.exception.code, cm.exception.reason), (404, "NotFound"))
        ghost = Sandbox(client, {"metadata": {"name": "does-not-exist", "namespace": NAMESPACE}})
        with self.assertRaises(NotFoundError):
            ghost.exec("true")
        with self.assertRaises(NotFoundError):
            ghost.files.read("/etc/hostname")
        with self.assertRaises(NotFoundError):
            ghost.delete()

    def test_invalid(self):
        with self.assertRaises(InvalidError) as cm:
            Sandbox.create(pool=POOL, client=client, timeout=5, labels=LABELS)
        self.assertEqual(cm.exception.fields, ["spec.timeoutSeconds"])

    def test_wait_timeout_deletes_the_sandbox(self):
        with self.assertRaises(WaitTimeoutError) as cm:
            Sandbox.create(pool="no-such-pool", client=client, wait_timeout=3, labels=LABELS)
        self.assertIn("PoolNotFound", cm.exception.message)
        # The sandbox that never became Ready was deleted (it is gone, or going).
        left = [s for s in Sandbox.list(client=client, label_selector=f"kube-sandbox-sdk-e2e={RUN}")
                if s.pool == "no-such-pool" and not s.metadata.get("deletionTimestamp")]
        self.assertEqual(left, [])

    def test_list(self):
        names = [s.name for s in Sandbox.list(client=client, label_selector=f"kube-sandbox-sdk-e2e={RUN}")]
        self.assertIn(shared.name, names)
        running = Sandbox.list(client=client, field_selector=f"metadata.name={shared.name}")
        self.assertEqual([s.name for s in running], [shared.name])


class RBACTest(unittest.TestCase):
    """A user who may only read sandboxes (a ServiceAccount bound to a Role with get, list and
    watch on sandboxes) reads them, and is refused everything else with ForbiddenError."""

    def test_reader_is_forbidden_to_use_sandboxes(self):
        name = f"sdk-reader-{uuid.uuid4().hex[:6]}"
        core = k8s_client.CoreV1Api(client.api_client)
        rbac = k8s_client.RbacAuthorizationV1Api(client.api_client)
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": name}})
        rbac.create_namespaced_role(NAMESPACE, {"metadata": {"name": name}, "rules": [
            {"apiGroups": ["sandbox.kube-sandbox.io"], "resources": ["sandboxes"], "verbs": ["get", "list", "watch"]}]})
        rbac.create_namespaced_role_binding(NAMESPACE, {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]})
        # What `kubectl create token` does: a TokenRequest for the ServiceAccount.
        token = core.create_namespaced_service_account_token(
            name, NAMESPACE, {"spec": {"expirationSeconds": 600}}).status.token
        reader = Client.from_token(client.host, token, ca_cert=client.configuration.ssl_ca_cert, namespace=NAMESPACE)
        self.addCleanup(reader.close)
        _await_allowed(reader)

        sb = Sandbox.get(shared.name, client=reader)
        self.assertEqual(sb.phase, "Running")
        self.assertIn(shared.name, [s.name for s in Sandbox.list(client=reader)])
        sb.wait_ready(timeout=30)  # a watch, which the Role allows

        for what, call in [
            ("exec", lambda: sb.exec("touch /tmp/reader-was-here")),
            ("files read", lambda: sb.files.read("/etc/hostname")),
            ("files write", lambda: sb.files.write("/tmp/reader-was-here", "x")),
            ("process start", lambda: sb.processes.start("true")),
            ("run code", lambda: sb.run_code("1")),
            ("renew", lambda: sb.renew(600)),
            ("pause", lambda: sb.pause(wait=False)),
            ("delete", lambda: sb.delete()),
            ("create", lambda: Sandbox.create(pool=POOL, client=reader, labels=LABELS)),
        ]:
            with self.subTest(what):
                with self.assertRaises(ForbiddenError) as cm:
                    call()
                self.assertEqual(cm.exception.code, 403)
                self.assertIn(name, cm.exception.message)
        # The proxy session is plain requests: the refusal is its answer, not an exception.
        with sb.http_session(8080) as session:
            self.assertEqual(session.get("/", timeout=30).status_code, 403)
        self.assertFalse(shared.files.exists("/tmp/reader-was-here"))


def _await_allowed(reader: Client) -> None:
    """Waits until the API server lets ``reader`` get sandboxes: RBAC takes a moment to see a
    new RoleBinding, and there is no watch for authorization, so this asks (a
    SelfSubjectAccessReview, which sandbox-apiserver does not cache) until it says yes."""
    authz = k8s_client.AuthorizationV1Api(reader.api_client)
    review = {"spec": {"resourceAttributes": {"namespace": NAMESPACE, "verb": "get",
                                              "group": "sandbox.kube-sandbox.io", "resource": "sandboxes"}}}
    deadline = time.monotonic() + 30
    while not authz.create_self_subject_access_review(review).status.allowed:
        if time.monotonic() > deadline:
            raise AssertionError("the reader's RoleBinding did not take effect within 30s")
        time.sleep(0.1)


def _delete_quietly(sb: Sandbox) -> None:
    try:
        sb.delete()
    except NotFoundError:
        pass


if __name__ == "__main__":
    unittest.main()
