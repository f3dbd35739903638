"""Forwards rules_cc's names to Bazel 4's native C++ rules, so @bazel_tools needs no download."""

def cc_library(**kw):
    native.cc_library(**kw)

def cc_binary(**kw):
    native.cc_binary(**kw)

def cc_test(**kw):
    native.cc_test(**kw)

def cc_import(**kw):
    native.cc_import(**kw)

def cc_toolchain(**kw):
    native.cc_toolchain(**kw)

def cc_toolchain_suite(**kw):
    native.cc_toolchain_suite(**kw)
