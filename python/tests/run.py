"""Runs pytest over python/tests for CTest (python.pytest): fails when pytest
fails, when it collects nothing (its exit code 5) and when no test passed
(every one skipped), so that a run that tested nothing never passes."""

import sys

import pytest


class _Passed:
    count = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.count += 1


def main() -> int:
    passed = _Passed()
    rc = int(pytest.main(sys.argv[1:], plugins=[passed]))
    if rc == 0 and passed.count == 0:
        print("python.pytest: no test passed (all skipped or none collected): failing")
        return 1
    print(f"python.pytest: {passed.count} tests passed")
    return rc


if __name__ == "__main__":
    sys.exit(main())
