"""One package per algorithm (its `AlgoDef` in `__init__`, its learner beside it) and the registry
that lists them (`unilab.algos.registry`); pieces the replay learners share live in
`unilab.algos.common` and `unilab.learn`."""
