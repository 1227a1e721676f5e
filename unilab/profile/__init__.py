"""`unilab profile`: interleaved arms of real `unilab apply` runs, per-phase attribution of the
collector/learner loop over a measured window, a host-sync inventory found by instrumentation,
and a go/no-go line for an update-state graph of the collector."""
