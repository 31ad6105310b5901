"""Generated from proto/tamto/v1. Do not edit."""
