"""gigaevo.memory."""
