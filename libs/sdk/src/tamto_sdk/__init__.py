"""tamto_sdk."""
