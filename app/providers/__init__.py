"""Providers: embedders, the LLM client, and deterministic fakes for tests."""
