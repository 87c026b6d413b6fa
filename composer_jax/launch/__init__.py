"""The pipeline's stages, run locally or described as cloud jobs (XManager)."""
