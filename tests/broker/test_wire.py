"""The connection layer's response frames equal the codec's, byte for byte, in both header versions."""

from __future__ import annotations

from regroup.broker.wire import encode_response_chunks
from regroup.protocol.api_keys import API_INFO, ApiKey, response_class
from regroup.protocol.framing import encode_response, response_header_version
from regroup.protocol.primitives import EncodeError


def test_every_response_frame_equals_the_codecs() -> None:
    header_versions: set[int] = set()
    for key in ApiKey:
        info = API_INFO[key]
        message = response_class(key)()
        for version in range(info.min_version, info.max_version + 1):
            try:
                expected = encode_response(message, version, 2_000_000_007)
            except EncodeError:
                continue  # a default value some version cannot carry
            assert b"".join(encode_response_chunks(message, version, 2_000_000_007)) == expected
            header_versions.add(response_header_version(key, version))
    assert header_versions == {0, 1}
