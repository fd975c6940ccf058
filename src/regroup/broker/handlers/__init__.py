"""The request handler registry: one module per API, each registering the versions it serves.

A handler module defines ``register(registry)`` and calls :meth:`HandlerRegistry.register` with
``(api_key, min_version, max_version, handler)``. :func:`default_registry` imports every module of this
package and calls its ``register``; registering an API twice is a startup error. ApiVersions advertises
exactly what is registered, so a version works if and only if it is advertised. A module serving an API
that a broker setting can switch off also defines ``served(config) -> bool`` (the ConsumerGroup* APIs and
``group.coordinator.rebalance.protocols``): when it answers False the module is not registered.

A handler takes ``(ctx, request)`` and returns the response, ``None`` for no response (acks=0 produce), or
an awaitable of either. Handlers that never wait should return the response directly: the server then
answers without creating a task. What a handler may use of the broker (its logs, settings, group
coordinator, ...) is :class:`~regroup.broker.context.BrokerPort`, reached as ``ctx.broker``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from regroup.broker.config import BrokerConfig
from regroup.broker.context import RequestContext
from regroup.protocol.api_keys import API_INFO, ApiKey, request_class
from regroup.protocol.message import Message, Reader

__all__ = [
    "DuplicateHandlerError",
    "Handler",
    "HandlerRegistry",
    "HandlerResult",
    "HandlerSpec",
    "default_registry",
]

HandlerResult = Message | None | Awaitable[Message | None]
Handler = Callable[[RequestContext, Any], HandlerResult]
M = TypeVar("M", bound=Message)


class DuplicateHandlerError(RuntimeError):
    """Two modules registered the same API."""


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: ApiKey
    min_version: int
    max_version: int
    handler: Handler
    request_class: type[Message]
    module: str
    readers: Mapping[int, Reader] = field(default_factory=dict)
    """The request's generated reader per served version (a missing version is not served)."""


class HandlerRegistry:
    """API key → handler and the version range it serves."""

    def __init__(self) -> None:
        self._specs: dict[int, HandlerSpec] = {}

    def register(
        self,
        api_key: ApiKey,
        min_version: int,
        max_version: int,
        handler: Callable[[RequestContext, M], HandlerResult],
    ) -> None:
        info = API_INFO[api_key]
        if not info.min_version <= min_version <= max_version <= info.max_version:
            raise ValueError(
                f"{info.name} versions {min_version}-{max_version} are outside the codec's "
                f"{info.min_version}-{info.max_version}"
            )
        module = getattr(handler, "__module__", "?")
        existing = self._specs.get(int(api_key))
        if existing is not None:
            raise DuplicateHandlerError(
                f"{info.name} is registered twice: by {existing.module} and by {module}"
            )
        cls = request_class(api_key)
        readers = {v: cls.reader(v) for v in range(min_version, max_version + 1)}
        self._specs[int(api_key)] = HandlerSpec(
            api_key, min_version, max_version, handler, cls, module, readers
        )

    def get(self, api_key: int) -> HandlerSpec | None:
        return self._specs.get(api_key)

    def ranges(self) -> list[tuple[int, int, int]]:
        """``(api_key, min_version, max_version)`` of every registered API, by key."""
        return [(k, s.min_version, s.max_version) for k, s in sorted(self._specs.items())]

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._specs


def default_registry(config: BrokerConfig | None = None) -> HandlerRegistry:
    """A registry filled by every handler module of this package (with ``config``: those whose ``served``
    hook, if any, accepts it)."""
    registry = HandlerRegistry()
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        served = getattr(module, "served", None)
        if config is not None and served is not None and not served(config):
            continue
        register = getattr(module, "register", None)
        if register is None:
            raise RuntimeError(f"handler module {module.__name__} has no register(registry) function")
        register(registry)
    return registry
