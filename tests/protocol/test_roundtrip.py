"""Round trips of every generated codec at every version: ``decode(encode(x, v), v) == x``.

Also: the int16-version-prefixed forms of records, the lenient decoding of a newer consumer-protocol
version, and the encoder's refusals (a non-default value in a field the version lacks, ``None`` in a
non-nullable field).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.protocol.message import Data, FieldSpec, Struct
from regroup.protocol.messages.fetch import (
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from regroup.protocol.primitives import I16, DecodeError, EncodeError, UnsupportedVersionError
from regroup.protocol.records.consumer_group_member_metadata import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataValue,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

from .strategies import (
    GROUP_APIS,
    INT_RANGES,
    all_classes,
    api_name,
    class_id,
    class_versions,
    top_level_classes,
    values,
)

_HC = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def _examples(cls: type[Struct]) -> int:
    if api_name(cls) in GROUP_APIS or cls.__module__.endswith(
        ("consumer_protocol", "offset_commit", "group_metadata")
    ):
        return 25
    return 6


def _values(cls: type[Struct], version: int) -> st.SearchStrategy[Any]:
    return values(cls, version)


TOP_CASES = [
    pytest.param(cls, v, id=f"{class_id(cls)}-v{v}")
    for cls in top_level_classes()
    for v in class_versions(cls)
]
# Nested structs are covered through their parents; each is also round-tripped on its own, with the
# version drawn per example, so that a struct only reachable at some versions is still checked alone.
NESTED = [pytest.param(cls, id=class_id(cls)) for cls in all_classes() if cls not in set(top_level_classes())]


def test_every_class_is_enumerated() -> None:
    names = {class_id(c) for c in top_level_classes()}
    assert "join_group.JoinGroupRequest" in names
    assert "headers.RequestHeader" in names
    assert "consumer_protocol.ConsumerProtocolSubscription" in names
    assert "group_metadata.GroupMetadataValue" in names
    assert len(TOP_CASES) >= 700
    assert all(class_versions(c) for c in all_classes())


@pytest.mark.parametrize(("cls", "version"), TOP_CASES)
def test_roundtrip(cls: type[Struct], version: int) -> None:
    @settings(max_examples=_examples(cls), deadline=None, database=None, suppress_health_check=_HC)
    @given(_values(cls, version))
    def check(obj: Struct) -> None:
        data = obj.encode(version)
        assert cls.decode(data, version) == obj
        # read() reports the end; extra bytes after the value are left alone by read but refused by decode
        assert cls.read(data + b"\x00", 0, version) == (obj, len(data))
        with pytest.raises(DecodeError, match="trailing"):
            cls.decode(data + b"\x00", version)
        # Encoding is deterministic and write() appends
        buf = bytearray(b"xy")
        obj.write(buf, version)
        assert bytes(buf) == b"xy" + data

    check()


@pytest.mark.parametrize("cls", NESTED)
def test_roundtrip_nested(cls: type[Struct]) -> None:
    @settings(max_examples=6, deadline=None, database=None, suppress_health_check=_HC)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(class_versions(cls)), label="version")
        obj = data.draw(values(cls, version), label="value")
        assert cls.decode(obj.encode(version), version) == obj

    check()


@pytest.mark.parametrize(("cls", "version"), TOP_CASES)
def test_defaults_roundtrip(cls: type[Struct], version: int) -> None:
    obj = cls()
    assert cls.decode(obj.encode(version), version) == obj


def test_unsupported_version() -> None:
    for cls in top_level_classes():
        for v in (cls.MIN_VERSION - 1, cls.MAX_VERSION + 1):
            assert not cls.supports(v)
            with pytest.raises(UnsupportedVersionError):
                cls().encode(v)
            with pytest.raises(UnsupportedVersionError):
                cls.decode(b"", v)


# ------------------------------------------------------------------------------ versioned records


RECORD_CLASSES = [c for c in top_level_classes() if issubclass(c, Data)]


@pytest.mark.parametrize(
    ("cls", "version"),
    [pytest.param(c, v, id=f"{class_id(c)}-v{v}") for c in RECORD_CLASSES for v in class_versions(c)],
)
def test_versioned_roundtrip(cls: type[Data], version: int) -> None:
    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=_HC)
    @given(_values(cls, version))
    def check(obj: Data) -> None:
        data = obj.encode_versioned(version)
        assert data[:2] == I16.pack(version)
        assert data[2:] == obj.encode(version)
        assert cls.decode_versioned(data) == (obj, version)
        assert cls.decode_versioned(memoryview(data)) == (obj, version)
        with pytest.raises(DecodeError):
            cls.decode_versioned(data + b"\x01")
        assert cls.decode_versioned(data + b"\x01", lenient=True) == (obj, version)

    check()


@pytest.mark.parametrize("cls", RECORD_CLASSES, ids=class_id)
def test_versioned_rejects_bad_prefix(cls: type[Data]) -> None:
    with pytest.raises(DecodeError):
        cls.decode_versioned(b"")
    with pytest.raises(DecodeError):
        cls.decode_versioned(b"\x00")
    with pytest.raises(DecodeError):
        cls.decode_versioned(I16.pack(-1) + cls().encode(cls.MAX_VERSION))
    with pytest.raises(DecodeError):
        cls.decode_versioned(I16.pack(cls.MAX_VERSION + 1) + cls().encode(cls.MAX_VERSION))
    if cls.MIN_VERSION > 0:
        # e.g. an OffsetCommitKey can't be read as version 0 of a key whose only version is its type
        with pytest.raises(DecodeError):
            cls.decode_versioned(I16.pack(cls.MIN_VERSION - 1) + cls().encode(cls.MIN_VERSION))


def test_offset_commit_record_known_bytes() -> None:
    key = OffsetCommitKey(group="g", topic="t", partition=3)
    assert key.encode_versioned(1) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = OffsetCommitValue(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)
    assert value.encode_versioned(3) == (
        b"\x00\x03"
        + (42).to_bytes(8, "big")
        + (7).to_bytes(4, "big")
        + b"\x00\x01m"
        + (1000).to_bytes(8, "big")
    )
    # v1 alone carries an expire timestamp, which is ignorable: v3 drops it
    assert dataclasses.replace(value, expire_timestamp=5).encode_versioned(3) == value.encode_versioned(3)
    assert OffsetCommitValue.decode_versioned(value.encode_versioned(1))[0].leader_epoch == -1


def test_tagged_nullable_struct_roundtrip() -> None:
    value = ConsumerGroupMemberMetadataValue(
        client_id="c",
        classic_member_metadata=ClassicMemberMetadata(
            session_timeout_ms=5, supported_protocols=[ClassicProtocol(name="range", metadata=b"m")]
        ),
    )
    data = value.encode(0)
    struct_bytes = bytearray()
    value.classic_member_metadata.write(struct_bytes, 0)
    # one tagged field: tag 0, size, then the 0x01 "not null" marker and the struct, as Kafka's Java writes it
    assert data.endswith(b"\x01\x00" + bytes([len(struct_bytes) + 1]) + b"\x01" + bytes(struct_bytes))
    assert ConsumerGroupMemberMetadataValue.decode(data, 0) == value


def test_tagged_nullable_struct_is_read_in_kafkas_form() -> None:
    """The reader half is right: Kafka's bytes (tag 0, size, varint 1 marker, struct) decode."""
    value = ConsumerGroupMemberMetadataValue(
        client_id="c",
        classic_member_metadata=ClassicMemberMetadata(
            session_timeout_ms=5, supported_protocols=[ClassicProtocol(name="range", metadata=b"m")]
        ),
    )
    without = ConsumerGroupMemberMetadataValue(client_id="c").encode(0)
    assert without.endswith(b"\x00")
    struct_bytes = bytearray()
    value.classic_member_metadata.write(struct_bytes, 0)
    kafka_form = without[:-1] + b"\x01\x00" + bytes([len(struct_bytes) + 1]) + b"\x01" + bytes(struct_bytes)
    assert ConsumerGroupMemberMetadataValue.decode(kafka_form, 0) == value


def test_tagged_nullable_struct_null_is_written_when_the_default_is_not_null() -> None:
    """The spec's ``"default": null`` is a JSON null, which Kafka's generator reads as no default: the field
    defaults to an empty struct, so null is a non-default value, written as tag 0, size 1, null marker (the
    bytes Kafka 4.3.1 writes for every consumer-protocol member), and a missing tag reads as the empty
    struct."""
    value = ConsumerGroupMemberMetadataValue(client_id="c", classic_member_metadata=None)
    data = value.encode(0)
    assert data.endswith(b"\x01\x00\x01\x00")  # one tagged field: tag 0, size 1, null marker
    assert ConsumerGroupMemberMetadataValue.decode(data, 0) == value
    empty = ConsumerGroupMemberMetadataValue(client_id="c")
    assert empty.classic_member_metadata == ClassicMemberMetadata()
    assert empty.encode(0).endswith(b"\x00")  # the default: no tagged field
    assert ConsumerGroupMemberMetadataValue.decode(empty.encode(0), 0) == empty


# ------------------------------------------------------------------------- consumer protocol leniency


def test_newer_subscription_version_is_read_leniently() -> None:
    sub = ConsumerProtocolSubscription(
        topics=["a", "b"],
        user_data=b"ud",
        owned_partitions=[ConsumerProtocolSubscriptionTopicPartition("a", [0, 2])],
        generation_id=7,
        rack_id="r1",
    )
    newer = I16.pack(ConsumerProtocolSubscription.MAX_VERSION + 5) + sub.encode(3) + b"\x00\x00\x00\x2afuture"
    assert ConsumerProtocolSubscription.decode_versioned(newer, lenient=True) == (sub, 8)
    with pytest.raises(DecodeError):
        ConsumerProtocolSubscription.decode_versioned(newer)


def test_newer_assignment_version_is_read_leniently() -> None:
    asg = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition("t", [1, 2, 3])], user_data=None
    )
    newer = I16.pack(9) + asg.encode(3) + b"\x01\x02\x03"
    assert ConsumerProtocolAssignment.decode_versioned(newer, lenient=True) == (asg, 9)
    # an older client's v0 bytes read as v0, whatever the reader's newest version is
    assert ConsumerProtocolAssignment.decode_versioned(asg.encode_versioned(0)) == (asg, 0)


def test_lenient_still_rejects_truncation() -> None:
    sub = ConsumerProtocolSubscription(topics=["topic"], user_data=b"x")
    data = sub.encode_versioned(1)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            ConsumerProtocolSubscription.decode_versioned(data[:cut], lenient=True)


# ------------------------------------------------------------------------------- encoder refusals


def _non_default(f: FieldSpec, default: Any) -> Any:
    """A value different from ``default`` for field ``f`` (valid at some version that has the field)."""
    if f.is_array:
        return [None] if default == [] else []
    if f.struct is not None:
        if default is None:
            return f.struct()
        for sf in f.struct.FIELDS:
            # a struct differing from the default in one field
            candidate = _non_default(sf, getattr(default, sf.name))
            if candidate is not _NO_VALUE:
                return dataclasses.replace(default, **{sf.name: candidate})
        return _NO_VALUE
    t = f.type_name
    if t in INT_RANGES:
        return 1 if default != 1 else 2
    if t == "bool":
        return not default
    if t == "float64":
        return default + 1.5
    if t == "string":
        return "x" if default != "x" else "y"
    if t in {"bytes", "records"}:
        return b"x"
    if t == "uuid":
        import uuid

        return uuid.UUID(int=1)
    raise AssertionError(t)


_NO_VALUE = object()


def _absent_cases(*, tagged: bool) -> list[Any]:
    cases = []
    for cls in all_classes():
        defaults = cls()
        for f in cls.FIELDS:
            if f.ignorable or (f.tag is not None) != tagged:
                continue
            for v in class_versions(cls):
                if not f.present_in(v):
                    cases.append(
                        pytest.param(
                            cls, f, v, getattr(defaults, f.name), id=f"{class_id(cls)}.{f.name}-v{v}"
                        )
                    )
    return cases


def _absent_value_refused(cls: type[Struct], f: FieldSpec, version: int, default: Any) -> bool:
    value = _non_default(f, default)
    assert value is not _NO_VALUE, f"no non-default value for {class_id(cls)}.{f.name}"
    cls().encode(version)  # the default itself encodes fine
    obj = dataclasses.replace(cls(), **{f.name: value})
    try:
        obj.encode(version)
    except EncodeError as exc:
        return f.name in str(exc)
    return False


@pytest.mark.parametrize(("cls", "f", "version", "default"), _absent_cases(tagged=False))
def test_non_default_value_in_absent_field_is_refused(
    cls: type[Struct], f: FieldSpec, version: int, default: Any
) -> None:
    assert _absent_value_refused(cls, f, version, default)


TAGGED_ABSENT = _absent_cases(tagged=True)


def test_non_default_value_in_absent_tagged_field_is_refused() -> None:
    assert len(TAGGED_ABSENT) > 50
    dropped = [p.id for p in TAGGED_ABSENT if not _absent_value_refused(*p.values)]
    # e.g. fetch.PartitionData.diverging_epoch-v11, produce.PartitionProduceResponse.current_leader-v9,
    # fetch.FetchRequest.replica_state-v14, update_metadata.UpdateMetadataRequest.type-v7
    assert dropped == []


def test_tagged_absent_field_example() -> None:
    pd = PartitionData(diverging_epoch=EpochEndOffset(epoch=3, end_offset=10))
    resp = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[pd])])
    assert FetchResponse.decode(resp.encode(12), 12) == resp  # v12+ carries the tagged field
    # v11 lacks it: Kafka refuses to drop it, regroup writes the same bytes as without the value
    with pytest.raises(EncodeError, match="diverging_epoch"):
        resp.encode(11)


def test_ignorable_absent_field_is_dropped() -> None:
    # JoinGroupRequest.rebalance_timeout_ms (v1+) and reason (v8+) are ignorable: v0 simply omits them.
    from regroup.protocol.messages.join_group import JoinGroupRequest

    req = JoinGroupRequest(group_id="g", rebalance_timeout_ms=5000, reason="why")
    assert req.encode(0) == JoinGroupRequest(group_id="g").encode(0)
    assert JoinGroupRequest.decode(req.encode(0), 0) == JoinGroupRequest(group_id="g")
    # while group_instance_id (v5+) is not ignorable
    with pytest.raises(EncodeError, match="group_instance_id"):
        JoinGroupRequest(group_instance_id="i").encode(4)


def _none_cases() -> list[Any]:
    cases = []
    for cls in all_classes():
        for f in cls.FIELDS:
            for v in class_versions(cls):
                if f.present_in(v) and not f.nullable_in(v):
                    cases.append(pytest.param(cls, f, v, id=f"{class_id(cls)}.{f.name}-v{v}"))
    return cases


NONE_CASES = _none_cases()


def _none_refused(cls: type[Struct], f: FieldSpec, version: int) -> bool:
    try:
        obj = dataclasses.replace(cls(), **{f.name: None})
    except TypeError:
        return True  # the compiled codecs' classes check their fields' types when they are set
    try:
        obj.encode(version)
    except EncodeError:
        return True
    return False


def test_none_in_non_nullable_field_is_refused() -> None:
    """Every (class, version, present non-nullable field but bools): ``None`` there is an ``EncodeError``."""
    cases = [p for p in NONE_CASES if p.values[1].type_name != "bool"]
    assert len(cases) > 4000
    accepted = [p.id for p in cases if not _none_refused(*p.values)]
    assert accepted == []


def test_none_in_non_nullable_bool_is_refused() -> None:
    cases = [p for p in NONE_CASES if p.values[1].type_name == "bool"]
    assert cases
    # e.g. join_group.JoinGroupResponse.skip_assignment-v9, sync_group... and 140-odd more
    accepted = [p.id for p in cases if not _none_refused(*p.values)]
    assert accepted == []


def test_out_of_range_numbers_are_refused() -> None:
    """Every int field (and int array) of every class/version refuses a value just outside its type."""
    checked = 0
    accepted = []
    for cls in all_classes():
        for f in cls.FIELDS:
            if f.struct is not None or f.type_name not in INT_RANGES:
                continue
            lo, hi = INT_RANGES[f.type_name]
            for v in class_versions(cls):
                if not f.present_in(v):
                    continue
                for bad in (lo - 1, hi + 1):
                    obj = dataclasses.replace(cls(), **{f.name: [bad] if f.is_array else bad})
                    checked += 1
                    try:
                        obj.encode(v)
                    except EncodeError:
                        continue
                    accepted.append(f"{class_id(cls)}.{f.name}-v{v}={bad}")
    assert checked > 5000
    assert accepted == []


def test_compact_string_longer_than_int16_is_refused() -> None:
    from regroup.protocol.messages.join_group import JoinGroupRequest

    long_id = "x" * 0x8000
    with pytest.raises(EncodeError):
        JoinGroupRequest(group_id=long_id).encode(5)  # classic: refused
    data = JoinGroupRequest(group_id="x" * 0x7FFF).encode(6)
    assert JoinGroupRequest.decode(data, 6).group_id == "x" * 0x7FFF  # the largest valid one is fine
    too_long = b"\x81\x80\x02" + long_id.encode() + data[3 + 0x7FFF :]  # same request, 32768-byte group id
    with pytest.raises(DecodeError):
        JoinGroupRequest.decode(too_long, 6)
    with pytest.raises(EncodeError):
        JoinGroupRequest(group_id=long_id).encode(6)
