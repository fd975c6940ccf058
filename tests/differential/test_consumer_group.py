"""KIP-848 ConsumerGroupHeartbeat and ConsumerGroupDescribe against Apache Kafka 4.3
(docs/design/consumer-group-semantics.md §2, §3, §10): two members join, reconcile through a revocation,
and leave; every answer is compared field by field (topic ids normalised like member ids). ``covers`` names
sections of group-semantics.md (classic), so these scenarios list none."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Scenario,
    cgh,
    consumer_coordinator_sees,
    consumer_describe,
    describe,
    described_as,
    join,
)
from differential.harness import check_result, params

# The scenarios' topics are created when the pair starts; Kafka's group coordinator sees them only once its
# metadata image has them (an instant later), and a join before that gets an empty assignment.
SEEN = consumer_coordinator_sees("t")

SCENARIOS = [
    Scenario(
        "cgh-two-members-join-reconcile-leave",
        [
            SEEN,
            cgh("a", epoch=0, names=["t"], expect=E.NONE),  # epoch 2, all of t
            cgh("a", expect=E.NONE),  # nothing changed: no assignment
            cgh("b", epoch=0, names=["t"], expect=E.NONE),  # group epoch 3; b waits for a's partitions
            cgh("a", expect=E.NONE),  # a must revoke: old epoch, smaller assignment
            cgh("a", expect=E.NONE),  # a revoked: new epoch
            cgh("b", expect=E.NONE),  # b gets the released partitions
            consumer_describe(),
            # DescribeGroups describes classic groups only: Dead, and from v6 GROUP_ID_NOT_FOUND "Group g is
            # not a classic group." (KIP-1043)
            *[describe(v, state="Dead") for v in (0, 5, 6)],
            cgh("a", epoch=-1, expect=E.NONE),  # leave
            cgh("b", expect=E.NONE),  # b takes everything at the next epoch
            cgh("b", epoch=-1, expect=E.NONE),
            consumer_describe(),
        ],
    ),
    Scenario(
        "cgh-errors",
        [
            SEEN,
            cgh("a", epoch=3, expect=E.GROUP_ID_NOT_FOUND),
            cgh("a", epoch=0, names=["t"], expect=E.NONE),
            cgh("a", epoch=5, expect=E.FENCED_MEMBER_EPOCH),
            cgh("x", epoch=2, expect=E.UNKNOWN_MEMBER_ID),
            cgh("a", epoch=0, names=None, expect=E.INVALID_REQUEST),
            consumer_describe(groups=(None, "other", "")),
            join("p", group="classic", expect=E.MEMBER_ID_REQUIRED),  # an Empty classic group
            described_as("Empty", group="classic"),
            consumer_describe(groups=("classic",)),  # "Group … is not a consumer group."
        ],
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_consumer_group(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
