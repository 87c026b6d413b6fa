"""Small text utilities: tokenising, statistics and formatting."""
