"""Watch-fed caches of the objects an admission pass reads: one LIST, then a WATCH, per kind (the informer pattern).

Each kind has a :class:`Store` (plain camelCase dicts keyed by ``(namespace, name)``,
``""`` for cluster-scoped objects) kept current by an :class:`Informer` thread:
LIST (paged), then WATCH from the list's resourceVersion with the official
client's ``kubernetes.watch.Watch``; a stream that ends normally is resumed from
the last resourceVersion seen (bookmarks included), one that answers 410 Gone or
breaks is replaced by a fresh LIST. The rules that make a store safe to plan on
are in :meth:`Store.apply` (an older version never replaces a newer one) and
:meth:`Store.replace` (a relist never undoes a newer write); the operator's own
writes are applied at once by :class:`railtrain.operator.kube.cached.CachedKube`
(read-your-writes; docs/scheduling.md, "Watch-fed caches").

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Any, Callable, Hashable, Iterable

from kubernetes import watch

from railtrain.operator.kube.connection import describe
from railtrain.operator.kube.errors import Gone, call, classify

log = logging.getLogger("railtrain.operator")

Key = tuple[str, str]
WATCH_SECONDS = 55
"""How long one WATCH request lasts (the server's ``timeoutSeconds``); it is resumed from the last resourceVersion."""
PAGE = 500
"""Objects per LIST page of a relist (``limit``/``continue``): a 10,000-pod relist is 20 requests, not one 50 MB answer."""
RETRY_SECONDS = 1.0
"""Wait before a relist after a failure (doubling to 30 s while the API server does not answer)."""


def key_of(obj: dict[str, Any]) -> Key:
    """``(namespace, name)`` of an object dict (namespace ``""`` for a cluster-scoped one)."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def older(incoming: str | None, stored: str | None) -> bool:
    """Whether resourceVersion ``incoming`` is strictly older than ``stored``.

    resourceVersions are opaque by the API conventions, but etcd-backed servers
    use etcd's global revision, so two digit strings compare as integers; when
    either is not all digits nothing is known and the incoming one is not older
    (last writer wins).
    """
    if incoming and stored and incoming.isdigit() and stored.isdigit():
        return int(incoming) < int(stored)
    return False


def not_newer(incoming: str | None, than: str | None) -> bool:
    """Whether resourceVersion ``incoming`` is known to be no newer than ``than`` (both digits, ``incoming <= than``)."""
    return bool(incoming and than and incoming.isdigit() and than.isdigit() and int(incoming) <= int(than))


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields`` (changed in place and returned): the operator never reads them, and they
    are often a third of a pod's size."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def rv_of(obj: dict[str, Any]) -> str | None:
    """The object's ``metadata.resourceVersion``, or None."""
    return (obj.get("metadata") or {}).get("resourceVersion")


class Store:
    """Objects of one kind, keyed by ``(namespace, name)``, with resourceVersion ordering (thread-safe).

    Args:
        keep: whether an object belongs in the store (a field selector's test, e.g. "not terminal");
            an object applied that fails it leaves the store as if deleted at its resourceVersion.
        index: the value an object is found by through :meth:`indexed` (e.g. its job's
            ``(namespace, name)``), or None for no index value; client-go's ``Indexer`` with
            one index function. Without it, :meth:`indexed` finds nothing.
    """

    def __init__(self, keep: Callable[[dict[str, Any]], bool] | None = None, index: Callable[[dict[str, Any]], Hashable | None] | None = None):
        self._objects: dict[Key, dict[str, Any]] = {}
        self._index_of = index
        self._index: dict[Hashable, dict[Key, dict[str, Any]]] = {}  # index value -> the objects that have it
        self._gone: dict[Key, str] = {}  # tombstones: resourceVersion at which a key left, newer than the last list
        self._floor: str | None = None  # resourceVersion of the last LIST
        self._keep = keep or (lambda _: True)
        self._lock = threading.Lock()

    def _put(self, key: Key, obj: dict[str, Any]) -> None:
        """Store ``obj`` under ``key`` and keep the index in step (the lock held)."""
        self._drop(key)
        self._objects[key] = obj
        if self._index_of is not None:
            value = self._index_of(obj)
            if value is not None:
                self._index.setdefault(value, {})[key] = obj

    def _drop(self, key: Key) -> dict[str, Any] | None:
        """Remove ``key`` and its index entry (the lock held); returns what was stored, or None."""
        old = self._objects.pop(key, None)
        if old is not None and self._index_of is not None:
            value = self._index_of(old)
            bucket = self._index.get(value) if value is not None else None
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._index[value]
        return old

    def apply(self, type_: str, obj: dict[str, Any]) -> bool:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) or one object the operator wrote or read.

        The object is kept as given (no copy), without ``metadata.managedFields``.
        Rules: a version older than the stored one, or older than the
        tombstone of its key, never wins; ``DELETED`` (or an object that fails
        ``keep``) removes the key and leaves a tombstone; an absent key whose
        version is not newer than the last LIST is ignored (the LIST already
        saw that it was gone).

        Returns:
            Whether the store changed.
        """
        key, rv = key_of(obj), rv_of(obj)
        leaves = type_ == "DELETED" or not self._keep(obj)
        slim(obj)
        with self._lock:
            stored = self._objects.get(key)
            if stored is not None and older(rv, rv_of(stored)):
                return False
            if stored is None and (not_newer(rv, self._gone.get(key)) or not_newer(rv, self._floor)):
                return False  # deleted at or after this version, or absent from a LIST at least as new
            if leaves:
                if rv:
                    self._gone[key] = rv
                return self._drop(key) is not None
            self._gone.pop(key, None)
            self._put(key, obj)
            return True

    def replace(self, items: Iterable[dict[str, Any]], list_rv: str | None) -> None:
        """Take a fresh LIST taken at ``list_rv`` as the truth, except where the store knows something newer.

        A listed object replaces an older stored one; a stored key missing from
        the list is dropped unless its version is newer than the list (the
        operator wrote it after the list was taken); tombstones older than the
        list are forgotten (the list covers them). Two LISTs finishing out of
        order (a leader's refresh and the informer's own) never undo the newer one.
        """
        listed = {key_of(o): slim(o) for o in items if self._keep(o)}
        with self._lock:
            for key, stored in list(self._objects.items()):
                if key not in listed and not older(list_rv, rv_of(stored)):
                    self._drop(key)
            for key, obj in listed.items():
                stored = self._objects.get(key)
                if stored is not None and older(rv_of(obj), rv_of(stored)):
                    continue
                if stored is None and (older(rv_of(obj), self._gone.get(key)) or not_newer(rv_of(obj), self._floor)):
                    continue  # deleted since, or absent from a newer LIST that finished first
                self._put(key, obj)
            self._gone = {k: rv for k, rv in self._gone.items() if older(list_rv, rv) and k not in self._objects}
            if not older(list_rv, self._floor):
                self._floor = list_rv

    def forget_absent(self, present: Iterable[Key], within: Callable[[dict[str, Any]], bool], list_rv: str | None) -> None:
        """Drop the stored objects ``within`` a subset (e.g. one job's pods) that a fresh LIST at ``list_rv`` lacks,
        unless they are newer than that list; ``present`` are the keys that list returned."""
        seen = set(present)
        with self._lock:
            for key, stored in list(self._objects.items()):
                if key not in seen and within(stored) and older(rv_of(stored), list_rv):
                    self._drop(key)
                    if list_rv:
                        self._gone[key] = list_rv

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(key)

    def indexed(self, value: Hashable) -> list[dict[str, Any]]:
        """The stored objects whose index value is ``value`` (the dicts themselves: callers must not change them).

        O(objects found), not O(objects stored): a reconcile of one job reads its
        gang without scanning every railtrain pod in the cluster.
        """
        with self._lock:
            return list(self._index.get(value, {}).values())

    def items(self) -> list[dict[str, Any]]:
        """Every stored object (the dicts themselves: callers must not change them)."""
        with self._lock:
            return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)


class Informer:
    """Keep one :class:`Store` current from the API server in a daemon thread: LIST, then WATCH; relist on 410 or a broken stream.

    Args:
        name: the kind, for log lines and the thread's name.
        list_call: a client list method (e.g. ``CoreV1Api.list_node``) that also serves ``watch=True``;
        args, kwargs: its positional and selector arguments.
        store: the store it feeds.
    """

    def __init__(self, name: str, list_call: Callable[..., Any], store: Store, *args: Any, **kwargs: Any):
        self.name, self.list_call, self.store, self.args, self.kwargs = name, list_call, store, args, kwargs
        self.synced = threading.Event()
        self.stopped = threading.Event()
        self.relists = 0
        self._watch: watch.Watch | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"railtrain-cache-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it does at the next event or the end of the current WATCH request)."""
        self.stopped.set()
        if self._watch is not None:
            self._watch.stop()

    def break_stream(self) -> None:
        """Cut the current WATCH connection as a network failure would (the informer then lists again; used by tests)."""
        resp = getattr(self._watch, "_resp", None)
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            elif resp is not None:
                resp.close()
        except OSError:
            pass  # already closed

    def relist(self) -> str | None:
        """One paged LIST into the store; returns its resourceVersion."""
        items: list[dict[str, Any]] = []
        token, list_rv = None, None
        while True:
            extra = {"_continue": token} if token else {}
            page = json.loads(call(self.list_call, *self.args, limit=PAGE, _preload_content=False, **self.kwargs, **extra).data)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            list_rv = list_rv or meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                break
        self.store.replace(items, list_rv)
        self.relists += 1
        return list_rv

    def run(self) -> None:
        """The thread: relist and watch until stopped; every failure is one line and a fresh LIST."""
        wait = RETRY_SECONDS
        while not self.stopped.is_set():
            try:
                rv = self.relist()
                self.synced.set()
                wait = RETRY_SECONDS
                self._follow(rv)
            except Exception as err:  # 410 Gone, a broken stream, an API server away: start again from a LIST
                if self.stopped.is_set():
                    return
                gone = isinstance(classify(err), Gone)  # the watch's own 410 is the client's ApiException
                (log.debug if gone else log.info)("cache of %s: %s; listing again", self.name, describe(err))
                if not gone:
                    self.stopped.wait(wait)
                    wait = min(30.0, wait * 2)

    def _follow(self, rv: str | None) -> None:
        """WATCH from ``rv``, request after request, until a stop; raises on 410 Gone, on an error, and when a
        stream ends well before its ``timeoutSeconds`` (a cut connection reads as a plain end): the caller lists again."""
        while not self.stopped.is_set():
            self._watch = watch.Watch()
            started = time.monotonic()
            for event in self._watch.stream(
                self.list_call, *self.args, resource_version=rv, timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True,
                deserialize=False, _request_timeout=(10, WATCH_SECONDS + 15), **self.kwargs,
            ):
                obj = event.get("object") or {}
                rv = rv_of(obj) or rv
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self.store.apply(event["type"], obj)
                if self.stopped.is_set():
                    return
            if time.monotonic() - started < WATCH_SECONDS - 5:
                raise ConnectionError("the watch ended before its timeout (a cut connection)")
