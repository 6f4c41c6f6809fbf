"""Helpers shared by the mediator_resilience tests and the integration tests."""
