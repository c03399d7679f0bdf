"""ApiVersions (apis/api_versions.py): what is advertised is exactly what is registered."""

from __future__ import annotations

import pytest

from gregor.apis import REGISTRY
from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@pytest.mark.parametrize("version", range(5))
def test_lists_exactly_the_registry(in_process_broker, version):
    resp = in_process_broker.call(ApiKey.API_VERSIONS, version, {"client_software_name": "t",
                                                                 "client_software_version": "1"})
    assert resp.error_code == ErrorCode.none
    advertised = [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys]
    assert advertised == sorted((r.api_key, r.min_version, r.max_version) for r in REGISTRY.values()
                                if r.enabled(in_process_broker.broker.config))



def test_every_registered_key_is_a_kafka_api_with_a_schema_for_each_version():
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.JOIN_GROUP} <= set(REGISTRY)
    for key, reg in REGISTRY.items():
        assert ApiKey(key).value == reg.api_key and reg.min_version <= reg.max_version
        for v in (reg.min_version, reg.max_version):
            assert codec.request_schema(key, v) is not None and codec.response_schema(key, v) is not None
