"""bnb's version: the one place it is written. The Python package, the wheel name and the C++ code read it."""

BNB_VERSION = "0.1.0"

# The bitsandbytes release whose API bnb mirrors. The companion distribution `bitsandbytes` (bnb/python/
# bitsandbytes_shim) is versioned BITSANDBYTES_API_VERSION+bnb.BNB_VERSION: version checks against bitsandbytes pass,
# and the local part says it is bnb.
BITSANDBYTES_API_VERSION = "0.50.0"
