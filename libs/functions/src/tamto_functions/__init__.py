"""Processing functions' schema: shared by the gateway (deploy, validate) and nodes (run)."""
