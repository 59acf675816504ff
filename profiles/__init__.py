"""The profile document, the layer below the daemon and the CLI (they import it; it imports neither):
its metrics, the JSON document (docs/formats.md), its tree, summaries, the fleet schema, the analyzer and
the pprof writer."""
