"""DescribeConfigs (key 32) v0-4 for topics and this broker.

A topic setting's source is DYNAMIC_TOPIC_CONFIG when the topic overrides it, STATIC_BROKER_CONFIG when a
broker setting it derives from was configured, DEFAULT_CONFIG otherwise; its synonyms list those sources,
most specific first, as Kafka does. Broker settings are static (regroup has no AlterConfigs), hence
read-only. Documentation is included from v3 when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from regroup.broker.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    broker_synonyms,
    render,
)
from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._common import topic_name_error
from regroup.log import TopicInfo
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

__all__ = ["ConfigEntry", "broker_config_entries", "register", "topic_config_entries"]

RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
RESOURCE_BROKER_LOGGER: Final = 8
_RESOURCE_NAMES: Final = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    type: ConfigType
    doc: str
    synonyms: list[tuple[str, str | None, ConfigSource]] = field(default_factory=list)


def _broker_sources(broker: BrokerPort, names: tuple[str, ...]) -> list[tuple[str, str | None, ConfigSource]]:
    """Synonym entries of broker settings: configured ones (finest unit first), then the default one."""
    config = broker.config
    out: list[tuple[str, str | None, ConfigSource]] = []
    for name in names:
        if name in BROKER_CONFIGS and not config.is_default(name):
            out.append((name, render(config.get(name)), ConfigSource.STATIC_BROKER_CONFIG))
    for name in names:
        spec = BROKER_CONFIGS.get(name)
        if spec is not None and spec.default is not None:
            out.append((name, render(spec.default), ConfigSource.DEFAULT_CONFIG))
            break
    return out


def topic_config_entries(
    broker: BrokerPort, info: TopicInfo, *, overrides: dict[str, str] | None = None
) -> list[ConfigEntry]:
    """Every topic setting of ``info`` with its effective value and source."""
    topic_overrides = dict(info.overrides) if overrides is None else overrides
    effective = info.effective_configs()
    entries: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIGS):
        meta = TOPIC_CONFIGS[name]
        synonyms = _broker_sources(broker, meta.broker_synonyms)
        if name in topic_overrides:
            synonyms.insert(0, (name, topic_overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, effective.get(name), source, False, meta.type, meta.doc, synonyms))
    return entries


def broker_config_entries(broker: BrokerPort) -> list[ConfigEntry]:
    config = broker.config
    entries: list[ConfigEntry] = []
    for name in sorted(BROKER_CONFIGS):
        spec = BROKER_CONFIGS[name]
        synonyms = _broker_sources(broker, broker_synonyms(name))
        value = None if spec.sensitive else render(config.get(name))
        entries.append(ConfigEntry(name, value, config.source(name), True, spec.type, spec.doc, synonyms))
    return entries


def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    broker = ctx.broker
    version = ctx.api_version
    results: list[DescribeConfigsResult] = []
    for resource in request.resources:
        error, message, entries = _describe(broker, resource.resource_type, resource.resource_name)
        if entries is not None and resource.configuration_keys is not None:
            wanted = set(resource.configuration_keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(
            DescribeConfigsResult(
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[
                    DescribeConfigsResourceResult(
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        is_default=version == 0 and e.source == ConfigSource.DEFAULT_CONFIG,
                        config_source=e.source if version >= 1 else -1,
                        is_sensitive=False,
                        synonyms=(
                            [DescribeConfigsSynonym(n, v, s) for n, v, s in e.synonyms]
                            if request.include_synonyms
                            else []
                        ),
                        config_type=e.type,
                        documentation=e.doc if request.include_documentation else None,
                    )
                    for e in entries or []
                ],
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _describe(
    broker: BrokerPort, resource_type: int, name: str
) -> tuple[ErrorCode, str | None, list[ConfigEntry] | None]:
    if resource_type == RESOURCE_TOPIC:
        problem = topic_name_error(name)
        if problem is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem, None
        info = broker.logs.topic(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.", None
        return ErrorCode.NONE, None, topic_config_entries(broker, info)
    if resource_type == RESOURCE_BROKER:
        if name == "":
            return ErrorCode.NONE, None, []  # no dynamic cluster-wide defaults
        try:
            node_id = int(name)
        except ValueError:
            return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}", None
        if node_id != broker.node_id:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
                None,
            )
        return ErrorCode.NONE, None, broker_config_entries(broker)
    kind = _RESOURCE_NAMES.get(resource_type, str(resource_type))
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}", None


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DESCRIBE_CONFIGS, 0, 4, handle)
