"""A feature package with validators beside its handler, for `register_from`."""
