"""Packaging for Footprint for TensorBoard.

The tab's ES modules live in the top-level ``frontend/`` folder and ship inside the wheel as
the ``tb_footprint_plugin.frontend`` package, so the plugin serves them from the installed
package with no network fetch.
"""
import os

from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
version = {}
with open(os.path.join(here, "tb_footprint_plugin", "version.py")) as f:
    exec(f.read(), version)
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="tb-footprint-plugin",
    version=version["__version__"],
    description="Footprint for TensorBoard: see what fills a TensorBoard logdir and cut it safely",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=[
        "tb_footprint_plugin",
        "tb_footprint_plugin.storage",
        "tb_footprint_plugin.scan",
        "tb_footprint_plugin.plan",
        "tb_footprint_plugin.formats",
        "tb_footprint_plugin.transforms",
        "tb_footprint_plugin.verify",
        "tb_footprint_plugin.engine",
        "tb_footprint_plugin.api",
        "tb_footprint_plugin.plugin",
        "tb_footprint_plugin.synth",
        "tb_footprint_plugin.integrations",
        "tb_footprint_plugin.frontend",
    ],
    package_dir={"tb_footprint_plugin.frontend": "frontend"},
    package_data={"tb_footprint_plugin.frontend": ["*.js", "*.css", "views/*.js",
                                                   "vendor/*.js", "vendor/*.css", "vendor/*.LICENSE"]},
    install_requires=[
        "tensorboard>=2.12",
        "werkzeug>=2.0",
        "protobuf>=3.20",
        "setuptools",
        # C-accelerated CRC32C: TensorBoard's own is a pure-Python loop (~12 MB/s).
        "google-crc32c>=1.5",
        # Progress bars for batch reductions over many runs.
        "tqdm>=4.60",
        # Streaming JSON parser: PyTorch traces reach several GB and are never loaded whole.
        "ijson>=3.1",
        # TOML policy files: the standard library's tomllib from 3.11, the same parser before.
        "tomli>=1.1; python_version < '3.11'",
        # The compressed vault's zstd: the standard library's compression.zstd from 3.14.
        "zstandard>=0.22; python_version < '3.14'",
    ],
    extras_require={
        # Remote logdirs, one extra per store. Each brings the fsspec backend the tool uses;
        # s3 also brings boto3 because TensorBoard reads s3:// through boto3 (and verification
        # reads through TensorBoard). s3fs pins aiobotocore, which pins botocore: pip then picks
        # the boto3 that matches (no pin of our own to fight it).
        "s3": ["s3fs>=2024.12", "boto3>=1.34"],
        "gcs": ["gcsfs>=2024.6"],
        "azure": ["adlfs>=2024.7"],
        "test": [
            "pytest>=7",
            # The suite runs on two workers: most of a test's wall time is a TensorBoard process,
            # a store server or a browser starting, which another test's work can overlap.
            "pytest-xdist>=3.5",
            "playwright>=1.40",
            "tensorboard-plugin-profile>=2.15",
            "s3fs>=2024.12",
            "boto3>=1.34",
            "gcsfs>=2024.6",
            "adlfs>=2024.7",
            # Real store servers on loopback: moto's standalone S3 server and a GCS emulator
            # (Azurite, the Azure one, comes from npm in scripts/test.sh).
            "moto[server]>=5.0",
            "gcp-storage-emulator>=2024.8",
            # The end-of-training integrations are tested with the real frameworks on CPU. torch
            # is pinned to the CPU build this machine keeps on disk (any other release resolves to
            # a CUDA build of several GB); lightning and transformers then take it as it is.
            'torch==2.13.0; python_version == "3.11" and platform_machine == "x86_64"',
            "lightning>=2.0",
            "transformers>=4.40",
            "accelerate>=1.1",  # transformers' Trainer needs it with PyTorch
            "pyyaml>=5.4",  # the Kubernetes launcher (examples/k8s-indexed-job.yaml) is read by its test
            # Keras is tested on TensorFlow, which scripts/test.sh installs *beside* this
            # environment (.venv/tensorflow): installed here, it would make TensorBoard's
            # readers import TensorFlow in every other test.
        ],
    },
    entry_points={
        "tensorboard_plugins": [
            "footprint = tb_footprint_plugin.loader:FootprintLoader",
        ],
        "console_scripts": [
            "tb-footprint = tb_footprint_plugin.cli:console",
        ],
    },
    classifiers=[
        "Development Status :: 4 - Beta",
        "Environment :: Plugins",
        "Framework :: TensorBoard",
        "Intended Audience :: Science/Research",
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: System :: Archiving",
    ],
    project_urls={
        "Documentation": "https://github.com/tb-footprint/tb-footprint-plugin#readme",
        "Fail-Safe guide": "https://github.com/tb-footprint/tb-footprint-plugin/blob/main/docs/FAILSAFE.md",
    },
)
