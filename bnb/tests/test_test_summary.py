"""tools/test_summary.py: the suite's count covers the asked-for targets only, each shard of them, and names a
target that left no results."""

import pytest

import test_summary

CASES = {"pass": "", "fail": "<failure message='x'/>", "error": "<error message='x'/>", "skip": "<skipped/>"}


def write_xml(path, *kinds):
    path.parent.mkdir(parents=True, exist_ok=True)
    cases = "".join(f"<testcase name='t{i}'>{CASES[k]}</testcase>" for i, k in enumerate(kinds))
    path.write_text(f"<testsuites><testsuite name='s'>{cases}</testsuite></testsuites>")


def test_counts_named_targets_and_their_shards_only(tmp_path):
    write_xml(tmp_path / "bnb/tests/a_test/test.xml", "pass", "fail", "pass")
    write_xml(tmp_path / "bnb/tests/b_test/shard_1_of_2/test.xml", "skip", "error")
    write_xml(tmp_path / "bnb/tests/b_test/shard_2_of_2/test.xml", "pass")
    write_xml(tmp_path / "bnb/tests/deleted_test/test.xml", "fail", "fail")  # stale: no longer a target
    assert test_summary.count(tmp_path, ["//bnb/tests:a_test", "//bnb/tests:b_test"]) == (3, 2, 1, [])


def test_a_target_without_results_is_named(tmp_path):
    write_xml(tmp_path / "x/a_test/test.xml", "pass")
    assert test_summary.count(tmp_path, ["//x:a_test", "//x:never_ran_test"]) == (1, 0, 0, ["//x:never_ran_test"])


def test_a_bad_label_is_an_error_naming_it(tmp_path):
    with pytest.raises(SystemExit, match="bnb/tests/a_test"):
        test_summary.count(tmp_path, ["bnb/tests/a_test"])
