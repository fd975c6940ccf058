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
    E,
    Scenario,
    commit,
    delete_groups,
    form_group,
    join,
    leave,
    offset_delete,
    sync,
    topic_name,
)
from differential.harness import check_result, member_ids, run_pair, start_pair
from regroup.protocol.primitives import ZERO_UUID
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)
from support import compat_report
from support.brokers import BrokerPair
from support.consumer_offsets import CoordinatorRecord, read_offsets_topic
from support.kafka_wire import partition_for, topic_ids
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
