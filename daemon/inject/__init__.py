"""Attach-time injection: loading deepctx's CUPTI agent into a running process through ptrace."""
