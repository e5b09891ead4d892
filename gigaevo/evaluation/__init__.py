"""gigaevo.evaluation."""
