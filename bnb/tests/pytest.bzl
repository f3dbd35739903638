"""bnb_py_test: one pytest file as one Bazel test, importing the built `bnb` package."""

def bnb_py_test(name, src, deps = [], data = [], **kwargs):
    native.py_test(
        name = name,
        srcs = ["pytest_main.py", src],
        main = "pytest_main.py",
        args = ["$(location %s)" % src],
        data = [src, "helpers.py"] + data,
        deps = ["//bnb/python:bnb"] + deps,
        python_version = "PY3",
        **kwargs
    )
