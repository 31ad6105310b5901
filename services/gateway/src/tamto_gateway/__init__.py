"""tamto_gateway."""
