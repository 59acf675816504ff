"""Views of a profile document: top-down, bottom-up, flat, focus and diff; shared by the terminal, HTML
and exports (docs/views.md)."""
