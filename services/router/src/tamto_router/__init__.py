"""tamto_router."""
