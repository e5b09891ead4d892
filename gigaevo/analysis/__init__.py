"""gigaevo.analysis."""
