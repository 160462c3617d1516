"""A job's ``spec.template`` merged into the pod the operator renders (pure).

The operator owns the fields that make a gang (gate, restartPolicy, hostname,
subdomain, the training container's contract); the template adds what the
cluster needs beyond them (sidecars, init containers, volumes, tolerations,
security settings). The API refuses a template that sets an owned field
(:mod:`railtrain.crds.podtemplate`), so a merge never has to choose.

May import: ``railtrain.crds`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds.podtemplate import TRAINER, TemplatePodSpec

_MERGED_POD_FIELDS = ("containers", "initContainers", "volumes", "tolerations")
"""Template PodSpec fields merged with the operator's rather than copied (see :func:`merge_template`)."""


def merge_trainer(container: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The training container with the template's ``trainer`` entry merged in (pure).

    Lists (env, envFrom, volumeMounts, ports) are appended after the operator's;
    resources are merged by name (the template adds names; :mod:`railtrain.crds.podtemplate`
    refuses the ones spec.resources sets); every other key of the entry
    (securityContext, workingDir, probes, lifecycle ...) is taken as written.
    Keys the operator owns never reach here: the API refuses them.
    """
    out = dict(container)
    for key, value in entry.items():
        if key == "name":
            continue
        if key in ("env", "envFrom", "volumeMounts", "ports"):
            out[key] = [*out.get(key, []), *value]
        elif key == "resources":
            mine = out.get("resources", {})
            merged = {kind: {**(value.get(kind) or {}), **(mine.get(kind) or {})} for kind in ("requests", "limits") if value.get(kind) or mine.get(kind)}
            claims = [*(mine.get("claims") or []), *(value.get("claims") or [])]  # the operator's IMEX claim stays
            out["resources"] = {**value, **merged, **({"claims": claims} if claims else {})}
        else:
            out[key] = value
    return out


def merge_template(pod_spec: dict[str, Any], template: TemplatePodSpec) -> dict[str, Any]:
    """The pod spec with the template's PodSpec fields merged in (pure).

    The training container is merged with the template's ``trainer`` entry
    (:func:`merge_trainer`); other template containers follow it as sidecars;
    volumes and tolerations are appended after the operator's; every other
    field the template sets is copied as written. The operator's fields
    (gate, restartPolicy, hostname, subdomain) are kept: the API refuses a
    template that sets them.
    """
    given = template.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    out = {**{k: v for k, v in given.items() if k not in _MERGED_POD_FIELDS}, **pod_spec}
    trainer = pod_spec["containers"][0]
    entry = template.container() or {}
    out["containers"] = [merge_trainer(trainer, entry), *(c for c in template.containers if c.get("name") != TRAINER)]
    for key in ("volumes", "tolerations"):
        if given.get(key):
            mine = pod_spec.get(key, [])
            out[key] = [*mine, *(item for item in given[key] if item not in mine)]
    if given.get("initContainers"):
        out["initContainers"] = list(given["initContainers"])
    return out
