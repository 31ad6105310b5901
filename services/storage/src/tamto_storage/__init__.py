"""tamto_storage."""
