"""Random KIP-848 clients against one shard (hypothesis stateful test).

Clients (dynamic and static) join, heartbeat reporting a random part of what they were told plus noise,
change subscriptions (names or a regex), leave (−1, and −2 for static members); topics are created, deleted
and grow; the clock advances past session and rebalance timeouts; appends fail now and then; the shard is
reloaded from its log.

Invariants: no partition is ever held by two members (assigned ∪ pending revocation); a member's epoch
never goes backwards while it stays a member (−2 aside); replaying the appended records into a fresh shard
gives the same groups and members; and when every client heartbeats reporting exactly what it was given,
repeatedly, every partition of a subscribed existing topic ends up assigned to exactly one member.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from regroup.group.config import GroupConfig
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse

from .harness import Call, Harness, consumer_hard_state, image, response_partitions, topic_id

GROUP = "g"
POOL = ("a", "b", "c")
SUBSCRIPTIONS: list[tuple[tuple[str, ...] | None, str | None]] = [
    (("a",), None),
    (("a", "b"), None),
    (("b", "c", "missing"), None),
    ((), None),
    (None, "[ab]"),
    (("c",), "a"),
]
CONFIG = GroupConfig(
    consumer_session_timeout_ms=20_000,
    consumer_heartbeat_interval_ms=2_000,
    consumer_assignment_interval_ms=1_000,
)
REBALANCE_TIMEOUT_MS = 8_000


@dataclass
class Client:
    name: str
    instance_id: str | None
    member_id: str
    epoch: int = 0
    joined: bool = False  # the client believes it is a member
    away: bool = False  # static member that left with −2
    active: bool = False  # wants to be in the group (joined once, has not left with −1)
    subscription: int = 0
    assigned: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    rejoins: int = 0

    def owned(self) -> dict[uuid.UUID, list[int]]:
        return {t: sorted(ps) for t, ps in self.assigned.items()}

    def reset(self) -> None:
        self.epoch = 0
        self.joined = False
        self.away = False
        self.assigned = {}


class ConsumerGroupMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.h = Harness(CONFIG, now=1_000_000, topics=image({"a": 3, "b": 2}))
        self.partitions: dict[str, int] = {"a": 3, "b": 2}
        self.clients = [
            Client("d0", None, "d0"),
            Client("d1", None, "d1"),
            Client("s2", "i2", "s2"),
            Client("s3", "i3", "s3"),
        ]
        self.seen_epochs: dict[str, int] = {}

    # ------------------------------------------------------------------------------------------ helpers

    def _topics_changed(self) -> None:
        self.h.topics = image(self.partitions)

    def _existing(self) -> list[tuple[uuid.UUID, int]]:
        return [(topic_id(t), p) for t, n in sorted(self.partitions.items()) for p in range(n)]

    def _absorb(self, client: Client, call: Call[ConsumerGroupHeartbeatResponse]) -> None:
        response = call.response
        error = ErrorCode(response.error_code)
        if error is ErrorCode.NONE:
            client.joined = True
            client.active = True
            client.away = False
            client.epoch = response.member_epoch
            assert response.member_id == client.member_id
            parts = response_partitions(response)
            if parts is not None:
                client.assigned = {t: set(ps) for t, ps in parts.items()}
        elif error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            client.reset()  # a real client gives up its partitions and rejoins
        else:
            # NOT_COORDINATOR (a failed append) and the static-membership errors: retried later
            assert error in (
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.UNRELEASED_INSTANCE_ID,
                ErrorCode.FENCED_INSTANCE_ID,
            ), (error, response)

    def _join(self, client: Client, subscription: int) -> None:
        names, regex = SUBSCRIPTIONS[subscription]
        if client.instance_id is not None and client.away:
            # a restarted static instance comes back under a new member id
            client.rejoins += 1
            client.member_id = f"{client.name}-{client.rejoins}"
        client.subscription = subscription
        call = self.h.cgh(
            GROUP,
            client.member_id,
            0,
            instance_id=client.instance_id,
            names=names if names is not None else None,
            regex=regex if regex is not None else ("" if names is not None else None),
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        )
        if call.error is ErrorCode.NONE:
            client.assigned = {}
        self._absorb(client, call)

    def _heartbeat(self, client: Client, owned: dict[uuid.UUID, list[int]]) -> None:
        call = self.h.cgh(GROUP, client.member_id, client.epoch, instance_id=client.instance_id, owned=owned)
        self._absorb(client, call)

    # ------------------------------------------------------------------------------------------ rules

    @rule(i=st.integers(0, 3), subscription=st.integers(0, len(SUBSCRIPTIONS) - 1))
    def join(self, i: int, subscription: int) -> None:
        client = self.clients[i]
        if client.joined and not client.away:
            return
        self._join(client, subscription)

    @rule(i=st.integers(0, 3), data=st.data())
    def heartbeat_with_noise(self, i: int, data: st.DataObject) -> None:
        client = self.clients[i]
        if not client.joined or client.away:
            return
        told = sorted((t, p) for t, ps in client.assigned.items() for p in ps)
        kept = data.draw(st.lists(st.sampled_from(told), unique=True) if told else st.just([]))
        existing = self._existing()
        noise = data.draw(
            st.lists(st.sampled_from(existing), unique=True, max_size=2) if existing else st.just([])
        )
        owned: dict[uuid.UUID, set[int]] = {}
        for t, p in [*kept, *noise]:
            owned.setdefault(t, set()).add(p)
        self._heartbeat(client, {t: sorted(ps) for t, ps in owned.items()})

    @rule(i=st.integers(0, 3))
    def heartbeat_honestly(self, i: int) -> None:
        client = self.clients[i]
        if client.joined and not client.away:
            self._heartbeat(client, client.owned())

    @rule(i=st.integers(0, 3), subscription=st.integers(0, len(SUBSCRIPTIONS) - 1))
    def change_subscription(self, i: int, subscription: int) -> None:
        client = self.clients[i]
        if not client.joined or client.away:
            return
        names, regex = SUBSCRIPTIONS[subscription]
        client.subscription = subscription
        call = self.h.cgh(
            GROUP,
            client.member_id,
            client.epoch,
            instance_id=client.instance_id,
            names=names,
            regex=regex if regex is not None else ("" if names is not None else None),
            owned=client.owned(),
        )
        self._absorb(client, call)

    @rule(i=st.integers(0, 3), temporarily=st.booleans())
    def leave(self, i: int, temporarily: bool) -> None:
        client = self.clients[i]
        if not client.joined or client.away:
            return
        static_leave = temporarily and client.instance_id is not None
        call = self.h.cgh(GROUP, client.member_id, -2 if static_leave else -1, instance_id=client.instance_id)
        if call.error is ErrorCode.NONE:
            if static_leave:
                client.away = True
                client.assigned = {}
            else:
                client.reset()
                client.active = False
        else:
            self._absorb(client, call)

    @rule(ms=st.sampled_from([500, 1_000, 5_000, REBALANCE_TIMEOUT_MS, 25_000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)

    @rule(topic=st.sampled_from(POOL), n=st.integers(1, 3))
    def create_topic(self, topic: str, n: int) -> None:
        if topic not in self.partitions:
            self.partitions[topic] = n
            self._topics_changed()

    @precondition(lambda self: len(self.partitions) > 0)
    @rule(topic=st.sampled_from(POOL))
    def delete_topic(self, topic: str) -> None:
        if self.partitions.pop(topic, None) is not None:
            self._topics_changed()

    @rule(topic=st.sampled_from(POOL))
    def add_partition(self, topic: str) -> None:
        if topic in self.partitions and self.partitions[topic] < 5:
            self.partitions[topic] += 1
            self._topics_changed()

    @rule()
    def fail_next_append(self) -> None:
        self.h.fail_next_append()

    @rule()
    def reload(self) -> None:
        """The partition moves: a fresh shard is loaded from the log (timers re-armed by on_loaded)."""
        self.h._fail_next.clear()
        self.h.reload()

    @rule()
    def converge(self) -> None:
        """Every client (away static instances too) heartbeats with exactly what it was told, round after
        round: the group must end with every subscribed existing partition assigned exactly once."""
        self.h._fail_next.clear()
        for _ in range(12):
            for client in self.clients:
                if client.active and (not client.joined or client.away):
                    self._join(client, client.subscription)
                elif client.joined:
                    self._heartbeat(client, client.owned())
            self.h.advance(500)
        group = self.h.shard.consumer_group(GROUP)
        if group is None:
            return
        for client in self.clients:
            if client.joined and not client.away:
                self._heartbeat(client, client.owned())
        group = self.h.shard.consumer_group(GROUP)
        assert group is not None
        subscribed = {topic_id(t) for t in group.subscribed_topic_names() if t in self.partitions}
        expected = {(t, p) for t, p in self._existing() if t in subscribed}
        held: list[tuple[uuid.UUID, int]] = [tp for m in group.members.values() for tp in m.assigned]
        assert len(held) == len(set(held))
        assert set(held) == expected, (set(held) ^ expected, group.members)
        # and the clients know it
        told = {
            (t, p)
            for c in self.clients
            if c.joined and not c.away
            for t, ps in c.assigned.items()
            for p in ps
        }
        assert told == expected

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def partitions_never_held_twice(self) -> None:
        self.h.shard.check_invariants()

    @invariant()
    def member_epochs_never_go_backwards(self) -> None:
        group = self.h.shard.consumer_group(GROUP)
        members = {} if group is None else group.members
        for member_id in list(self.seen_epochs):
            if member_id not in members:
                del self.seen_epochs[member_id]
        for member_id, member in members.items():
            if member.member_epoch < 0:
                continue
            previous = self.seen_epochs.get(member_id)
            if previous is not None:
                assert member.member_epoch >= previous, (member_id, previous, member.member_epoch)
            self.seen_epochs[member_id] = member.member_epoch

    @invariant()
    def replay_gives_the_same_groups(self) -> None:
        assert consumer_hard_state(self.h.replayed_shard()) == consumer_hard_state(self.h.shard)


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
