"""gigaevo.pipeline."""
