"""A feature package for register_from: handlers spread over subpackages."""
