"""`unilab eval`: a run's policy played deterministically for a fixed number of episodes."""
