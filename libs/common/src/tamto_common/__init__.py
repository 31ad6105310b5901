"""Shared plumbing for Tamto services.

One concept per module: `config` (frozen, validated settings), `errors` (the
error hierarchy) and `grpc_errors` (its translation to gRPC), `logging`,
`telemetry` (traces and metrics), `membership` (etcd registration and lookup),
`bus` (NATS events), `channels` (gRPC channels to peers), `ring` (consistent
hashing), and `service` (the life of a service process).
"""
