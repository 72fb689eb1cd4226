"""Memories: store, read, list, change and delete the facts agents remember."""
