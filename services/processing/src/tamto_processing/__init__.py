"""Tamto processing: functions that consume streams and publish results."""
