"""bnb's version: the one place it is written. The Python package, the wheel name and the C++ code read it."""

BNB_VERSION = "0.1.0"
