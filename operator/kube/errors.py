"""The API server's answers as typed errors: the one place the kubernetes client's ``ApiException`` is read.

Every refusal the operator's edge (:mod:`.verbs`, :mod:`.cached`, :mod:`.informer`,
:mod:`.crdcheck`, :mod:`.connection`) gets from the client is raised as one of the
classes below, by HTTP status: :class:`NotFound` (404), :class:`Conflict` (409),
:class:`Gone` (410, a watch's resourceVersion too old), :class:`Invalid` (400, 422),
:class:`Forbidden` (401, 403), and the :class:`Transient` answers worth a retry as
they are, :class:`Throttled` (429), :class:`ServerError` (5xx; :class:`WebhookFailed` when an admission webhook failed) and
:class:`Unreachable` (status 0: the client got no HTTP answer). Any other status is
a plain :class:`ApiError`. ``str()`` of each is the short phrase of a log line
(``429 storage is (re)initializing``), :meth:`ApiError.sentence` the one sentence a
person reads, and :attr:`ApiError.kind` the label of the operator's error metric.
The command line's cluster modules (``cli/k8s*.py``) call the client themselves and
map its errors through the same :func:`call`/:func:`typed`, so both say the same thing.

A connection that fails below HTTP (refused, reset, timed out) is urllib3's own
error and stays as it is: :func:`railtrain.operator.kube.connection.unreachable`
names both kinds of silence.

May import: the kubernetes client's exception type and the standard library only (no other railtrain module).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, ClassVar, TypeVar

from kubernetes.client.rest import ApiException

T = TypeVar("T")


def one_line(obj: object) -> str:
    """``str(obj)`` with every run of whitespace made one space."""
    return " ".join(str(obj).split())


def status_body(err: ApiException | ApiError) -> dict[str, Any]:
    """The decoded ``Status`` body of an API error (``{}`` when it is not JSON)."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def server_message(err: ApiException | ApiError) -> str:
    """The ``message`` of the Status body of an API error on one line, else its HTTP reason (else ``HTTP <status>``)."""
    return one_line(status_body(err).get("message") or err.reason or f"HTTP {err.status}")


class ApiError(Exception):
    """The API server answered a request with an error status (or, status 0, the client got no HTTP answer).

    Attributes:
        status: the HTTP status (0: no answer); reason: its HTTP reason phrase (may be empty);
        body: the answer's body as sent (a JSON ``Status``, or text); details: that ``Status`` decoded (``{}`` when not JSON);
        message: the server's ``Status.message`` on one line, else the reason (:func:`server_message`).
        kind: the ``kind`` label of ``railtrain_reconcile_errors_total`` for this answer (class attribute).

    ``str()`` is ``"<status> <message>"``, the phrase of a log line.
    """

    kind: ClassVar[str] = "invalid"

    def __init__(self, status: int, reason: str | None = None, body: str | bytes | None = None):
        self.status, self.reason, self.body = int(status or 0), reason or "", body
        self.details = status_body(self)
        self.message = server_message(self)
        super().__init__(f"{self.status} {self.message}")

    def sentence(self, host: str | None = None) -> str:
        """The answer as one sentence for a person, naming the API server at ``host`` when known."""
        return f"the Kubernetes API server{_at(host)} answered {self.status} {self.reason}: {self._said()}"

    def _said(self) -> str:
        """The server's message, else its reason, on one line ("" when neither)."""
        return one_line(self.details.get("message") or self.reason or "")


class NotFound(ApiError):
    """404: the object (or its namespace, or its API) does not exist; ``details["reason"] == "NotFound"`` for an object."""

    kind = "not_found"


class Conflict(ApiError):
    """409: the name is taken (AlreadyExists) or the object changed since it was read (a resourceVersion or uid precondition)."""

    kind = "conflict"


class Gone(ApiError):
    """410: a watch or list resumed from a resourceVersion the server no longer keeps; list again."""


class Invalid(ApiError):
    """400 or 422: the server refused the object or request itself (a field, a quantity, a rule); a retry gets the same answer."""


class Forbidden(ApiError):
    """401 or 403: the credentials were refused (401) or lack the permission (403, also NamespaceTerminating on a create)."""

    kind = "forbidden"

    def sentence(self, host: str | None = None) -> str:  # noqa: D102 (the base's)
        if self.status == 401:
            return f"the Kubernetes API server{_at(host)} rejected the kubeconfig's credentials (401 Unauthorized)"
        return f"not allowed by the Kubernetes API server{_at(host)}: {self._said()}"


class Transient(ApiError):
    """An answer worth retrying as it is: the server's trouble, not the request's."""

    kind = "server"


class Throttled(Transient):
    """429: too many requests, or storage still (re)initializing right after the API server started."""

    kind = "throttled"


class ServerError(Transient):
    """5xx: the API server (or what it calls, etcd or a webhook) failed."""


class WebhookFailed(ServerError):
    """5xx because an admission webhook the API server had to call did not answer or failed (e.g. Kueue's, while Kueue
    is down or restarting): the trouble of the objects that webhook covers, not of the API server (other requests
    go through). :attr:`webhook` names it (``""`` when the message does not)."""

    kind = "webhook"

    def __init__(self, status: int, reason: str | None = None, body: str | bytes | None = None):
        super().__init__(status, reason, body)
        found = WEBHOOK_NAME.search(self.message)
        self.webhook = found.group(1) if found else ""


WEBHOOK_FAILED = "failed calling webhook"
"""The API server's words (``Internal error occurred: failed calling webhook "<name>": ...``) when an admission
webhook it must call fails (k8s.io/apiserver, ``pkg/admission/plugin/webhook``)."""
WEBHOOK_NAME = re.compile(r'failed calling webhook "([^"]+)"')


class Unreachable(Transient):
    """Status 0: the client got no HTTP answer (e.g. a TLS failure the client reports as an ApiException)."""

    kind = "unreachable"

    def sentence(self, host: str | None = None) -> str:  # noqa: D102 (the base's)
        return f"cannot talk to the Kubernetes API server{_at(host)}: {self._said()}"


BY_STATUS: dict[int, type[ApiError]] = {
    0: Unreachable, 400: Invalid, 401: Forbidden, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid, 429: Throttled,
}
"""The class of each HTTP status with its own meaning; any 5xx is :class:`ServerError`, any other status :class:`ApiError`."""


def typed(err: ApiException) -> ApiError:
    """The typed error of a client ``ApiException`` (by its status: :data:`BY_STATUS`)."""
    status = int(err.status or 0)
    cls = BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    if cls is ServerError and WEBHOOK_FAILED in server_message(err):
        cls = WebhookFailed
    return cls(status, err.reason, err.body)


def classify(err: BaseException) -> ApiError | None:
    """``err`` as a typed error: itself when it is one, :func:`typed` of an ``ApiException``, else None (not an API answer)."""
    if isinstance(err, ApiError):
        return err
    if isinstance(err, ApiException):
        return typed(err)
    return None


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (a client method), with an ``ApiException`` raised as its typed error (:func:`typed`).

    Raises:
        ApiError: one of its subclasses, by the answer's status; other errors (urllib3's, the fence's) pass unchanged.
    """
    try:
        return fn(*args, **kwargs)
    except ApiException as err:
        raise typed(err) from err


def or_none(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """:func:`call`, but None when the object does not exist (404): a read of something that may be missing.

    Raises:
        ApiError: any other answer (:func:`call`).
    """
    try:
        return call(fn, *args, **kwargs)
    except NotFound:
        return None


class Rejected(Exception):
    """The API server refused to create an object as invalid (400 BadRequest or 422 Invalid): a spec error, not worth a retry.

    Raised by :meth:`railtrain.operator.kube.verbs.Kube.create` with the object it refused (and for a ComputeDomain
    whose API is not installed, 404, with a sentence saying what to install).

    Attributes:
        kind, name: the object refused; status: 400, 422 (or 404); message: the server's own ``Status.message``.
    """

    def __init__(self, kind: str, name: str, status: int, message: str):
        super().__init__(f"{kind} {name}: {message}")
        self.kind, self.name, self.status, self.message = kind, name, status, message


def _at(host: str | None) -> str:
    return f" at {host}" if host else ""
