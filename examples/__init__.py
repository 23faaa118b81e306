"""Workers built on shared.worker's public API alone, as a user builds
their own (docs/your-own-worker.md): not deployed, not in the slug."""
