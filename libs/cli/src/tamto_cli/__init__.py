"""The `tamto` command: run a local system (`up`), inspect it (`status`), and
publish and consume from the terminal (`pub`, `sub`)."""
