"""Service endpoints (liveness, readiness, metrics) and the layers every request passes:
metrics, request ids."""
