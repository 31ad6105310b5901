"""The gateway's MQTT 3.1.1 broker (docs/mqtt.md): its own port, the gateway's own
handlers, sessions and retained messages kept in etcd for every gateway."""
