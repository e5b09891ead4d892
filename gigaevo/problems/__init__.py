"""gigaevo.problems."""
