"""Generated request/response codecs, one module per API (see ``regroup.protocol.api_keys``)."""
