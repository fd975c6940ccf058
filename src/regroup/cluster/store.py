"""The metadata store as the cluster uses it: etcd's data model (a revisioned key-value store with
transactions, leases and watches) in regroup's own small types, and the :class:`MetadataStore` protocol
that :class:`~regroup.cluster.etcd.EtcdStore` (a real etcd) and
:class:`~regroup.cluster.memory.MemoryStore` (in-process) implement with the same semantics:

- The store has one **revision**, raised by one for every transaction that changes something; every key
  remembers the revision that created it (``create_revision``), the one that last changed it
  (``mod_revision``) and how often it was written since its creation (``version``). A missing key has all
  three at 0.
- A **transaction** compares keys, then runs the success or the failure ops, atomically: all its writes
  share one revision, and watchers see them as one :class:`WatchBatch`. A value compare on a missing key
  is false whatever its operator.
- A **lease** lives ``ttl_s`` seconds past its grant or last keep-alive; when it expires or is revoked, the
  keys put with it are deleted, in one revision.
- A **watch** delivers every change under a prefix from a start revision on, one batch per revision,
  first from history, then as it happens; a start revision older than the last compaction raises
  :class:`WatchCompacted`, and the caller reads the prefix afresh.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

__all__ = [
    "Compare",
    "CompareOp",
    "CompareTarget",
    "Delete",
    "EventKind",
    "Get",
    "InvalidRequest",
    "KeyValue",
    "LeaseNotFound",
    "MetadataStore",
    "Op",
    "OpResult",
    "Put",
    "StoreError",
    "StoreUnavailable",
    "TxnResult",
    "WatchBatch",
    "WatchCompacted",
    "WatchEvent",
    "check_start_revision",
    "check_ttl",
    "prefix_end",
]


class StoreError(Exception):
    """Something the metadata store refused or could not do."""


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer in time (connection refused or lost, timeout, no
    etcd leader). Nothing can be assumed about a write that raised it; retry, re-reading first."""


class LeaseNotFound(StoreError):
    """The lease has expired or was revoked (or never existed): its keys are gone."""

    def __init__(self, lease_id: int) -> None:
        super().__init__(f"lease {lease_id:x} not found (expired or revoked)")
        self.lease_id = lease_id


class WatchCompacted(StoreError):
    """A watch's start revision lies before the store's compacted history: re-read, then watch from the
    read's revision + 1."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"history before revision {compact_revision} was compacted")
        self.compact_revision = compact_revision


class InvalidRequest(StoreError, ValueError):
    """The store rejected a malformed request: an empty key, one key written twice in a transaction, more
    operations than the store allows in one transaction, a non-positive TTL or start revision."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int
    """The id of the lease the key was put with, 0 for none."""


class CompareTarget(enum.Enum):
    CREATE_REVISION = "create_revision"
    MOD_REVISION = "mod_revision"
    VERSION = "version"
    VALUE = "value"


class CompareOp(enum.Enum):
    EQUAL = "=="
    NOT_EQUAL = "!="
    LESS = "<"
    GREATER = ">"


OpSymbol: TypeAlias = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction on one key: ``Compare.create_revision(key, "==", 0)`` (the key does
    not exist), ``Compare.mod_revision(key, "==", seen)`` (unchanged since read)."""

    key: bytes
    target: CompareTarget
    op: CompareOp
    operand: int | bytes

    def __post_init__(self) -> None:
        wants_bytes = self.target is CompareTarget.VALUE
        if isinstance(self.operand, bytes) != wants_bytes:
            kind = "bytes" if wants_bytes else "an int"
            raise TypeError(f"a {self.target.value} compare needs {kind}, got {self.operand!r}")

    @classmethod
    def create_revision(cls, key: bytes, op: OpSymbol, revision: int) -> Compare:
        return cls(key, CompareTarget.CREATE_REVISION, CompareOp(op), revision)

    @classmethod
    def mod_revision(cls, key: bytes, op: OpSymbol, revision: int) -> Compare:
        return cls(key, CompareTarget.MOD_REVISION, CompareOp(op), revision)

    @classmethod
    def version(cls, key: bytes, op: OpSymbol, version: int) -> Compare:
        return cls(key, CompareTarget.VERSION, CompareOp(op), version)

    @classmethod
    def value(cls, key: bytes, op: OpSymbol, value: bytes) -> Compare:
        return cls(key, CompareTarget.VALUE, CompareOp(op), value)

    def holds(self, kv: KeyValue | None) -> bool:
        """Whether the condition holds for ``kv``, the key's current state (None: missing)."""
        if kv is None and self.target is CompareTarget.VALUE:
            return False
        actual: int | bytes = 0 if kv is None else getattr(kv, self.target.value)
        order = _order(actual, self.operand)
        if self.op is CompareOp.EQUAL:
            return order == 0
        if self.op is CompareOp.NOT_EQUAL:
            return order != 0
        if self.op is CompareOp.LESS:
            return order < 0
        return order > 0


def _order(a: int | bytes, b: int | bytes) -> int:
    if isinstance(a, bytes) and isinstance(b, bytes):
        return (a > b) - (a < b)
    if isinstance(a, int) and isinstance(b, int):
        return (a > b) - (a < b)
    raise TypeError(f"cannot compare {a!r} with {b!r}")


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0
    """Attach the key to this lease (0: none; a put without a lease detaches the key from its lease)."""


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes
    prefix: bool = False
    """Delete every key starting with ``key``."""


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes
    prefix: bool = False
    """Read every key starting with ``key``."""


Op: TypeAlias = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class OpResult:
    """What one op of a transaction returned: the keys a :class:`Get` read (sorted by key), the number of
    keys a :class:`Delete` removed; empty for a :class:`Put`."""

    kvs: tuple[KeyValue, ...] = ()
    deleted: int = 0


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    """Whether every compare held (the success ops ran) or not (the failure ops ran)."""
    revision: int
    """The store's revision after the transaction: its writes' revision if it changed anything."""
    responses: tuple[OpResult, ...]
    """One per op of the branch that ran, in order."""


class EventKind(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    kv: KeyValue
    """For a PUT the key's new state; for a DELETE only ``key`` and ``mod_revision`` (the deletion's
    revision) are set, the other fields are empty, as etcd reports them."""


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """The changes one revision (one transaction, one lease expiry) made under a watched prefix."""

    revision: int
    events: tuple[WatchEvent, ...]


class MetadataStore(Protocol):
    """What the cluster needs from its metadata store. Every method may raise :class:`StoreUnavailable`."""

    async def range(self, key: bytes, prefix: bool = False) -> tuple[int, list[KeyValue]]:
        """The store's revision at the read, and the key (or every key under the prefix) sorted by key."""
        ...

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, atomically. A put with a lease that
        does not exist raises :class:`LeaseNotFound` and writes nothing."""
        ...

    async def grant(self, ttl_s: int) -> int:
        """A new lease living ``ttl_s`` seconds unless kept alive (etcd raises short TTLs to its minimum,
        2 s by default); its id."""
        ...

    async def keep_alive(self, lease_id: int) -> int:
        """Restart the lease's TTL; the TTL in seconds. :class:`LeaseNotFound` when it is gone."""
        ...

    async def revoke(self, lease_id: int) -> None:
        """End the lease now, deleting its keys in one revision. :class:`LeaseNotFound` when it is gone."""
        ...

    def watch(self, prefix: bytes, start_revision: int) -> AsyncGenerator[WatchBatch, None]:
        """Every change under ``prefix`` from ``start_revision`` (≥ 1) on, one batch per revision.

        Raises :class:`WatchCompacted` if that history is gone, :class:`StoreUnavailable` when the stream
        breaks (the caller resumes from the last revision it saw + 1). Ends when the store is closed.
        Close it with ``aclose()`` (``contextlib.aclosing``) when done.
        """
        ...

    async def close(self) -> None:
        """Release connections and end open watches; the store is unusable afterwards."""
        ...


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``range_end`` of a
    prefix); ``b"\\0"`` (every key) when there is none."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def check_ttl(ttl_s: int) -> None:
    if ttl_s < 1:
        raise InvalidRequest(f"a lease TTL must be at least 1 s, got {ttl_s}")


def check_start_revision(start_revision: int) -> None:
    if start_revision < 1:
        raise InvalidRequest(f"a watch starts at revision 1 or later, got {start_revision}")
