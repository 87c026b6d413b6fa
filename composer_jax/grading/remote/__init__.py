"""Both sides of the grading boundary: serve.py (in the sandbox), judge.py (on the host), and the codec between them; stdlib only."""
