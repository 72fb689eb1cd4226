"""Sessions: append-only turn logs, the context an agent puts in its prompt, and the
rolling summary maintained in the background (../shared/design.md section 4)."""
