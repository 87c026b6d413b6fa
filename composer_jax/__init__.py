"""composer_jax: mid-training and agentic RL for a coding Mixture-of-Experts model."""
__version__ = "0.1.0"
