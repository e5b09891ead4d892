"""gigaevo.scratchpad."""
