"""The read side of memory v2: decisions, outcomes, leases, trials, retirement, events."""
