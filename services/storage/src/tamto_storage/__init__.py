"""tamto_storage: the durable log of each partition (WAL, reads by offset, cursors)."""
