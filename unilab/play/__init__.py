"""`unilab play RUN_DIR`: a run's policy live in the browser (viser), driven by its user."""
