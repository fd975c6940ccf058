"""Choosing the version of each API to speak with a broker, from the ranges its ApiVersions answer lists."""

from __future__ import annotations

from collections.abc import Mapping

from regroup.protocol.api_keys import API_INFO, ApiKey

__all__ = ["highest_common_versions"]


def highest_common_versions(
    ranges: Mapping[int, tuple[int, int]], caps: Mapping[ApiKey, int] | None = None
) -> dict[ApiKey, int]:
    """Per API a broker advertised as ``{api_key: (min, max)}``: the highest version both it and these
    codecs support (at most ``caps[key]`` where given). APIs with no version in common are left out, and
    API keys the codecs do not know are ignored, as Java's ApiVersions does."""
    out: dict[ApiKey, int] = {}
    for key, (lo, hi) in ranges.items():
        try:
            info = API_INFO[ApiKey(key)]
        except ValueError:
            continue
        top = min(hi, info.max_version)
        if caps is not None and info.key in caps:
            top = min(top, caps[info.key])
        if max(lo, info.min_version) <= top:
            out[info.key] = top
    return out
