"""What users plug in: resilient transports, clients, factory, correlation, ASGI."""
