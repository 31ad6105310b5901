"""tamto_testing."""
