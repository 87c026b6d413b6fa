"""A toy inventory: items, a store with stock rules, and reports."""
