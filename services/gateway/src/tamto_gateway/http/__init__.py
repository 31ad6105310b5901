"""The gateway's HTTP/JSON API (docs/http.md): the same operations, policy and audit as
its gRPC API, for applications without a Tamto SDK. Served by uvicorn inside the
gateway's own event loop, on a port of its own (`--http-port`)."""
