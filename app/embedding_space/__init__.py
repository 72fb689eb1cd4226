"""Which model the stored vectors come from: the check at start and the re-embedding."""
