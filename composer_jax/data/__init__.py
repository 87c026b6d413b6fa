"""Code data: corpus -> tokenizer -> tensorstore token store -> grain loader of packed rows.

Build a data directory with `python -m composer_jax.data.build --config configs/tiny.py
--workdir DIR`; load it with `composer_jax.data.pipeline.dataset_from_config(config, DIR)`.
"""
