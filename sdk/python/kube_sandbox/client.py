"""The connection to a cluster: credentials, TLS and the default namespace.

A :class:`Client` wraps a ``kubernetes.client.ApiClient`` (the official Kubernetes Python
client) and a ``requests.Session`` with the same credentials. The ApiClient serves the
sandbox objects themselves (create, get, list, watch, patch, delete); the session serves the
subresources that stream bytes (files, proxy, logs, processes, code runs), and exec opens a
WebSocket with the same TLS settings (see :mod:`kube_sandbox.commands`).

Most programs never make one: ``Sandbox.create()`` and friends load the kubeconfig as kubectl
does (``$KUBECONFIG``, else ``~/.kube/config``, else the in-cluster service account) the first
time they need it. Make one to pick a kubeconfig, a context, or credentials of your own::

    client = Client(kubeconfig="/path/to/kubeconfig", context="staging")
    client = Client.from_token("https://10.0.0.1:6443", token, ca_cert="/path/ca.crt")
    sb = Sandbox.create(pool="python", client=client)
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import requests
import requests.auth
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from ._version import __version__ as _version
from .errors import SandboxError, error_from_api_exception, error_from_http

__all__ = ["Client", "default_client"]

_SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

Query = Union[Mapping[str, Any], Sequence[Tuple[str, Any]], None]


class _ConfigurationAuth(requests.auth.AuthBase):
    """Puts the configuration's credentials on each request: its bearer token (read anew each
    time, so that a refreshed token is used) or its username and password."""

    def __init__(self, configuration: k8s_client.Configuration) -> None:
        self.configuration = configuration

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        header = authorization_header(self.configuration)
        if header:
            r.headers["Authorization"] = header
        return r


def authorization_header(configuration: k8s_client.Configuration) -> Optional[str]:
    """The Authorization header value of ``configuration``: ``Bearer TOKEN``, basic auth, or
    None when it authenticates with a client certificate only."""
    token = configuration.get_api_key_with_prefix("authorization")
    if token:
        return str(token)
    if getattr(configuration, "username", None) and getattr(configuration, "password", None):
        return str(configuration.get_basic_auth_token())
    return None


def _query_items(query: Query) -> List[Tuple[str, str]]:
    """Query parameters as a list of (name, value) strings; lists repeat the name, booleans
    are ``true``/``false`` and None values are left out."""
    if not query:
        return []
    items = query.items() if isinstance(query, Mapping) else query
    out: List[Tuple[str, str]] = []
    for key, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None:
                continue
            if isinstance(v, bool):
                v = "true" if v else "false"
            out.append((key, str(v)))
    return out


class Client:
    """A connection to the Kubernetes API server that serves sandboxes.

    Args:
        api_client: A ``kubernetes.client.ApiClient`` to use as it is. Without one, the
            kubeconfig is loaded (``kubeconfig`` and ``context``, else ``$KUBECONFIG`` or
            ``~/.kube/config``), and inside a pod without a kubeconfig, the pod's service
            account.
        namespace: The namespace used when a call names none. Default: the kubeconfig
            context's namespace, the pod's namespace in a cluster, else ``default``.
        kubeconfig: Path of the kubeconfig file to load.
        context: Name of the kubeconfig context to use (default: its current context).

    Attributes:
        api_client: The ``kubernetes.client.ApiClient``.
        configuration: Its ``kubernetes.client.Configuration``: host, TLS files, token.
        namespace: The default namespace.
    """

    def __init__(
        self,
        api_client: Optional[k8s_client.ApiClient] = None,
        *,
        namespace: Optional[str] = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> None:
        loaded_namespace: Optional[str] = None
        if api_client is None:
            configuration, loaded_namespace = _load_configuration(kubeconfig, context)
            api_client = k8s_client.ApiClient(configuration)
        elif kubeconfig is not None or context is not None:
            raise ValueError("give either api_client or kubeconfig/context, not both")
        self.api_client: k8s_client.ApiClient = api_client
        self.configuration: k8s_client.Configuration = api_client.configuration
        self.namespace: str = namespace or loaded_namespace or "default"
        self._custom = k8s_client.CustomObjectsApi(api_client)
        self._session = self.new_session()

    @classmethod
    def from_configuration(cls, configuration: k8s_client.Configuration, *, namespace: Optional[str] = None) -> "Client":
        """A client for a ``kubernetes.client.Configuration`` you filled in yourself."""
        return cls(k8s_client.ApiClient(configuration), namespace=namespace)

    @classmethod
    def from_token(
        cls,
        host: str,
        token: str,
        *,
        ca_cert: Optional[str] = None,
        verify: bool = True,
        namespace: Optional[str] = None,
    ) -> "Client":
        """A client that authenticates with a bearer token (a service account's, say).

        Args:
            host: The API server's URL, like ``https://10.0.0.1:6443``.
            token: The bearer token.
            ca_cert: Path of the CA bundle that signed the server's certificate (default:
                the system's CAs).
            verify: False skips verifying the server's certificate; only for experiments.
            namespace: The default namespace (default: ``default``).
        """
        configuration = k8s_client.Configuration()
        configuration.host = host.rstrip("/")
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        configuration.ssl_ca_cert = ca_cert
        configuration.verify_ssl = verify
        return cls.from_configuration(configuration, namespace=namespace)

    def __repr__(self) -> str:
        return f"Client(host={self.host!r}, namespace={self.namespace!r})"

    @property
    def host(self) -> str:
        """The API server's base URL (without a trailing slash)."""
        return str(self.configuration.host).rstrip("/")

    def url(self, path: str, query: Query = None) -> str:
        """The full URL of an API ``path`` (which starts with ``/``)."""
        from urllib.parse import urlencode

        url = self.host + path
        items = _query_items(query)
        if items:
            url += "?" + urlencode(items)
        return url

    # --- transports -------------------------------------------------------------------

    def new_session(self) -> requests.Session:
        """A new ``requests.Session`` with this client's credentials and TLS settings.

        Environment proxies and netrc are not used (``trust_env`` is off), as the Kubernetes
        client does not use them either; the configuration's proxy is.
        """
        return configure_session(requests.Session(), self.configuration)

    def ssl_context(self) -> ssl.SSLContext:
        """An ``ssl.SSLContext`` with this client's CA, client certificate and verification
        settings, for connections the session does not make (WebSockets)."""
        cfg = self.configuration
        if cfg.verify_ssl:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
            if cfg.assert_hostname is False:
                ctx.check_hostname = False
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def authorization_header(self) -> Optional[str]:
        """The Authorization header of this client's credentials, if they use one."""
        return authorization_header(self.configuration)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        json: Any = None,
        data: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        stream: bool = False,
        timeout: Optional[Union[float, Tuple[float, Optional[float]]]] = None,
        ok: Iterable[int] = (),
    ) -> requests.Response:
        """An HTTP request to the API server with this client's credentials.

        A status of 400 or more (and not in ``ok``) raises the matching :class:`SandboxError`;
        so does a failure to reach the server. With ``stream`` the body is left unread: close
        the response when done.
        """
        url = self.url(path)
        try:
            resp = self._session.request(method, url, params=_query_items(query), json=json, data=data,
                                         headers=dict(headers or {}), stream=stream, timeout=timeout)
        except requests.Timeout as e:
            raise SandboxError(f"{method} {path}: timed out: {e}") from e
        except requests.RequestException as e:
            raise SandboxError(f"{method} {path}: cannot reach the API server: {e}") from e
        if resp.status_code >= 400 and resp.status_code not in ok:
            try:
                body = resp.content
            except requests.RequestException:
                body = b""
            finally:
                resp.close()
            raise error_from_http(resp.status_code, body, f"{method} {path}")
        return resp

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """A JSON call through the Kubernetes ApiClient: the answer's object as a dict.
        ``ApiException`` becomes the matching :class:`SandboxError`."""
        try:
            out = self.api_client.call_api(
                path, method,
                query_params=_query_items(query),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                response_type="object",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=timeout,
            )
        except ApiException as e:
            raise error_from_api_exception(e) from None
        except Exception as e:  # urllib3 errors: the server could not be reached
            if isinstance(e, SandboxError):
                raise
            if type(e).__module__.startswith("urllib3"):
                raise SandboxError(f"{method} {path}: cannot reach the API server: {e}") from e
            raise
        return out if isinstance(out, dict) else {}

    @property
    def custom_objects(self) -> k8s_client.CustomObjectsApi:
        """The ``kubernetes.client.CustomObjectsApi`` of this client (used for watches)."""
        return self._custom

    def close(self) -> None:
        """Closes this client's connections (the session's and the ApiClient's)."""
        self._session.close()
        pool_manager = getattr(getattr(self.api_client, "rest_client", None), "pool_manager", None)
        if pool_manager is not None:
            pool_manager.clear()
        close = getattr(self.api_client, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def configure_session(session: requests.Session, configuration: k8s_client.Configuration) -> requests.Session:
    """Sets ``session`` up with the credentials and TLS settings of ``configuration``."""
    session.trust_env = False
    if configuration.verify_ssl:
        session.verify = configuration.ssl_ca_cert or True
    else:
        session.verify = False
    if configuration.cert_file:
        session.cert = (configuration.cert_file, configuration.key_file) if configuration.key_file else configuration.cert_file
    if configuration.proxy:
        session.proxies = {"http": configuration.proxy, "https": configuration.proxy}
        if configuration.proxy_headers:
            session.headers.update(configuration.proxy_headers)
    session.auth = _ConfigurationAuth(configuration)
    session.headers["User-Agent"] = f"kube-sandbox-python/{_version}"
    return session


def _load_configuration(kubeconfig: Optional[str], context: Optional[str]) -> Tuple[k8s_client.Configuration, Optional[str]]:
    """Loads a kubeconfig (or, in a pod without one, the in-cluster configuration): the
    Configuration and the namespace it names, if any."""
    configuration = k8s_client.Configuration()
    default_file = os.path.expanduser(k8s_config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
    have_file = bool(kubeconfig or os.environ.get("KUBECONFIG") or os.path.exists(default_file))
    if not have_file and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
        namespace = None
        try:
            with open(_SA_NAMESPACE_FILE) as f:
                namespace = f.read().strip() or None
        except OSError:
            pass
        return configuration, namespace
    k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    namespace = None
    try:
        contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = active
        if context:
            chosen = next((c for c in contexts if c.get("name") == context), active)
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
    except Exception:  # the namespace is a convenience; the configuration loaded
        namespace = None
    return configuration, namespace


_default_lock = threading.Lock()
_default: Optional[Client] = None


def default_client() -> Client:
    """The client of the default kubeconfig, loaded once and shared."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def resolve_client(
    client: Union[Client, k8s_client.ApiClient, None] = None,
    kubeconfig: Optional[str] = None,
    context: Optional[str] = None,
) -> Client:
    """The client a call should use: ``client`` (a :class:`Client` or a Kubernetes
    ``ApiClient``), else one for ``kubeconfig``/``context``, else the shared default one."""
    if client is not None:
        if kubeconfig is not None or context is not None:
            raise ValueError("give either client or kubeconfig/context, not both")
        if isinstance(client, Client):
            return client
        if isinstance(client, k8s_client.ApiClient):
            return Client(client)
        raise TypeError(f"client must be a kube_sandbox.Client or a kubernetes ApiClient, not {type(client).__name__}")
    if kubeconfig is not None or context is not None:
        return Client(kubeconfig=kubeconfig, context=context)
    return default_client()
