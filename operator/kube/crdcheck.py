"""The operator's start-up check that the served TrainingJob CRD is not older than the operator.

A CRD applied by an older railtrain (Helm ``crds.install=false``, GitOps, a
hand-run ``kubectl apply``) lacks the fields added since; the API server
*prunes* unknown fields from every write, silently, so the operator's status
writes would lose e.g. ``status.admission`` (the admission record of a Running
gang) and ``status.hold`` without any error, and a user's new spec fields would
vanish from the stored job. Before anything starts, :func:`check` reads the
served CRD (one GET) and compares its ``openAPIV3Schema`` with the schema
generated from the pydantic models (:func:`railtrain.crds.schema.crd`, the one
``crds/trainingjob.yaml`` is made from): every property path of ``spec`` and
``status`` the models declare must be in the served schema, or under a node the
server keeps whole (``x-kubernetes-preserve-unknown-fields``). The status
subresource must be on, as the operator writes status through it.

Why a schema comparison rather than a dry-run write: it needs no object (a
dry-run status write needs an existing TrainingJob, and a create ignores
status), it names every missing field at once (a dry run only shows what was
pruned from the one object written), and it is exact and cheap (one GET, a walk
of two dicts). It reads presence only: a type or a CEL rule that differs is
the API server's to enforce (a write it refuses fails loudly, not silently).

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Iterator

from kubernetes import client

from railtrain.crds import contract
from railtrain.operator.kube.connection import describe, transient
from railtrain.operator.kube.errors import Forbidden, NotFound, call

log = logging.getLogger("railtrain.operator")

CRD_NAME = f"{contract.PLURAL}.{contract.API_GROUP}"
"""The CustomResourceDefinition the operator serves: trainingjobs.railtrain.dev."""

CHECKED = ("spec", "status")
"""The top-level parts compared: status is what the operator writes, spec what it reads (both pruned alike)."""

MAX_NAMED = 12
"""At most this many missing paths are named in the sentence; the rest are counted."""

FIX = "apply this release's CRD (kubectl apply --server-side -f crds/trainingjob.yaml, or helm upgrade with crds.install=true) and start the operator again"


class CRDError(Exception):
    """The served CRD cannot hold what the operator writes; ``str()`` is one sentence for the user."""


def paths(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property path under ``schema`` with its node, parents first.

    Args:
        schema: an OpenAPI v3 (structural) schema node.
        prefix: the path of ``schema`` itself, e.g. ``status``.

    Yields:
        ``(path, node)``: ``a.b`` for properties, ``a[*]`` for list items, ``a.*``
        for the values of a map (``additionalProperties``).
    """
    for name, child in (schema.get("properties") or {}).items():
        yield f"{prefix}.{name}", child
    if isinstance(schema.get("items"), dict):
        yield f"{prefix}[*]", schema["items"]
    if isinstance(schema.get("additionalProperties"), dict):
        yield f"{prefix}.*", schema["additionalProperties"]


def missing(wanted: dict[str, Any], served: dict[str, Any], prefix: str) -> list[str]:
    """The property paths of ``wanted`` that ``served`` lacks (a missing parent is named, not its children).

    Args:
        wanted: the schema the models generate (a node of it).
        served: the served CRD's schema at the same place.
        prefix: the path of both nodes.

    Returns:
        The paths, in the order of ``wanted``'s properties; empty when ``served``
        keeps every field (a node with ``x-kubernetes-preserve-unknown-fields``
        keeps everything below it).
    """
    if served.get("x-kubernetes-preserve-unknown-fields"):
        return []
    have = dict(paths(served, prefix))
    out: list[str] = []
    for path, node in paths(wanted, prefix):
        if path not in have:
            out.append(path)
        else:
            out += missing(node, have[path], path)
    return out


def compare(served_crd: dict[str, Any], wanted_crd: dict[str, Any], version: str = contract.API_VERSION) -> str | None:
    """What the served CRD lacks against the generated one, as one sentence, or None when it has everything.

    Args:
        served_crd: the CustomResourceDefinition as the API server returns it (JSON, camelCase keys).
        wanted_crd: the generated CRD (:func:`railtrain.crds.schema.crd`).
        version: the API version the operator reads and writes.

    Returns:
        None, or the sentence :func:`check` raises: the CRD's name, the missing
        paths (at most :data:`MAX_NAMED`), why it matters and the fix.
    """
    name = served_crd.get("metadata", {}).get("name", CRD_NAME)
    served = next((v for v in served_crd.get("spec", {}).get("versions", []) if v.get("name") == version), None)
    if served is None or not served.get("served", False):
        return f"the CRD {name} does not serve version {version}, which this operator reads and writes: {FIX}"
    wanted = next(v for v in wanted_crd["spec"]["versions"] if v["name"] == version)
    served_root = (served.get("schema") or {}).get("openAPIV3Schema") or {}
    wanted_root = wanted["schema"]["openAPIV3Schema"]
    lacks: list[str] = []
    for part in CHECKED:
        mine = wanted_root["properties"][part]
        theirs = (served_root.get("properties") or {}).get(part)
        if served_root.get("x-kubernetes-preserve-unknown-fields"):
            continue
        lacks += [part] if theirs is None else missing(mine, theirs, part)
    no_status = "status" not in (served.get("subresources") or {})
    if not lacks and not no_status:
        return None
    named = ", ".join(lacks[:MAX_NAMED]) + (f" and {len(lacks) - MAX_NAMED} more" if len(lacks) > MAX_NAMED else "")
    what = []
    if lacks:
        what.append(f"its schema lacks {named}, which the API server would prune from every write without an error")
    if no_status:
        what.append("it has no status subresource, through which the operator writes status")
    return f"the served CRD {name} is older than this operator (a CRD from an earlier railtrain): {'; and '.join(what)}; {FIX}"


def check(api: client.ApiClient, name: str = CRD_NAME, wait_seconds: float = 60.0) -> None:
    """Read the served CRD ``name`` and raise unless it has every field the operator's models declare.

    A 429/5xx answer (an API server still starting) is retried for up to ``wait_seconds``.

    Args:
        api: the connected client.
        name: the CRD's name (the operator's own, :data:`CRD_NAME`).
        wait_seconds: how long transient errors are retried.

    Raises:
        CRDError: the CRD is not installed, may not be read (403), does not
            serve the operator's version, lacks the status subresource or
            lacks fields (:func:`compare`'s sentence).
    """
    from railtrain.crds.schema import crd  # the generated CRD; imported here: it loads the vendored core/v1 schema

    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            resp = call(client.ApiextensionsV1Api(api).read_custom_resource_definition, name, _request_timeout=10, _preload_content=False)
            served = json.loads(resp.data)
            break
        except NotFound:
            raise CRDError(f"the CRD {name} is not installed: {FIX}") from None
        except Forbidden as err:
            raise CRDError(
                f"the operator may not read the CRD {name} ({err.status}), which it checks at start: grant get on "
                "customresourcedefinitions.apiextensions.k8s.io (the chart's ClusterRole does)"
            ) from None
        except Exception as err:
            if not transient(err) or time.monotonic() >= deadline:
                raise CRDError(f"cannot read the CRD {name}: {describe(err)}") from None
        log.warning("cannot read the CRD %s yet; retrying", name)
        time.sleep(1.0)
    problem = compare(served, crd())
    if problem:
        raise CRDError(problem)
    log.info("the served CRD %s has every field this operator writes", name)
