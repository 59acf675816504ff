"""Host facts that the daemon and the CLI both need: the layer below both (they import it; it imports
neither)."""
