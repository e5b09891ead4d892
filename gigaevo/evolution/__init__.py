"""gigaevo.evolution."""
