"""A server-side dry run of a TrainingJob, shared by the tests that compare validate with the API server."""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException

from railtrain.crds import contract


def dry_run(kube, manifest: dict) -> str | None:
    """The API server's message refusing ``manifest`` (a strict server-side dry run in ``default``), or None when it accepts it.

    Raises:
        AssertionError: the server answered with anything but 422.
    """
    try:
        kube.custom.create_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, "default", contract.PLURAL, manifest,
                                                    dry_run="All", field_validation="Strict")
    except ApiException as err:
        assert err.status == 422, err.body
        return json.loads(err.body)["message"]
    return None
