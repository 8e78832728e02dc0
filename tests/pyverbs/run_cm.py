"""Runs rdma-core's pyverbs RDMA-CM tests (Debian's python3-pyverbs ships them
in /usr/share/doc/rdma-core/tests; tests/pyverbs/prepare.sh copies them next
to this file) against whichever librdmacm the loader finds.

Upstream's harness finds the device's IP address through
/sys/class/infiniband/<dev>/device/net/, which a soft device (rxe on a dummy
netdev, softverbs) does not have: the address is taken from the netdev named
in $PYVERBS_NETDEV instead. Nothing else of the tests is changed."""
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from args_parser import parser  # noqa: E402  (the tests' own module)

tests = SourceFileLoader('tests', os.path.join(here, '__init__.py')).load_module()
base = sys.modules['tests.base']
netdev = os.environ['PYVERBS_NETDEV']


def _get_ip_mac(self, dev, port, idx):
    ip, mac = self.get_ip_mac_address(netdev)
    self.args.append([dev, port, idx, ip, mac])


class Result(unittest.TextTestResult):
    """Also prints one "RESULT <outcome> <test id> [reason]" line per test, on a
    line of its own: the test's subprocesses write to the same stream."""

    def _mark(self, outcome, test, why=''):
        sys.stdout.write(f'\nRESULT {outcome} {test.id()} {why}\n')
        sys.stdout.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._mark('ok', test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._mark('FAIL', test)

    def addError(self, test, err):
        super().addError(test, err)
        self._mark('ERROR', test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._mark('skipped', test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._mark('FAIL', test, '(expected failure)')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._mark('FAIL', test, '(unexpected success)')


base.RDMATestCase._get_ip_mac = _get_ip_mac
parser.parse_args()
unittest.main(module=tests, testRunner=unittest.TextTestRunner(resultclass=Result, verbosity=2))
