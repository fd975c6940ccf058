"""Base classes of the generated protocol codecs.

Each generated class carries, per version, a specialised writer and reader function (straight-line code
produced by ``tools/codegen``). These bases dispatch on the version and turn low-level failures into the
documented :class:`~regroup.protocol.primitives.DecodeError` / ``EncodeError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from mypy_extensions import mypyc_attr

from regroup.protocol.primitives import I16, DecodeError, EncodeError, UnsupportedVersionError

__all__ = ["DECODE_FAILURES", "Data", "FieldSpec", "Message", "Reader", "Struct"]

Writer = Callable[[bytearray, Any], None]
Reader = Callable[[bytes, int], tuple[Any, int]]

# What a malformed input or an unencodable value can raise inside generated code; converted at the edge.
DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError, MemoryError)
_ENCODE_FAILURES = (struct.error, AttributeError, TypeError, OverflowError, UnicodeEncodeError, ValueError)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """Schema of one field, as the JSON spec declares it (open-ended version ranges end at 32767)."""

    name: str  # attribute name (snake_case)
    spec_name: str  # name in the JSON spec
    type_name: str  # primitive type name, or the struct's spec name; for arrays, the element type
    is_array: bool
    struct: type[Struct] | None
    versions: tuple[int, int]
    nullable_versions: tuple[int, int] | None
    tag: int | None
    ignorable: bool

    def present_in(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        nv = self.nullable_versions
        return nv is not None and nv[0] <= version <= nv[1]


@mypyc_attr(allow_interpreted_subclasses=True)
class Struct:
    """A generated struct: one dataclass field per protocol field, encodable at every version it exists in."""

    __slots__ = ()

    NAME: ClassVar[str]
    SPEC_NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_MIN_VERSION: ClassVar[int | None]
    _WRITERS: ClassVar[dict[int, Writer]]
    _READERS: ClassVar[dict[int, Reader]]

    def write(self, buf: bytearray, version: int) -> None:
        """Append this value encoded at ``version`` to ``buf``."""
        try:
            writer = self._WRITERS[version]
        except KeyError:
            raise UnsupportedVersionError(f"{self.NAME} has no version {version}") from None
        try:
            writer(buf, self)
        except EncodeError:
            raise
        except _ENCODE_FAILURES as exc:
            raise EncodeError(f"cannot encode {self.NAME} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        buf = bytearray()
        self.write(buf, version)
        return bytes(buf)

    @classmethod
    def reader(cls, version: int) -> Reader:
        """The generated reader of ``version`` — ``reader(data, pos) -> (value, end)`` — for loops that
        decode very many values of one type: on malformed input it raises :class:`DecodeError` or one of
        :data:`DECODE_FAILURES`, which :meth:`read` would convert."""
        try:
            return cls._READERS[version]
        except KeyError:
            raise UnsupportedVersionError(f"{cls.NAME} has no version {version}") from None

    @classmethod
    def read(cls, data: bytes, pos: int, version: int) -> tuple[Self, int]:
        """Decode one value at ``pos``; returns it and the position just after it."""
        try:
            reader = cls._READERS[version]
        except KeyError:
            raise UnsupportedVersionError(f"{cls.NAME} has no version {version}") from None
        try:
            obj, end = reader(data, pos)
        except DecodeError:
            raise
        except DECODE_FAILURES as exc:
            raise DecodeError(f"malformed {cls.NAME} v{version}: {exc}") from exc
        return obj, end

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode exactly one value spanning all of ``data`` (trailing bytes are an error)."""
        if not isinstance(data, bytes):
            data = bytes(data)
        obj, end = cls.read(data, 0, version)
        if end != len(data):
            raise DecodeError(f"{len(data) - end} trailing bytes after {cls.NAME} v{version}")
        return obj

    @classmethod
    def supports(cls, version: int) -> bool:
        return version in cls._READERS

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION


@mypyc_attr(allow_interpreted_subclasses=True)
class Message(Struct):
    """A request, response or header of the Kafka protocol."""

    __slots__ = ()

    API_KEY: ClassVar[int]
    DEPRECATED_VERSIONS: ClassVar[tuple[int, int] | None]
    LATEST_VERSION_UNSTABLE: ClassVar[bool]


@mypyc_attr(allow_interpreted_subclasses=True)
class Data(Struct):
    """A standalone data schema (``__consumer_offsets`` keys/values, the consumer embedded protocol).

    Stored forms are prefixed by an int16 version (for coordinator record keys, the record type).
    """

    __slots__ = ()

    def encode_versioned(self, version: int) -> bytes:
        """int16 version followed by the value encoded at that version."""
        buf = bytearray(I16.pack(version))
        self.write(buf, version)
        return bytes(buf)

    @classmethod
    def decode_versioned(
        cls, data: bytes | bytearray | memoryview, *, lenient: bool = False
    ) -> tuple[Self, int]:
        """Decode an int16-version-prefixed value.

        With ``lenient`` (the consumer embedded protocol's rule) a version above the highest known one is
        parsed with the highest known schema and trailing bytes are ignored, since newer versions may
        only append fields. Otherwise an unknown version or trailing bytes are a :class:`DecodeError`.
        """
        if not isinstance(data, bytes):
            data = bytes(data)
        if len(data) < 2:
            raise DecodeError(f"{cls.NAME}: missing int16 version prefix")
        (version,) = I16.unpack_from(data, 0)
        if version < 0:
            raise DecodeError(f"{cls.NAME}: negative version {version}")
        read_version = version
        if version > cls.MAX_VERSION:
            if not lenient:
                raise DecodeError(f"{cls.NAME}: unknown version {version}")
            read_version = cls.MAX_VERSION
        try:
            obj, end = cls.read(data, 2, read_version)
        except UnsupportedVersionError as exc:
            raise DecodeError(str(exc)) from exc
        if end != len(data) and not lenient:
            raise DecodeError(f"{len(data) - end} trailing bytes after {cls.NAME} v{version}")
        return obj, version
