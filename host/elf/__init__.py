"""The one ELF reader (reader.py) and what is built on it: symbol tables by address (symbols.py) and an
interpreter image read by name (image.py)."""
