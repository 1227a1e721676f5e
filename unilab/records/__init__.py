"""What a run leaves: its event log, manifest, checkpoints (and the deployable policy read from
them), the progress line and the W&B mirror; rank 0's recorder writes them."""
