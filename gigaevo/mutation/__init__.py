"""gigaevo.mutation."""
