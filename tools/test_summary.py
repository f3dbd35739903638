"""Adds up the JUnit XML files Bazel left under bazel-testlogs and prints 'tests: N passed, N failed, N skipped'."""

import pathlib
import sys
import xml.etree.ElementTree as ET


def main(logs: str) -> None:
    passed = failed = skipped = 0
    for xml in pathlib.Path(logs).resolve().rglob("test.xml"):
        for case in ET.parse(xml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs")
