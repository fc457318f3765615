"""The harness side of a run: what runs in each node, started, supervised and stopped."""
