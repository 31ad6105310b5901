"""tamto_cli."""
