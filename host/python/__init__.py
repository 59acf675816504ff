"""CPython call paths: interpreter discovery, per-version layouts, thread states, code-object
symbolization with line tables, and the merge of Python frames with native frames."""
