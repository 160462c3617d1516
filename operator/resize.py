"""How large an elastic gang could be now (pure), for growing back once capacity returns.

The running gang's own pods are counted as free (a grow restarts the whole
gang, so its nodes are released first), every other pod holds its capacity,
and the gang is placed by the same all-or-nothing placement as admission
(:func:`railtrain.operator.placement.place_gang`), at the largest admissible
size (:meth:`railtrain.crds.api.TrainingJobSpec.node_counts`).
"""

from __future__ import annotations

from typing import Any

from railtrain.crds import contract
from railtrain.operator import cluster as cluster_model
from railtrain.operator.admission import AVOIDED
from railtrain.operator.gang import admission_request, parse_job
from railtrain.operator.placement import Placement, place_gang
from railtrain.operator.topology import DEFAULT_LEVELS


def wants_to_grow(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is a Running elastic job admitted below ``spec.nodes`` (cheap: no parsing beyond the dict)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    admitted, nodes = status.get("admittedNodes"), spec.get("nodes", 1)
    return bool(spec.get("elastic")) and status.get("phase") == "Running" and isinstance(admitted, int) and admitted < nodes


def grow_size(obj: dict[str, Any], nodes: list[dict[str, Any]], active: list[dict[str, Any]], levels: tuple[str, ...] = DEFAULT_LEVELS) -> int | None:
    """The largest admissible gang size that fits now with the job's own pods freed, or None when none fits.

    Args:
        obj: the TrainingJob.
        nodes: every v1 Node.
        active: every non-terminal pod of the cluster.
        levels: the operator's topology levels.
    """
    meta = obj["metadata"]
    asked = {k: v for k, v in (obj.get("status") or {}).items() if k not in ("phase", "admission")}  # as if the gang waited afresh
    entry = admission_request(obj | {"status": asked}, [], None)
    if entry is None:
        return None
    request = entry[0]
    others = [p for p in active if not (p["metadata"].get("namespace") == meta.get("namespace") and (p["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME) == meta["name"])]
    snap = cluster_model.snapshot(nodes, others, parse_job(obj).spec.resources.gpu_resource_name, levels)
    placed = place_gang(request, snap.excluding(request.avoid, AVOIDED))
    return len(placed.nodes) if isinstance(placed, Placement) else None
