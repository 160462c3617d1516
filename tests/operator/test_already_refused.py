"""An admission pass skips a waiting job whose Scheduled condition already states the pass's refusal word for word
(admit.already_refused): at 500 waiting jobs, one job's fresh reads per pass were the pass's cost."""

from __future__ import annotations

from railtrain.operator.job import admit
from railtrain.operator.scheduling.placement import PINNED_NODE_UNAVAILABLE, Placement
from railtrain.operator.scheduling.refusal import Refusal

REFUSAL = Refusal("Unschedulable", "gang needs 3 nodes with 8 free GPUs each; 0 of 4 nodes fit now: 4 full. It waits until enough nodes free up")


def job(status="False", reason="Unschedulable", message=REFUSAL.message):
    return {"status": {"conditions": [{"type": "Scheduled", "status": status, "reason": reason, "message": message}]}}


def test_only_a_refusal_already_stated_word_for_word_is_skipped():
    assert admit.already_refused(job(), REFUSAL)
    assert not admit.already_refused(job(message=REFUSAL.message.replace("0 of 4", "1 of 4")), REFUSAL)  # the numbers moved: write
    assert not admit.already_refused(job(reason="WaitingForEarlierJobs"), REFUSAL)
    assert not admit.already_refused(job(status="True"), REFUSAL)
    assert not admit.already_refused({"status": {}}, REFUSAL) and not admit.already_refused({}, REFUSAL)
    placed = Placement(("a",), "GangPlaced", ({},), {}, "")
    assert not admit.already_refused(job(), placed)  # a placement is always applied


def test_a_refusal_that_deletes_the_gang_is_never_skipped():
    pinned = Refusal(PINNED_NODE_UNAVAILABLE, "part of the gang is pinned to nodes it can no longer use")
    assert not admit.already_refused(job(reason=PINNED_NODE_UNAVAILABLE, message=pinned.message), pinned)
