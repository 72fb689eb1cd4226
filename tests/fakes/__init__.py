"""Real fake implementations tests share (servers, clients)."""
