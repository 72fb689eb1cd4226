"""Consolidation: folding many memories into fewer summaries.

The pure engine lives here (selectors choose groups, ops turn a group into a summary,
the composite runs one after the other, the registry builds them from request config);
reading candidates and writing outcomes belong to the service and the repository.
"""
