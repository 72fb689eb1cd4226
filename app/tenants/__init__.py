"""Tenants and their API keys: who a caller is."""
