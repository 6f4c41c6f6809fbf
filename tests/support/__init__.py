"""Test infrastructure shared across the test packages."""
