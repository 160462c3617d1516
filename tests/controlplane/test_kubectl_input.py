"""``cli/controlplane/kueue.py: kubectl_input``: what the local Kueue's objects are given to ``kubectl apply`` as. A
random label value such as ``8e123456`` is a string to PyYAML but a number to kubectl's YAML 1.2, and the API refused
the ResourceFlavor (``cannot unmarshal number into ... nodeLabels of type string``: seen in a suite run); as JSON
it stays a string."""

from __future__ import annotations

import json

import yaml

from railtrain.cli.controlplane.kueue import kubectl_input


def test_a_label_value_that_yaml_1_2_reads_as_a_number_stays_a_string():
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"nodeLabels": {"tag": "8e123456"}}}
    assert "tag: 8e123456\n" in yaml.safe_dump(flavor)  # the old input: unquoted, a float to YAML 1.2
    data = json.loads(kubectl_input([flavor, {"kind": "LocalQueue"}]))
    assert data["kind"] == "List" and data["items"][0]["spec"]["nodeLabels"]["tag"] == "8e123456" and len(data["items"]) == 2
    assert '"tag": "8e123456"' in kubectl_input([flavor])
