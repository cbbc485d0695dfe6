"""Run unittest test modules and write each test's outcome as JSON.

    pyunit.py OUT.jsonl [--exclude SUBSTRING]... MODULE_OR_TEST_ID...

Used by the differential conformance runner (suites.py) for test suites
built on unittest: CPython's own (test.test_asyncio, test.test_socketserver,
...) and Tornado's.  The outcome of every test, keyed by its id, is one of
ok, fail, error, skip, xfail, xpass, written as one JSON line per test as
soon as it ends (a run that dies keeps what it had).  Tests whose id
contains an --exclude substring are not run (tests that cannot work on this
machine and hang, in both runs alike).  Output of the tests goes to stderr
as usual; the exit status is 0 whatever the tests did (the runner compares
outcomes, it does not judge them).
"""
import json
import signal
import sys
import unittest

# A test that hangs (one waiting for a network this machine does not have)
# becomes an error instead of stopping the whole run.
TEST_TIMEOUT = 60


class TestTimeout(Exception):
    pass


def _alarm(sig, frame):
    raise TestTimeout("test took longer than %d s" % TEST_TIMEOUT)


class Recorder(unittest.TextTestResult):
    sink = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.outcomes = {}

    def startTest(self, test):
        signal.alarm(TEST_TIMEOUT)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)
        tid = test.id() if hasattr(test, "id") else str(test)
        if tid in self.outcomes and self.sink:
            self.sink.write(json.dumps([tid, self.outcomes[tid]]) + "\n")
            self.sink.flush()

    def _set(self, test, what):
        # A failure in tearDown after a success overrides the success.
        tid = test.id() if hasattr(test, "id") else str(test)
        if what == "ok" and tid in self.outcomes:
            return
        self.outcomes[tid] = what

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.outcomes[test.id()] = "fail"


def _filtered(suite, exclude):
    out = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            out.addTest(_filtered(t, exclude))
        elif not any(x in t.id() for x in exclude):
            out.addTest(t)
    return out


def main():
    args, exclude, names = sys.argv[2:], [], []
    while args:
        a = args.pop(0)
        if a == "--exclude":
            exclude.append(args.pop(0))
        else:
            names.append(a)
    signal.signal(signal.SIGALRM, _alarm)
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for name in names:
        try:
            suite.addTests(loader.loadTestsFromName(name))
        except Exception as e:  # a module that cannot load is an outcome too
            print("cannot load %s: %r" % (name, e), file=sys.stderr)
            suite.addTest(unittest.FunctionTestCase(lambda e=e: (_ for _ in ()).throw(e),
                                                    description=name))
    with open(sys.argv[1], "w") as sink:
        Recorder.sink = sink
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Recorder)
        runner.run(_filtered(suite, exclude))


if __name__ == "__main__":
    main()
