"""Byte-for-byte agreement with kafka-python 3.0.12, which generates its codecs from the same JSON specs.

For every API both implement (every group API plus Metadata, Produce, Fetch, ApiVersions, ListOffsets and
the rest of kafka-python's catalogue), at every version both accept, requests and responses:

(a) a hypothesis-generated regroup value, converted field by field into the equivalent kafka-python object,
    encodes to exactly regroup's bytes;
(b) regroup decodes kafka-python's bytes back into the original value;
(c) kafka-python decodes regroup's bytes into a value that converts back to the original.

The request/response headers, whole frames and the consumer embedded protocol are compared too.

Known differences between the two schema sets, all handled below:

* kafka-python's JSON comes from a newer Kafka (4.1+). Versions only one side has (e.g. Metadata v13,
  DescribeGroups v6, Fetch v18, OffsetCommit v10) are not compared. Kafka 4.x raised some lower bounds of
  ``validVersions`` (Produce 3+, Fetch 4+, OffsetCommit 2+, OffsetFetch 1+, ListOffsets 1+, ...), but
  kafka-python deliberately ignores those lower bounds and its JSON still describes the old versions, so
  those versions are compared as well.
* API key 74 is ListClientMetricsResources in our specs and ListConfigResources (renamed and extended by
  KIP-1142) in kafka-python's: not compared.
* kafka-python patches some schemas: ``authorized_operations`` fields of Metadata and DescribeGroups
  responses are a set of bit numbers (``bitfield``), and Metadata's ``ClusterAuthorizedOperations`` /
  ``TopicAuthorizedOperations`` are renamed ``authorized_operations``. The converters map int32 <-> set.
* kafka-python's default for a tagged struct field is ``None`` and it writes any non-None value, while
  Kafka (and regroup) omit a tagged field equal to its default; the converter leaves such fields unset.
* kafka-python represents the zero UUID as ``None`` and may return ``memoryview`` for bytes.
* kafka-python decodes an ApiVersions response whose error code is non-zero as version 0 (the broker's
  answer to an unsupported request version), so (c) skips those.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import uuid
import warnings
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.protocol.api_keys import ApiKey, request_class, response_class
from regroup.protocol.framing import decode_request, encode_request, encode_response
from regroup.protocol.message import Data, Message, Struct
from regroup.protocol.messages.headers import RequestHeader, ResponseHeader
from regroup.protocol.primitives import ZERO_UUID
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from .strategies import GROUP_APIS, values

# kafka-python 3.0.12 loads its JSON with the deprecated importlib.resources.read_text at import time.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    kafka_protocol = pytest.importorskip("kafka.protocol")
    from kafka.protocol.api_data import ApiData
    from kafka.protocol.api_header import RequestHeader as KpRequestHeader
    from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment as KpAssignment,
    )
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolSubscription as KpSubscription,
    )

    for _pkg_name in ("admin", "consumer", "metadata", "producer"):
        _pkg = importlib.import_module(f"kafka.protocol.{_pkg_name}")
        for _info in pkgutil.iter_modules(_pkg.__path__):
            importlib.import_module(f"{_pkg.__name__}.{_info.name}")
    importlib.import_module("kafka.protocol.sasl")

_HC = [HealthCheck.too_slow, HealthCheck.data_too_large]

# Schema names kafka-python patched (json_patch), by regroup spec name.
RENAMED = {
    "ClusterAuthorizedOperations": "authorized_operations",
    "TopicAuthorizedOperations": "authorized_operations",
}
NOT_COMPARED_KEYS = {74: "ListClientMetricsResources vs kafka-python's ListConfigResources (KIP-1142 rename)"}
FOCUS = GROUP_APIS | {"Metadata", "Produce", "Fetch", "ApiVersions", "ListOffsets"}


# ----------------------------------------------------------------------------------- kafka-python side


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


@cache
def kp_messages() -> dict[tuple[int, str], Any]:
    """(api key, 'request'|'response') -> kafka-python's primary (unversioned) message class."""
    found: dict[tuple[int, str], Any] = {}
    for cls in _subclasses(ApiMessage):
        if "_json" in cls.__dict__ and cls.__dict__.get("_class_version") is None:
            found[(cls.API_KEY, cls.type)] = cls
    return found


def _kp_fields(kp_struct: Any) -> dict[str, Any]:
    """kafka-python fields by the name our specs give them."""
    return {f._name: f for f in kp_struct._fields}


def _kp_field(kp_struct: Any, spec_name: str) -> Any:
    fields = _kp_fields(kp_struct)
    if spec_name in fields:
        return fields[spec_name]
    return fields[RENAMED[spec_name]]


def _is_bitfield(kp_field: Any) -> bool:
    return getattr(kp_field, "_type_str", None) == "bitfield"


def _bits(value: int) -> set[int]:
    u = value & 0xFFFFFFFF
    return {b for b in range(32) if u >> b & 1}


def _from_bits(bits: set[int] | None) -> int:
    if bits is None:
        return -(2**31)
    u = sum(1 << b for b in bits)
    return u - (1 << 32) if u >= 1 << 31 else u


def to_kp(obj: Struct, kp_cls: Any, version: int, *, top: bool = False) -> Any:
    """The kafka-python object equivalent to ``obj`` (``kp_cls`` is its class or nested data class)."""
    defaults = type(obj)()
    kwargs: dict[str, Any] = {}
    for f in type(obj).FIELDS:
        if not f.present_in(version):
            continue
        kf = _kp_field(kp_cls._struct, f.spec_name)
        value = getattr(obj, f.name)
        if f.tag is not None and value == getattr(defaults, f.name):
            continue  # kafka-python would write a default tagged struct; Kafka omits it
        if f.struct is not None and value is not None:
            nested = getattr(kp_cls, f.struct.SPEC_NAME)
            if f.is_array:
                value = [to_kp(e, nested, version) for e in value]
            else:
                value = to_kp(value, nested, version)
        elif _is_bitfield(kf):
            value = None if value == -(2**31) else _bits(value)
        kwargs[kf.name] = value
    if top:
        return kp_cls[version](**kwargs)
    return kp_cls(version=version, **kwargs)


def _plain(value: Any) -> Any:
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


def from_kp(kp_obj: Any, cls: type[Struct], kp_cls: Any, version: int) -> Struct:
    """The regroup value of a kafka-python object decoded at ``version``."""
    defaults = cls()
    kwargs: dict[str, Any] = {}
    for f in cls.FIELDS:
        if not f.present_in(version):
            continue
        kf = _kp_field(kp_cls._struct, f.spec_name)
        value = getattr(kp_obj, kf.name)
        if f.struct is not None:
            nested = getattr(kp_cls, f.struct.SPEC_NAME)
            if value is None:
                value = None if f.nullable_in(version) else getattr(defaults, f.name)
            elif f.is_array:
                value = [from_kp(e, f.struct, nested, version) for e in value]
            else:
                value = from_kp(value, f.struct, nested, version)
        elif _is_bitfield(kf):
            value = _from_bits(value)
        elif f.type_name == "uuid":
            if f.is_array:
                value = [ZERO_UUID if e is None else e for e in value]
            elif value is None:
                value = ZERO_UUID
        elif f.is_array and value is not None:
            value = [_plain(e) for e in value]
        else:
            value = _plain(value)
        kwargs[f.name] = value
    return cls(**kwargs)


# ----------------------------------------------------------------------------------- the pairs


def _pairs() -> list[Any]:
    params = []
    for (key, kind), kp_cls in sorted(kp_messages().items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if key in NOT_COMPARED_KEYS:
            continue
        ours = request_class(ApiKey(key)) if kind == "request" else response_class(ApiKey(key))
        for v in range(ours.MIN_VERSION, min(ours.MAX_VERSION, kp_cls.max_version) + 1):
            if ours.supports(v):
                params.append(pytest.param(ours, kp_cls, v, id=f"{ours.NAME}-v{v}"))
    return params


PAIRS = _pairs()


def _api(cls: type[Message]) -> str:
    return cls.NAME.removesuffix("Request").removesuffix("Response")


def test_pairs_cover_the_required_apis() -> None:
    apis = {_api(p.values[0]) for p in PAIRS}
    assert apis >= FOCUS
    assert len(apis) >= 45
    # every group API at every regroup version (kafka-python's range covers ours)
    for p in PAIRS:
        cls = p.values[0]
        if _api(cls) in GROUP_APIS:
            assert p.values[1].max_version >= cls.MAX_VERSION, cls.NAME


@pytest.mark.parametrize(("cls", "kp_cls", "version"), PAIRS)
def test_same_bytes_as_kafka_python(cls: type[Message], kp_cls: Any, version: int) -> None:
    examples = 12 if _api(cls) in FOCUS else 3

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=_HC)
    @given(values(cls, version))
    def check(obj: Message) -> None:
        ours = obj.encode(version)
        kp_obj = to_kp(obj, kp_cls, version, top=True)
        theirs = kp_obj.encode(version)
        assert theirs == ours  # (a)
        assert cls.decode(theirs, version) == obj  # (b)
        if cls.NAME == "ApiVersionsResponse" and obj.error_code != 0:
            return  # kafka-python reads it as v0, see the module docstring
        back = kp_cls[version].decode(ours)
        assert from_kp(back, cls, kp_cls, version) == obj  # (c)

    check()


# ----------------------------------------------------------------------------------- headers & frames


@given(
    api_key=st.integers(-(2**15), 2**15 - 1),
    api_version=st.integers(-(2**15), 2**15 - 1),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=20)),
    flexible=st.booleans(),
)
@settings(max_examples=200, deadline=None, database=None)
def test_request_header_matches_kafka_python(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> None:
    kp_hdr = KpRequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    ours = RequestHeader(api_key, api_version, correlation_id, client_id)
    version = 2 if flexible else 1
    data = ours.encode(version)
    assert kp_hdr.encode(flexible=flexible) == data
    assert RequestHeader.decode(data, version) == ours
    back = KpRequestHeader.decode(io.BytesIO(data), flexible=flexible)
    assert (back.request_api_key, back.request_api_version, back.correlation_id, back.client_id) == (
        api_key,
        api_version,
        correlation_id,
        client_id,
    )


@given(correlation_id=st.integers(-(2**31), 2**31 - 1), flexible=st.booleans())
@settings(max_examples=50, deadline=None, database=None)
def test_response_header_matches_kafka_python(correlation_id: int, flexible: bool) -> None:
    data = ResponseHeader(correlation_id).encode(1 if flexible else 0)
    assert KpResponseHeader(correlation_id=correlation_id).encode(flexible=flexible) == data
    assert KpResponseHeader.decode(io.BytesIO(data), flexible=flexible).correlation_id == correlation_id


FRAME_CASES = [
    pytest.param(cls, kp_cls, v, id=f"{cls.NAME}-v{v}")
    for (cls, kp_cls, v) in (p.values for p in PAIRS)
    if _api(cls) in FOCUS
]


@pytest.mark.parametrize(("cls", "kp_cls", "version"), FRAME_CASES)
def test_frames_match_kafka_python(cls: type[Message], kp_cls: Any, version: int) -> None:
    """Whole size-prefixed frames with headers (ApiVersions responses keep header v0 at every version)."""
    obj = cls()
    kp_obj = to_kp(obj, kp_cls, version, top=True)
    if kp_cls.is_request():
        kp_obj.with_header(correlation_id=1234, client_id="regroup-test")
        ours = encode_request(obj, version, 1234, "regroup-test")
        assert kp_obj.encode(header=True, framed=True) == ours
        header, decoded = decode_request(ours[4:])
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            cls.API_KEY,
            version,
            1234,
            "regroup-test",
        )
        assert decoded == obj
    else:
        kp_obj.with_header(correlation_id=1234)
        ours = encode_response(obj, version, 1234)
        assert kp_obj.encode(header=True, framed=True) == ours
        back = kp_cls.decode(ours, version=version, header=True, framed=True)
        assert back.header.correlation_id == 1234
        assert from_kp(back, cls, kp_cls, version) == obj


# ----------------------------------------------------------------------------------- consumer protocol


@pytest.mark.parametrize(
    ("cls", "kp_cls"),
    [(ConsumerProtocolSubscription, KpSubscription), (ConsumerProtocolAssignment, KpAssignment)],
    ids=["subscription", "assignment"],
)
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_consumer_protocol_matches_kafka_python(cls: type[Data], kp_cls: Any, version: int) -> None:
    assert issubclass(kp_cls, ApiData)
    assert kp_cls.max_version >= cls.MAX_VERSION

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=_HC)
    @given(values(cls, version))
    def check(obj: Data) -> None:
        ours = obj.encode_versioned(version)
        theirs = to_kp(obj, kp_cls, version).encode(version=version)
        assert theirs == ours
        assert cls.decode_versioned(theirs) == (obj, version)
        back = kp_cls.decode(ours)
        assert from_kp(back, cls, kp_cls, version) == obj

    check()


def test_kafka_python_reads_a_newer_subscription_version_like_regroup() -> None:
    """Both sides parse a future version with the newest schema they know and ignore what follows."""
    obj = ConsumerProtocolSubscription(topics=["t"], user_data=b"u", generation_id=4, rack_id="r")
    future = b"\x00\x07" + obj.encode(3) + b"\xde\xad"
    assert ConsumerProtocolSubscription.decode_versioned(future, lenient=True) == (obj, 7)
    back = KpSubscription.decode(future)
    assert from_kp(back, ConsumerProtocolSubscription, KpSubscription, 3) == obj


def test_known_uuid_and_bitfield_conversions() -> None:
    assert _from_bits(_bits(-(2**31))) == -(2**31)
    assert _from_bits(None) == -(2**31)
    for value in (0, 1, 0x7FFFFFFF, -1, 0x1234, -(2**31) + 5):
        assert _from_bits(_bits(value)) == value
    assert uuid.UUID(int=0) == ZERO_UUID


# Defaults kafka-python changed with json_patch (not in the JSON specs).
PATCHED_DEFAULTS = {
    ("ListOffsetsRequest", "replica_id"),  # -1 in kafka-python, spec default 0
    ("CreatePartitionsTopic", "assignments"),  # null in kafka-python, spec default []
}


def test_defaults_match_kafka_python() -> None:
    """Every scalar/array default (used for absent fields, tagged-field omission and the absent-field check)
    matches kafka-python's reading of the same JSON, for every struct of every compared API."""
    seen: set[tuple[type[Struct], Any]] = set()
    diffs: list[tuple[str, str, Any, Any]] = []

    def walk(cls: type[Struct], kp_cls: Any) -> None:
        if (cls, kp_cls) in seen:
            return
        seen.add((cls, kp_cls))
        ours_defaults = cls()
        for f in cls.FIELDS:
            kf = _kp_field(kp_cls._struct, f.spec_name)
            if f.struct is not None:
                walk(f.struct, getattr(kp_cls, f.struct.SPEC_NAME))
                if not f.is_array:
                    continue  # kafka-python has no default for a non-null struct
            ours = getattr(ours_defaults, f.name)
            theirs = kf.default
            if f.type_name == "uuid" and theirs is None:
                theirs = ZERO_UUID
            if _is_bitfield(kf):
                theirs = _from_bits(theirs)
            if ours != theirs and (cls.NAME, f.name) not in PATCHED_DEFAULTS:
                diffs.append((cls.NAME, f.name, ours, theirs))

    for cls, kp_cls, _ in (p.values for p in PAIRS):
        walk(cls, kp_cls)
    assert len(seen) > 200
    assert diffs == []
