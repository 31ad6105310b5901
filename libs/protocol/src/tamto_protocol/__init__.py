"""Tamto wire contracts.

- `tamto_protocol.v1`: code generated from `proto/tamto/v1` (never edited by hand).
- `tamto_protocol.batch`: the Arrow schema every message batch uses, and its codec.
- `tamto_protocol.partitioning`: the key hash shared by the SDK and the servers.
"""
