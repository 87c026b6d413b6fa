"""2-D geometry helpers: vectors and polygons."""
