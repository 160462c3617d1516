"""The trainer's replica-group pieces (trainer/replica.py): data slices, the layouts refused, and torchft's Manager in
one process against a real Lighthouse: a lone group heals from nothing and commits; a quorum that cannot form ends
in QuorumLost after quorumTimeoutSeconds."""

from __future__ import annotations

import threading
import time

import pytest

torchft = pytest.importorskip("torchft")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from railtrain.crds import verdicts  # noqa: E402
from railtrain.crds.replica_groups import ReplicaGroupEnv  # noqa: E402
from railtrain.trainer import replica  # noqa: E402
from railtrain.trainer.health.verdict import HealthVerdict  # noqa: E402


def env(lighthouse: str, group: int = 0, groups: int = 2, min_replicas: int = 1, timeout_s: int = 2) -> ReplicaGroupEnv:
    return ReplicaGroupEnv(lighthouse=lighthouse, group=group, groups=groups, min_replicas=min_replicas, quorum_timeout_seconds=timeout_s)


def test_groups_take_disjoint_data_slices():
    slices = [replica.group_data_slice(env("x", group=g, groups=3), r, 2) for g in range(3) for r in range(2)]
    assert slices == [(i, 6) for i in range(6)]


@pytest.fixture
def lighthouse():
    from torchft._torchft import LighthouseServer

    def start(min_replicas: int):
        server = LighthouseServer(bind="127.0.0.1:0", min_replicas=min_replicas, join_timeout_ms=100, quorum_tick_ms=50, heartbeat_timeout_ms=1000)
        servers.append(server)
        return server.address()

    servers: list = []
    yield start
    for server in servers:
        server.shutdown()


def sync_for(address: str, model: nn.Module, optimizer: torch.optim.Optimizer, start_allowance_s: float = 0.0, **kw) -> replica.ReplicaSync:
    state = {"step": 0}
    return replica.ReplicaSync(
        env(address, **kw), 0, 1, replica.model_state(model, optimizer, lambda: state["step"]),
        replica.load_model_state(model, optimizer, lambda s: state.update(step=s)), lambda line: None, environ={},
        start_allowance_s=start_allowance_s,
    )  # fmt: skip


def test_a_lone_group_commits_with_min_replicas_one(lighthouse):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sync = sync_for(lighthouse(1), model, optimizer, min_replicas=1)
    try:
        for step in range(1, 3):
            sync.start_step()
            model(torch.ones(3, 4)).sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
            sync.allreduce_gradients(model)
            assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))  # the average over one group
            assert sync.should_commit() and sync.step == step and sync.participants() == 1
            optimizer.step()
            optimizer.zero_grad()
    finally:
        sync.close()


def test_no_quorum_within_the_timeout_is_quorum_lost(lighthouse):
    model = nn.Linear(4, 2)
    sync = sync_for(lighthouse(2), model, torch.optim.SGD(model.parameters(), lr=0.1), min_replicas=2, timeout_s=2)
    started = time.monotonic()
    try:
        with pytest.raises(HealthVerdict) as caught:
            sync.start_step()
    finally:
        sync.close()
    waited = time.monotonic() - started
    assert caught.value.verdict == verdicts.VERDICT_RETRYABLE and caught.value.reason == verdicts.REASON_QUORUM_LOST
    assert "minReplicas=2" in caught.value.message and "quorumTimeoutSeconds=2" in caught.value.message
    assert waited >= 2, f"gave up after {waited:.2f}s, before quorumTimeoutSeconds"


def test_the_first_quorum_waits_for_a_group_that_starts_late_then_quorums_get_quorum_timeout_seconds(lighthouse):
    """Groups' pods start at different times (scheduling, image pulls, torch's import): a process's first quorum waits
    quorumTimeoutSeconds plus the start-up allowance, so a group starting after quorumTimeoutSeconds still joins.
    The old code failed the first quorum with QuorumLost after quorumTimeoutSeconds (the CI failure of stop 36:
    group 1 still importing torch when group 0's 3 s ran out)."""
    timeout_s = 1
    address = lighthouse(2)
    early = sync_for(address, *model_and_optimizer(), start_allowance_s=60, min_replicas=2, timeout_s=timeout_s)
    late = None
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("early", _start(early)), daemon=True)
    try:
        thread.start()
        thread.join(timeout=timeout_s + 2)  # the late group is not there yet: past quorumTimeoutSeconds the early one waits on
        assert thread.is_alive() and "early" not in outcome, f"the first quorum gave up: {outcome}"
        late = sync_for(address, *model_and_optimizer(), start_allowance_s=60, group=1, min_replicas=2, timeout_s=timeout_s)
        assert early.quorum_timeout_s() == timeout_s + 60 and early.longest_start_s() == timeout_s + 60 + replica.COLLECTIVE_TIMEOUT_S
        assert _start(late) is None
        thread.join(timeout=60)
        assert outcome.get("early") is None and early.quorums == late.quorums == 1 and early.participants() == 2
        assert early.writes_checkpoints() and not late.writes_checkpoints()  # one writer per quorum: the lowest group
        assert early.quorum_timeout_s() == timeout_s  # the allowance is the first quorum's alone
    finally:
        for sync in (early, late):
            if sync is not None:
                sync.close()


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _start(sync: replica.ReplicaSync) -> HealthVerdict | None:
    try:
        sync.start_step()
    except HealthVerdict as err:
        return err
    return None


def test_quorum_retries_ask_about_every_second_and_the_timeout_variable_is_checked():
    """A Lighthouse lost mid-request is asked again about every second until quorumTimeoutSeconds (torchft's
    manager server sleeps timeout / (retries + 1) between tries); TORCHFT_TIMEOUT_SEC sets the cross-group timeout."""
    assert replica.quorum_retries(300) == 300 and replica.quorum_retries(1) == 1 and replica.quorum_retries(0) == 1
    assert 300 / (replica.quorum_retries(300) + 1) <= replica.LIGHTHOUSE_RETRY_S
    assert replica.collective_timeout({}) == replica.COLLECTIVE_TIMEOUT_S and replica.collective_timeout({"TORCHFT_TIMEOUT_SEC": "5"}) == 5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError, match="TORCHFT_TIMEOUT_SEC must be a positive number"):
            replica.collective_timeout({"TORCHFT_TIMEOUT_SEC": bad})


def test_in_a_pod_a_group_advertises_its_fully_qualified_name_and_serves_its_state_under_it(monkeypatch):
    """On a cluster the other groups reach this group's Manager and fetch a heal's state by the pod's fully qualified
    name (``<pod>.<job>.<ns>.svc.cluster.local``); torchft's default, the short host name, resolves in no other pod."""
    monkeypatch.setattr(replica.socket, "getfqdn", lambda name="": name or "rg-2.rg.team.svc.cluster.local")
    monkeypatch.setattr(replica.socket, "gethostname", lambda: "rg-2")
    assert replica.advertised_host({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}) == "rg-2.rg.team.svc.cluster.local"
    assert replica.advertised_host({}) == "rg-2"  # railtrain run --local: torchft's default
    import datetime

    transport = replica._http_transport(datetime.timedelta(seconds=5), "rg-2.rg.team.svc.cluster.local")
    try:
        assert transport.metadata().startswith("http://rg-2.rg.team.svc.cluster.local:")
    finally:
        transport.shutdown()
