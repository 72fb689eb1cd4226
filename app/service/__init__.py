"""Service endpoints: liveness, readiness, metrics."""
