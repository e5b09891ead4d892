"""gigaevo.llm."""
