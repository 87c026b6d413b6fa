"""Grader-owned code that runs inside the grading sandbox (bound read-only at /grader)."""
