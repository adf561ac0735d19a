#!/usr/bin/python3
"""TEST DRIVER: run many invocations of the scripts here in one Python process.

Starting Python with torch takes seconds on a loaded machine; the e2e test runs about a hundred
invocations. Each stdin line is one case, fields separated by tabs:
    RC  PATTERN  SCRIPT  ARG...
the script's main(argv) must return RC (SystemExit counts) and print PATTERN ('-': anything)
on stdout or stderr. Cases run in order; every failing one is reported with its output, and
the exit status is 1 if any failed.
"""

import contextlib
import importlib
import io
import sys


def run(script, args):
    module = importlib.import_module(script[:-3] if script.endswith(".py") else script)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = module.main([script] + args)
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                rc = 1
            else:
                rc = e.code or 0
    return rc, out.getvalue()


def main():
    failed = n = 0
    for n, line in enumerate(sys.stdin, 1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) < 3:
            continue
        want_rc, pattern, script, args = int(fields[0]), fields[1], fields[2], fields[3:]
        rc, output = run(script, args)
        if rc != want_rc or (pattern != "-" and pattern not in output):
            failed += 1
            print(f"FAIL case {n}: {script} {' '.join(args)}\n  exit {rc}, expected {want_rc}; "
                  f"expected output: {pattern}\n  output:\n{output}", file=sys.stderr)
    print(f"run_cases: {n} cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
