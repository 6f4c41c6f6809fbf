"""Helpers shared by the mediator tests of more than one folder."""
