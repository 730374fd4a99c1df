"""Embedders: the protocol, the registry of specs, and the implementations."""
