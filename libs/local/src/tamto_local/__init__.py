"""Run Tamto on one machine: etcd and nats-server from their PyPI wheels, and
the services, each as its own supervised process. Used by the `tamto up`
launcher and by the test harness."""
