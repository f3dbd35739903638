"""Adds up the JUnit XML files Bazel left for the given test targets and prints
'tests: N passed, N failed, N skipped'.

Only the named targets count: bazel-testlogs keeps the XML of targets since deleted or renamed, and a cached
result does not rewrite its XML, so neither a walk of the whole tree nor a time filter gives the suite's count."""

import argparse
import pathlib
import xml.etree.ElementTree as ET


def target_dir(logs: pathlib.Path, label: str) -> pathlib.Path:
    """bazel-testlogs/<package>/<name> for a label such as //bnb/tests:config_test."""
    if not label.startswith("//") or ":" not in label:
        raise SystemExit(f"test_summary: expected a label such as //pkg:name, got {label!r}")
    package, name = label[2:].split(":", 1)
    return logs / package / name


def count(logs: pathlib.Path, labels: list[str]) -> tuple[int, int, int, list[str]]:
    """(passed, failed, skipped, labels with no XML) over the XML files of `labels` (every shard's)."""
    passed = failed = skipped = 0
    no_xml = []
    for label in labels:
        files = sorted(target_dir(logs, label).rglob("test.xml"))
        if not files:
            no_xml.append(label)
        for xml in files:
            for case in ET.parse(xml).getroot().iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.find("skipped") is not None or case.get("status") == "notrun":
                    skipped += 1
                else:
                    passed += 1
    return passed, failed, skipped, no_xml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("logs", help="the bazel-testlogs directory")
    parser.add_argument("labels", nargs="+", help="the test targets to count (bazel query 'tests(//...)')")
    args = parser.parse_args()
    passed, failed, skipped, no_xml = count(pathlib.Path(args.logs).resolve(), args.labels)
    line = f"tests: {passed} passed, {failed} failed, {skipped} skipped"
    if no_xml:  # a target that did not run (a build failure, an interrupted run): say so rather than count 0
        line += f"; {len(no_xml)} targets without results: {' '.join(no_xml)}"
    print(line)


if __name__ == "__main__":
    main()
