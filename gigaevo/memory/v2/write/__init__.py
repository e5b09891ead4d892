"""The write side of memory v2: the librarian, its agents, the write ledger, the audit."""
