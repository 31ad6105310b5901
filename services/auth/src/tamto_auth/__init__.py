"""tamto_auth."""
