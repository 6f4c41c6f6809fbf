"""What the public `http_resilience.testing` module is built from."""
