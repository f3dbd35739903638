"""The companion `bitsandbytes` (bnb/python/bitsandbytes_shim): every name of its table resolves to bnb's own
object; what bnb lacks raises an error naming the feature, never an AttributeError; its version and distribution
metadata; it refuses to load beside another bitsandbytes; and the names transformers, peft and accelerate use of
bitsandbytes, scanned from their installed source, are all in its table."""

import ast
import importlib
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import bitsandbytes
import bnb
from bitsandbytes import _companion


def target(spec: str):
    module, _, attribute = spec.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


@pytest.mark.parametrize("name", sorted(_companion.TOP_LEVEL))
def test_each_top_level_name_is_bnbs_own_object(name):
    got = getattr(bitsandbytes, name)
    assert got is target(_companion.TOP_LEVEL[name])
    if name != "optim":
        assert got is target(_companion.TOP_LEVEL[name].replace("bitsandbytes", "bnb"))


@pytest.mark.parametrize("name", sorted(_companion.SUBMODULES))
def test_each_submodule_imports_as_bnbs_module_itself(name):
    module = importlib.import_module(f"bitsandbytes.{name}")
    assert module is importlib.import_module(_companion.SUBMODULES[name])
    assert sys.modules[f"bitsandbytes.{name}"] is module


def test_modules_below_a_forwarded_one_are_bnbs_not_a_second_copy():
    import bitsandbytes.nn.modules8bit as m8
    import bitsandbytes.optim.adamw as adamw
    import bnb.nn.modules8bit
    import bnb.optim.adamw
    assert m8 is bnb.nn.modules8bit and adamw is bnb.optim.adamw
    assert bitsandbytes.nn.Linear8bitLt is m8.Linear8bitLt is bnb.nn.Linear8bitLt
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("bitsandbytes.nn.no_such_module")


@pytest.mark.parametrize("dotted", sorted(_companion.USED_BY_HF))
def test_each_name_the_hugging_face_stack_uses_resolves(dotted):
    if dotted == "__version__":
        assert bitsandbytes.__version__
        return
    got = _companion.resolve(dotted)
    bnb_side = bnb
    for part in dotted.split("."):
        bnb_side = getattr(bnb_side, part)
    if dotted == "optim":  # bitsandbytes.optim is the module of rebadged optimizers, with bnb.optim's names
        assert got is importlib.import_module("bitsandbytes._optim") and got.__all__ == bnb_side.__all__
    elif dotted.startswith("optim.") and isinstance(got, type) and got is not bnb_side:
        # bitsandbytes.optim's optimizers are bnb.optim's, rebadged (_optim.py): same behaviour, bitsandbytes' name.
        assert issubclass(got, bnb_side) and got.__mro__[1] is bnb_side and got.__module__ == "bitsandbytes.optim"
        assert "bitsandbytes" in str(got)  # transformers' Trainer tests str(optimizer_cls) for it
    else:
        assert got is bnb_side or got == bnb_side, dotted


def test_a_rebadged_optimizer_is_bnbs_in_behaviour():
    w = torch.nn.Parameter(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))
    v = torch.nn.Parameter(w.detach().clone())
    ours, theirs = bitsandbytes.optim.AdamW8bit([w], lr=0.1), bnb.optim.AdamW8bit([v], lr=0.1)
    for opt, p in ((ours, w), (theirs, v)):
        p.grad = torch.ones_like(p)
        opt.step()
    assert torch.equal(w, v) and not torch.equal(w, v.detach() * 0)
    assert bitsandbytes.optim.GlobalOptimManager is bnb.optim.GlobalOptimManager


@pytest.mark.parametrize("name", sorted(_companion.MISSING_SUBMODULES))
def test_a_missing_module_raises_an_error_naming_the_feature_on_import_and_on_attribute(name):
    with pytest.raises(NotImplementedError) as imported:
        importlib.import_module(f"bitsandbytes.{name}")
    assert isinstance(imported.value, ImportError)  # code probing an optional import goes on without it
    assert f"bitsandbytes.{name}" in str(imported.value)
    assert _companion.MISSING_SUBMODULES[name] in str(imported.value)
    with pytest.raises(_companion.MissingFeatureError, match=re.escape(f"bitsandbytes.{name} is not in bnb")):
        getattr(bitsandbytes, name)


def test_missing_functions_and_values_raise_not_implemented_naming_the_feature():
    from bnb import _missing
    assert _missing.table(), "the table of missing names is empty"
    for module, name, feature in _missing.table():
        public = importlib.import_module(module.replace("bnb.", "bitsandbytes.", 1))
        with pytest.raises(NotImplementedError) as raised:
            value = getattr(public, name)  # a value raises here; a function or class when called
            value.get_instance() if isinstance(value, type) else value()
        assert f"{module}.{name}" in str(raised.value) and feature in str(raised.value)
    with pytest.raises(AttributeError):  # a name bitsandbytes does not have either stays an AttributeError
        bitsandbytes.functional.no_such_function


def test_unknown_top_level_names_are_attribute_errors():
    assert not hasattr(bitsandbytes, "no_such_name")
    assert hasattr(bitsandbytes, "supported_torch_devices") and "cpu" in bitsandbytes.supported_torch_devices


def test_version_says_bitsandbytes_api_and_bnb_and_the_distribution_is_found():
    want = f"0.50.0+bnb.{bnb.__version__}"
    assert bitsandbytes.__version__ == want
    assert importlib.metadata.version("bitsandbytes") == want
    # transformers requires bitsandbytes >= 0.46.1: a PEP 440 comparison ignores the local part
    release = tuple(int(x) for x in want.split("+")[0].split("."))
    assert release >= (0, 46, 1)
    dist = importlib.metadata.distribution("bitsandbytes")
    assert "bnb" in dist.metadata["Summary"] and not dist.requires


def run_import(tmp_path, *extra):
    """`import bitsandbytes` in a fresh process with extra directories on sys.path after the companion's."""
    companion = os.path.dirname(bitsandbytes.__path__[0])
    path = [companion, *map(str, extra), *sys.path]
    return subprocess.run([sys.executable, "-c", "import bitsandbytes; print(bitsandbytes.__version__)"],
                          capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ,
                                                                                  PYTHONPATH=os.pathsep.join(path)))


def test_imports_where_it_is_the_only_bitsandbytes(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    run = run_import(tmp_path, tmp_path / "elsewhere")
    assert run.returncode == 0 and "+bnb" in run.stdout, run.stderr


@pytest.mark.parametrize("kind", ["package", "dist-info"])
def test_refuses_to_load_beside_a_real_bitsandbytes(tmp_path, kind):
    real = tmp_path / "site"
    if kind == "package":
        (real / "bitsandbytes").mkdir(parents=True)
        (real / "bitsandbytes" / "__init__.py").write_text("__version__ = '0.49.0'\n")
        where = str(real / "bitsandbytes")
    else:
        (real / "bitsandbytes-0.49.0.dist-info").mkdir(parents=True)
        (real / "bitsandbytes-0.49.0.dist-info" / "METADATA").write_text("Name: bitsandbytes\nVersion: 0.49.0\n\n")
        where = "bitsandbytes 0.49.0"
    run = run_import(tmp_path, real)
    assert run.returncode != 0 and "ShadowingError" in run.stderr, (run.stdout, run.stderr)
    assert where in run.stderr and "refuses to load" in run.stderr


# --- the names transformers, peft and accelerate use --------------------------------------------------------------

def _uses(source: str):
    """bitsandbytes.<dotted> names a file reaches: through `import bitsandbytes [as x]`, `import bitsandbytes.m as x`,
    `from bitsandbytes[.m] import n`, attribute chains on those names, and getattr/hasattr(x, "name")."""
    tree = ast.parse(source)
    roots, found = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "bitsandbytes" or a.name.startswith("bitsandbytes."):
                    rest = a.name[len("bitsandbytes."):] if "." in a.name else ""
                    roots[a.asname or "bitsandbytes"] = rest if a.asname else ""
                    if rest:
                        found.add(rest)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "bitsandbytes" or node.module.startswith("bitsandbytes.")):
            prefix = node.module[len("bitsandbytes."):] if "." in node.module else ""
            for a in node.names:
                found.add(f"{prefix}.{a.name}" if prefix else a.name)
    if not roots:
        return found

    def chain(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in roots:
            return ".".join(filter(None, [roots[node.id], *reversed(parts)]))
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # every prefix of a chain too: bnb.nn of bnb.nn.Linear4bit
            dotted = chain(node)
            if dotted:
                found.add(dotted)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            base = node.args[0]
            prefix = chain(base) if isinstance(base, ast.Attribute) else (
                roots.get(base.id) if isinstance(base, ast.Name) and base.id in roots else None)
            if prefix is not None:
                found.add(f"{prefix}.{node.args[1].value}" if prefix else node.args[1].value)
    return found


def _hf_uses():
    uses = {}
    for library in ("transformers", "peft", "accelerate"):
        spec = importlib.util.find_spec(library)
        if spec is None:
            pytest.skip(f"{library} is not installed here (tools/requirements-hf.txt): nothing to scan")
        for path in pathlib.Path(spec.submodule_search_locations[0]).rglob("*.py"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if "bitsandbytes" not in text:
                continue
            for name in _uses(text):
                uses.setdefault(name, []).append(f"{library}/{path.name}")
    return uses


def _covered(name: str) -> bool:
    """In the table: a name used, each prefix of a longer one used, or below a module the companion forwards whole
    (the rest of it is checked by resolving)."""
    return name in _companion.USED_BY_HF or any(u.startswith(name + ".") for u in _companion.USED_BY_HF)


def test_the_scan_finds_what_it_should():
    source = ("import bitsandbytes as bnb\nimport bitsandbytes.optim as bo\nfrom bitsandbytes.nn import Linear4bit\n"
              "x = bnb.nn.Params4bit.from_prequantized(1)\ny = bo.Lion32bit\nz = getattr(bnb, 'features', 0)\n"
              "w = hasattr(bnb.functional, 'int8_vectorwise_dequant')\n'''bnb.in_a_docstring'''\n")
    assert _uses(source) == {"optim", "nn.Linear4bit", "nn.Params4bit.from_prequantized", "nn.Params4bit", "nn",
                             "optim.Lion32bit", "features", "functional", "functional.int8_vectorwise_dequant"}


def test_every_name_the_hugging_face_stack_uses_is_in_the_table_and_resolves():
    uses = _hf_uses()
    assert "nn.Linear4bit" in uses and "optim.AdamW" in uses, sorted(uses)  # the scan found the known ones
    missing = {name: where for name, where in uses.items() if not _covered(name)}
    assert not missing, f"used by the Hugging Face stack but not in _companion.USED_BY_HF: {missing}"
    for name in uses:
        _companion.resolve(name)
