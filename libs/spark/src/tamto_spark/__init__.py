"""Tamto on Spark."""
