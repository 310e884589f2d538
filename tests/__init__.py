"""Handraise test suite."""
