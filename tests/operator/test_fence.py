"""Leader fencing and call deadlines without a cluster (issue 26, items 1 and 2): operator/kube/fence.py, the fenced
write verbs of operator/kube/verbs.py, the Lease loop's renew deadline, and the client's default timeout
(operator/kube/connection.py). The same behaviour on the real control plane: test_fencing_cluster.py."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from kubernetes import client

from railtrain.operator import handlers, leader, resync
from railtrain.operator.kube import fence
from railtrain.operator.kube import connection as kubeclient
from railtrain.operator.context import OperatorContext, RuntimeState
from railtrain.operator.kube.fence import Leadership, NotLeader
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.settings import Settings

from .builders import job_obj, node
from .test_controller import FakeKube


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_leadership_holds_until_the_renew_deadline_counted_from_when_the_renewal_was_sent(caplog):
    clock = Clock()
    held = Leadership(fence.renew_deadline(9.0), "ns/railtrain-operator", clock)
    assert held.deadline_seconds == 6.0 and not held.held()
    held.renewed(clock.t)
    clock.t += 5.9
    held.check()  # within the deadline
    clock.t += 0.2  # nothing renewed it for 6.1 s: a frozen or cut-off leader
    with caplog.at_level(logging.WARNING, "railtrain.operator"):
        for _ in range(3):
            with pytest.raises(NotLeader, match=r"last renewed the Lease ns/railtrain-operator 6\.1 s ago, past its renew deadline of 6\.0 s"):
                held.check()
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopped acting")] == [
        "stopped acting: this operator last renewed the Lease ns/railtrain-operator 6.1 s ago, past its renew deadline of 6.0 s: "
        "it writes nothing until it renews it (a standby may lead)"
    ]  # once per lapse, not once per refused write
    held.renewed(clock.t)
    assert held.held()
    held.renewed(clock.t - 10)  # an older renewal answered late never moves the deadline back
    assert held.held()
    held.lost()
    with pytest.raises(NotLeader, match="does not hold the Lease"):
        held.check()
    held.alone()  # no RBAC for the Lease: it leads alone
    assert held.held()


def test_the_lease_call_timeout_lets_the_loop_notice_a_lost_lease_within_its_duration():
    for seconds in (1, 4, 8, 15, 60):
        assert fence.renew_deadline(seconds) + fence.lease_call_seconds(seconds) < seconds or seconds == 1
    assert fence.lease_call_seconds(1) == 0.5


def nowhere() -> client.ApiClient:
    """A client of a port nothing listens on: a call that got past the fence fails with "connection refused"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    return client.ApiClient(cfg)


def refuse() -> None:
    raise NotLeader("not the leader")


def test_every_write_verb_checks_the_fence_before_it_sends_anything():
    kube = Kube(nowhere(), fence=refuse)
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "team"}}
    writes = {
        "create": lambda: kube.create(pod),
        "create_many": lambda: kube.create_many([pod, pod]),
        "delete_pod": lambda: kube.delete_pod("team", "p", "uid"),
        "force_delete_pod": lambda: kube.force_delete_pod("team", "p"),
        "release_pod": lambda: kube.release_pod("team", "p", "n0"),
        "delete_job": lambda: kube.delete_job("team", "j", "uid"),
        "patch_status": lambda: kube.patch_status("team", "j", {"phase": "Running"}, resource_version="7"),
        "set_node_taints": lambda: kube.set_node_taints({"metadata": {"name": "n0", "resourceVersion": "1"}}, []),
    }
    for verb, write in writes.items():
        with pytest.raises(NotLeader):
            write()
    kube.emit_event(job_obj("j", nodes=1), "Normal", "GangPlaced", "x")  # best effort: dropped without a word
    with pytest.raises(Exception) as err:  # the Lease itself is never fenced: it is how leadership is won
        kube.get_lease("team", "railtrain-operator")
    assert not isinstance(err.value, NotLeader)


def test_the_client_checks_the_fence_again_right_before_a_write_is_sent_never_before_a_read_or_a_lease_call():
    """The last moment: a write that passed its verb's check before a freeze is stopped by the client when it resumes."""
    cfg = nowhere().configuration
    guarded = kubeclient.GuardedApiClient(cfg, (1.0, 1.0), fence=refuse)
    core, leases = client.CoreV1Api(guarded), client.CoordinationV1Api(guarded)
    with pytest.raises(NotLeader):
        core.create_namespaced_pod("team", {"metadata": {"name": "p"}})
    with pytest.raises(NotLeader):
        core.delete_namespaced_pod("p", "team")
    for read in (lambda: core.read_namespaced_pod("p", "team"), lambda: leases.replace_namespaced_lease("l", "team", {"metadata": {"name": "l"}})):
        with pytest.raises(Exception) as err:
            read()
        assert not isinstance(err.value, NotLeader) and kubeclient.unreachable(err.value)  # sent: refused by the closed port
    Kube(guarded).emit_event(job_obj("j", nodes=1), "Normal", "GangPlaced", "x")  # an Event is dropped without a word


def test_a_leader_whose_lease_loop_has_not_run_for_the_renew_deadline_acts_on_nothing():
    """The process was frozen (SIGSTOP) past the renew deadline: its loop still says leader, its handlers and resync do nothing."""
    clock = Clock()
    kube = FakeKube([node("n0")], [job_obj("waiting", nodes=1)])
    held = Leadership(fence.renew_deadline(8.0), "default/railtrain-operator", clock)
    ctx = OperatorContext(Settings(resync_seconds=0.01, lease_seconds=8.0), kube, identity="me/1", state=RuntimeState(leader=True, leadership=held))
    held.renewed(clock.t)
    clock.t += 5.4  # past 2/3 of 8 s with no renewal
    assert ctx.state.leader and not ctx.state.leading()
    handlers.on_job_event(type="ADDED", name="waiting", namespace="team", memo=ctx)
    resync.resync_pass(ctx)
    assert kube.pods == {} and "status" not in kube.jobs[("team", "waiting")]
    held.renewed(clock.t)  # renewed again: it acts
    resync.resync_pass(ctx)
    assert len(kube.pods) == 1


def test_the_lease_loop_steps_down_at_the_renew_deadline_not_after_the_whole_lease(caplog):
    class Away(FakeKube):
        down = False

        def get_lease(self, ns, name):
            if self.down:
                raise TimeoutError("timed out")
            return super().get_lease(ns, name)

    kube = Away([], [])
    held = Leadership(fence.renew_deadline(3.0), "default/railtrain-operator")
    ctx = OperatorContext(Settings(resync_seconds=0.01, lease_seconds=3.0), kube, identity="me/1", state=RuntimeState(leadership=held))
    seen: dict[str, float] = {}

    async def run():
        task = asyncio.create_task(leader.keep_lease(ctx, lambda: None))
        for _ in range(40):
            await asyncio.sleep(0.1)
            if ctx.state.leader:
                break
        kube.down, seen["down"] = True, time.monotonic()
        for _ in range(60):
            await asyncio.sleep(0.05)
            if not held.held() and "fenced" not in seen:
                seen["fenced"] = time.monotonic()
            if not ctx.state.leader:
                seen["stepped"] = time.monotonic()
                break
        task.cancel()

    with caplog.at_level(logging.INFO, "railtrain.operator"):
        asyncio.run(run())
    assert "stepped" in seen, [r.getMessage() for r in caplog.records]
    assert seen["fenced"] - seen["down"] <= 2.0 + 0.2  # the renew deadline (2 s of the 3 s Lease), by the fence's clock
    assert seen["stepped"] - seen["down"] < 3.0  # said within the lease duration, before a standby may take over
    with pytest.raises(NotLeader):
        held.check()


def test_a_call_to_a_server_that_never_answers_gives_up_at_the_default_timeout(tmp_path):
    """An API server that accepts the connection and says nothing (frozen): the call returns after the timeout, once."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # connections queue in the kernel's backlog; nothing ever answers
        port = listener.getsockname()[1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        api = kubeclient.connect(str(kubeconfig), environ={}, request_timeout=(1.0, 1.0)).api
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            client.CoreV1Api(api).list_node(_preload_content=False)
        took = time.monotonic() - started
    assert kubeclient.unreachable(err.value) and kubeclient.describe(err.value) == "no answer in time"
    assert 0.9 <= took < 1.9, took  # once, not retried 3 more times by urllib3
