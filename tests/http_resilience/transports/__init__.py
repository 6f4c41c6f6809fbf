"""Tests of the transports, the clients and the middlewares."""
