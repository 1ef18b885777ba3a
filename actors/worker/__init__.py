"""The worker: the agent loop as an actor, hooks and the interceptor."""
