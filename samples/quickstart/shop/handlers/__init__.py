"""The handlers, one class per request type; `register_from(shop)` finds them here."""
