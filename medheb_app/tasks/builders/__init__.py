"""Task builders: generic task shapes (generic.py) and one module per kind of source."""
