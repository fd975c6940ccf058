"""``__consumer_offsets`` byte compatibility: the same group history on Apache Kafka and on regroup, then
each broker's topic read back through the Fetch API and decoded with regroup's record codecs. Both must
hold the same records — keys, value versions and field values — in the same partition and order, after
normalising timestamps and member-id UUIDs. Every stored key and value must also re-encode to exactly its
bytes (regroup's codecs read Kafka's records, and regroup writes canonical ones)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from differential.dsl import (
    TOPICS,
    E,
    Scenario,
    cgh,
    commit,
    consumer_coordinator_sees,
    delete_groups,
    form_group,
    join,
    leave,
    offset_delete,
    sync,
    topic_name,
)
from differential.harness import check_result, member_ids, run_pair, start_pair
from regroup.client.blocking import BlockingConnection
from regroup.group.topics_image import TopicImage, TopicsImage
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.primitives import ZERO_UUID
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)
from support import compat_report
from support.brokers import BrokerPair
from support.consumer_offsets import CoordinatorRecord, read_offsets_topic
from support.kafka_wire import Address, partition_for, topic_ids
from support.normalize import IdNormaliser, diff, render, sort_list

# What a Java 4.x consumer sends: subscription v3 (owned partitions, generation, rack), sorted topics.
SUBSCRIPTION = ConsumerProtocolSubscription(
    topics=[topic_name("t"), topic_name("u")],
    user_data=None,
    owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(topic_name("t"), [0])],
    generation_id=1,
    rack_id=None,
).encode_versioned(3)
PROTOCOLS = [("range", SUBSCRIPTION), ("cooperative-sticky", SUBSCRIPTION)]
UNICODE = "grüppe-€-😀"

SCENARIO = Scenario(
    "consumer-offsets-history",
    [
        # a dynamic group: MEMBER_ID_REQUIRED creates it (the "empty group" record), sync, commit, leave,
        # delete
        join("d", group="dyn", expect=E.MEMBER_ID_REQUIRED),
        join("d", group="dyn", expect=E.NONE),
        sync("d", group="dyn", assign={"d": {"t": [0, 1, 2]}}),
        commit("d", offsets={("t", 0): (5, "dyn meta")}, group="dyn"),
        leave("d", group="dyn"),
        delete_groups(groups=["dyn"]),
        # a static group with real subscriptions: two generations, commits in every value version,
        # a static replacement, leave → Empty, OffsetDelete, DeleteGroups
        *form_group("a", "b", static=True, protocols=PROTOCOLS),
        commit("a", offsets={("t", 0): (10, "meta-a", 3)}),  # value v3 with a leader epoch
        commit("b", 2, offsets={("t", 1): (11, "meta-b")}, retention=60000),  # explicit retention: v1
        commit("b", 6, offsets={("u", 0): (12, None)}),  # null metadata is stored as ""
        join("b2", instance="b", member="", protocols=PROTOCOLS, expect=E.NONE),  # replacement record
        sync("b2"),
        commit("b2", offsets={("u", 1): (13, "from b2")}),
        leave("b2"),
        leave("a"),  # Empty: the generation bumps, members go
        offset_delete(topics={"u": [0, 1]}),
        delete_groups(),
        # a simple group (commits only) and OffsetDelete on it
        commit(offsets={("t", 2): (20, "simple"), ("u", 0): 21}, group="simple"),
        offset_delete(topics={"t": [2]}, group="simple"),
        # a group id whose Java hash differs from a byte hash: same partition on both brokers
        commit(offsets={("t", 0): (30, "ünïcode ✓")}, group=UNICODE),
    ],
    covers=("9", "14.13", "6", "8.9", "8.12"),
)


def _normalise_record(
    record: CoordinatorRecord, ids: IdNormaliser, topic_ids: dict[str, uuid.UUID]
) -> dict[str, Any]:
    value = record.value
    if value is not None:
        value = dict(value)
        if value.get("topic_id", ZERO_UUID) != ZERO_UUID:
            # ids differ between brokers: each must be the id its own Metadata reports for the key's topic
            topic = record.key.get("topic")
            stored = value["topic_id"]
            value["topic_id"] = (
                f"<id of {topic}>" if stored == topic_ids.get(str(topic)) else f"<not {topic}'s id: {stored}>"
            )
        if "commit_timestamp" in value:
            commit_ts = value["commit_timestamp"]
            value["commit_timestamp"] = "<now>"
            if value.get("expire_timestamp", -1) != -1:
                value["expire_timestamp"] = f"<commit+{value['expire_timestamp'] - commit_ts}>"
        if value.get("current_state_timestamp", -1) >= 0:
            value["current_state_timestamp"] = "<now>"
        value = ids(value)
        value = sort_list(value, ("members",), lambda m: m["member_id"])
    return {
        "partition": record.partition,
        "key_type": record.key_type,
        "key": ids(record.key),
        "value_version": record.value_version,
        "value": value,
        "batch": record.batch,
    }


def _timestamps(record: CoordinatorRecord) -> list[int]:
    value = record.value or {}
    return [v for k, v in value.items() if k in ("commit_timestamp", "current_state_timestamp") and v >= 0]


@dataclass
class Transcript:
    """Both brokers' records of the scenario's groups, normalised, and what did not hold on each."""

    records: dict[str, list[dict[str, Any]]]
    raw: dict[str, list[CoordinatorRecord]]
    problems: list[str]
    groups: list[str]


@pytest.fixture(scope="module")
def transcript(broker_pair: BrokerPair) -> Transcript:
    pair = start_pair()
    base = f"offsets-compat-{uuid.uuid4().hex[:6]}"
    groups = [base, f"{base}.dyn", f"{base}.simple", f"{base}.{UNICODE}"]
    started = int(time.time() * 1000)
    result = run_pair(SCENARIO, pair.kafka_address, pair.regroup.address, base)
    check_result(result)  # the responses themselves must already agree
    finished = int(time.time() * 1000)
    partitions = int(pair.regroup.settings["offsets.topic.num.partitions"])
    problems: list[str] = []
    records: dict[str, list[dict[str, Any]]] = {}
    raw: dict[str, list[CoordinatorRecord]] = {}
    for name, address, observations in (
        ("kafka", pair.kafka_address, result.kafka),
        ("regroup", pair.regroup.address, result.regroup),
    ):
        ids = member_ids(observations)
        everything = [r for p in range(partitions) for r in read_offsets_topic(address, p)]
        mine = sorted(
            (r for r in everything if r.group in groups), key=lambda r: (groups.index(r.group), r.offset)
        )
        for r in mine:
            if r.partition != partition_for(r.group, partitions):
                problems.append(f"{name}: record of {r.group!r} in partition {r.partition}")
            for ts in _timestamps(r):
                if not started - 5000 <= ts <= finished + 5000:
                    problems.append(
                        f"{name}: timestamp {ts} at {r.partition}/{r.offset} is not wall-clock now"
                    )
        raw[name] = mine
        names = {str(r.key["topic"]) for r in mine if "topic" in r.key}
        ids_of_topics = topic_ids(address, names)
        records[name] = [
            {"group": groups.index(r.group), **_normalise_record(r, ids, ids_of_topics)} for r in mine
        ]
    return Transcript(records, raw, problems, groups)


@pytest.mark.kafka
def test_consumer_offsets_records_match(transcript: Transcript) -> None:
    t = transcript
    problems = list(t.problems)
    for d in diff(t.records["kafka"], t.records["regroup"]):
        problems.append(f"record {d.path}: kafka={render(d.expected)} regroup={render(d.actual)}")
    for r in t.raw["regroup"]:
        if not r.reencodes():
            problems.append(f"regroup: record at {r.partition}/{r.offset} does not re-encode to its bytes")
    versions = sorted(
        {(r["key_type"], r["value_version"]) for r in t.records["kafka"] if r["value_version"] is not None}
    )
    compat_report.record_check(
        "__consumer_offsets records (read via Fetch, decoded with regroup's codecs)",
        "identical" if not problems else "DIFFERS",
        f"{len(t.records['kafka'])} records of {len(t.groups)} groups (dynamic, static with replacement, "
        f"simple, non-ASCII id) in the same partitions and order; Kafka's (key type, value version): "
        f"{versions}",
    )
    assert not problems, "\n".join(problems) + _dump(t)


@pytest.mark.kafka
def test_kafka_offset_commit_records_round_trip(transcript: Transcript) -> None:
    """regroup's codecs keep every field of Kafka's records, the v4 tagged topic id included."""
    lossy = [f"{r.partition}/{r.offset}" for r in transcript.raw["kafka"] if not r.reencodes()]
    assert not lossy, f"Kafka's records at {lossy} lose bytes when decoded and re-encoded by regroup's codec"


def _dump(t: Transcript) -> str:
    return (
        "\n\nkafka:\n"
        + "\n".join(map(str, t.records["kafka"]))
        + "\n\nregroup:\n"
        + "\n".join(map(str, t.records["regroup"]))
    )


# ---------------------------------------------------------------------------- KIP-848 consumer groups
# The same ConsumerGroupHeartbeat history on both brokers (client-generated member ids, so nothing to
# normalise there): record types 3, 5, 6, 7, 8 with Kafka 4.3's tagged fields (MetadataHash,
# AssignmentTimestamp, AssignmentEpochs), and the group's tombstones. Topic ids differ between the
# brokers, so they become "<id of t>"; MetadataHash hashes the topic id, so each broker's hash is checked
# against regroup's implementation of Kafka's hash over that broker's own topics, then normalised.

CONSUMER_SCENARIO = Scenario(
    "consumer-offsets-consumer-group",
    [
        consumer_coordinator_sees("t"),
        cgh("a", epoch=0, names=["t"], expect=E.NONE),  # 5, 3, 7, 6, 8
        cgh("b", epoch=0, names=["t"], expect=E.NONE),  # b waits for a's partitions
        cgh("a", expect=E.NONE),  # a must revoke
        cgh("a", expect=E.NONE),  # a revoked: next epoch
        cgh("b", expect=E.NONE),  # b gets the released partitions
        cgh("a", epoch=-1, expect=E.NONE),  # leave: tombstones, bump
        cgh("b", expect=E.NONE),
        cgh("b", epoch=-1, expect=E.NONE),
        delete_groups(),  # group tombstones
    ],
)


def _normalise_consumer_record(
    record: CoordinatorRecord, topic_ids: dict[str, uuid.UUID], partitions: dict[str, int]
) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    names = {str(tid): name for name, tid in topic_ids.items()}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "topic_id":
                    out[k] = f"<id of {names[v]}>" if v in names else f"<unknown id {v}>"
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    value = walk(record.value) if record.value is not None else None
    if value is not None and record.key_type == 3:
        image = TopicsImage(TopicImage(topic_ids[n], n, partitions[n]) for n in topic_ids)
        expected = image.group_hash(topic_ids)
        if value["metadata_hash"] not in (0, expected):  # 0: no member subscribes any more
            problems.append(f"metadata hash {value['metadata_hash']} is not Kafka's hash {expected}")
        value["metadata_hash"] = "<hash of the subscribed topics>" if value["metadata_hash"] else 0
    if value is not None and value.get("assignment_timestamp"):
        value["assignment_timestamp"] = "<now>"
    return (
        {
            "partition": record.partition,
            "key_type": record.key_type,
            "key": record.key,
            "value_version": record.value_version,
            "value": value,
            "batch": record.batch,
        },
        problems,
    )


@pytest.mark.kafka
def test_consumer_group_records_match(broker_pair: BrokerPair) -> None:
    pair = start_pair()
    group = f"offsets-cg-{uuid.uuid4().hex[:6]}"
    result = run_pair(CONSUMER_SCENARIO, pair.kafka_address, pair.regroup.address, group)
    check_result(result)
    partitions = int(pair.regroup.settings["offsets.topic.num.partitions"])
    records: dict[str, list[dict[str, Any]]] = {}
    problems: list[str] = []
    raw: dict[str, list[CoordinatorRecord]] = {}
    for name, address in (("kafka", pair.kafka_address), ("regroup", pair.regroup.address)):
        mine = [r for r in read_offsets_topic(address, partition_for(group, partitions)) if r.group == group]
        raw[name] = mine
        ids = topic_ids(address, [topic_name("t")])
        records[name] = []
        for r in mine:
            normalised, found = _normalise_consumer_record(r, ids, {topic_name("t"): TOPICS["t"]})
            records[name].append(normalised)
            problems += [f"{name} {r.partition}/{r.offset}: {p}" for p in found]
    for d in diff(records["kafka"], records["regroup"]):
        problems.append(f"record {d.path}: kafka={render(d.expected)} regroup={render(d.actual)}")
    for name in ("kafka", "regroup"):
        for r in raw[name]:
            if not r.reencodes():
                problems.append(
                    f"{name}: type-{r.key_type} record at {r.partition}/{r.offset} does not re-encode to its "
                    f"bytes: key {r.raw_key.hex()} value {None if r.raw_value is None else r.raw_value.hex()}"
                )
    types = sorted({r["key_type"] for r in records["kafka"]})
    compat_report.record_check(
        "__consumer_offsets records of a KIP-848 consumer group",
        "identical" if not problems else "DIFFERS",
        f"{len(records['kafka'])} records (types {types}), MetadataHash equal to Kafka's XXH3 hash on each "
        "broker's own topic ids",
    )
    dump = "\n\nkafka:\n" + "\n".join(map(str, records["kafka"]))
    dump += "\n\nregroup:\n" + "\n".join(map(str, records["regroup"]))
    assert not problems, "\n".join(problems) + dump


def _regex_member_lifecycle(address: Address, group: str, regex: str) -> None:
    """Join with ``regex``, heartbeat until partitions arrive (Kafka resolves regexes in the background,
    regroup at once), then leave: the group's resolution is written (type 16) and, with the last subscriber
    gone, tombstoned."""
    with BlockingConnection(address) as conn:

        def heartbeat(epoch: int, **fields: Any) -> ConsumerGroupHeartbeatResponse:
            request = ConsumerGroupHeartbeatRequest(
                group_id=group, member_id="r-member", member_epoch=epoch, **fields
            )
            return conn.request(request, ConsumerGroupHeartbeatResponse, version=1, timeout=20)

        response = heartbeat(
            0, rebalance_timeout_ms=30_000, subscribed_topic_regex=regex, topic_partitions=[]
        )
        assert response.error_code == 0, response
        deadline = time.monotonic() + 30
        while response.assignment is None or not response.assignment.topic_partitions:
            assert time.monotonic() < deadline, "the regex was never resolved"
            time.sleep(0.2)
            response = heartbeat(response.member_epoch, topic_partitions=[])
            assert response.error_code == 0, response
        assert heartbeat(-1).error_code == 0


@pytest.mark.kafka
def test_regular_expression_records_match(broker_pair: BrokerPair) -> None:
    """Type 16 only: Kafka resolves asynchronously (its records come in other batches and at other epochs
    than regroup's synchronous resolution), so the resolution records and their tombstone are compared on
    their own; Version (Kafka: its metadata image offset, regroup: 0) and Timestamp are normalised."""
    pair = start_pair()
    group = f"offsets-re-{uuid.uuid4().hex[:6]}"
    regex = f"{topic_name('t')}|{topic_name('u')}|nothing"
    partitions = int(pair.regroup.settings["offsets.topic.num.partitions"])
    records: dict[str, list[dict[str, Any]]] = {}
    problems: list[str] = []
    for name, address in (("kafka", pair.kafka_address), ("regroup", pair.regroup.address)):
        _regex_member_lifecycle(address, group, regex)
        mine = [r for r in read_offsets_topic(address, partition_for(group, partitions)) if r.group == group]
        regex_records = [r for r in mine if r.key_type == 16]
        problems += [
            f"{name}: type-16 record at {r.partition}/{r.offset} does not re-encode to its bytes"
            for r in regex_records
            if not r.reencodes()
        ]
        records[name] = [
            {
                "key": r.key,
                "value": None
                if r.value is None
                else {
                    **r.value,
                    "version": "<version>",
                    "timestamp": "<now>" if r.value["timestamp"] > 0 else 0,
                },
            }
            for r in regex_records
        ]
    for d in diff(records["kafka"], records["regroup"]):
        problems.append(f"record {d.path}: kafka={render(d.expected)} regroup={render(d.actual)}")
    assert records["kafka"], "Kafka wrote no regular expression record"
    assert records["kafka"][-1]["value"] is None, "the last subscriber's leave tombstones the regex"
    compat_report.record_check(
        "__consumer_offsets regular expression records (type 16) of a KIP-848 group",
        "identical" if not problems else "DIFFERS",
        f"{len(records['kafka'])} records (resolution and tombstone); Version and Timestamp normalised",
    )
    assert not problems, "\n".join(problems) + f"\n\nkafka: {records['kafka']}\nregroup: {records['regroup']}"
