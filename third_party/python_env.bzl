"""Finds the project's Python interpreter for repository rules.

BNB_PYTHON (an absolute path) wins; otherwise the virtual environment that tools/setup.sh makes, .venv at the
repository root.
"""

def find_python(ctx):
    path = ctx.os.environ.get("BNB_PYTHON", "")
    if not path:
        root = ctx.path(Label("//:WORKSPACE")).dirname
        path = str(root) + "/.venv/bin/python"
    if not ctx.path(path).exists:
        fail("bnb: Python interpreter %s not found. Run tools/setup.sh (it makes .venv), or set BNB_PYTHON." % path)
    return path

def python_query(ctx, python, code, what):
    res = ctx.execute([python, "-c", code])
    if res.return_code != 0:
        fail("bnb: %s failed with %s: %s" % (what, python, res.stderr.strip()))
    return res.stdout.strip()
