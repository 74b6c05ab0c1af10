"""Reads a JUnit XML file with junitparser (Debian's python3-junitparser), an independent JUnit reader, and prints
what it understood as one JSON object, for tests/gate_cli_test.cpp to check:
  {"tests": N, "failures": N, "errors": N, "skipped": N,
   "cases": [{"classname", "name", "time", "result": passed|failure|error|skipped, "message", "text",
              "properties": {name: value}}]}
Exit 2 when junitparser cannot read the file."""
import json
import sys

from junitparser import Error, Failure, JUnitXml, Properties, Property, Skipped


def case_json(case):
    result, message, text = "passed", "", ""
    for r in case.result:
        if isinstance(r, Failure):
            result = "failure"
        elif isinstance(r, Error):
            result = "error"
        elif isinstance(r, Skipped):
            result = "skipped"
        message, text = r.message or "", r.text or ""
    props = {}
    holder = case.child(Properties)
    if holder is not None:
        for p in holder.iterchildren(Property):
            props[p.name] = p.value
    return {"classname": case.classname, "name": case.name, "time": case.time, "result": result,
            "message": message, "text": text, "properties": props}


def main(path):
    try:
        xml = JUnitXml.fromfile(path)
    except Exception as e:  # any parse failure is the finding
        print(f"junitparser cannot read {path}: {e}", file=sys.stderr)
        return 2
    suites = [xml] if xml._tag == "testsuite" else list(xml)
    cases = [case_json(c) for s in suites for c in s]
    totals = {"tests": sum(s.tests for s in suites), "failures": sum(s.failures for s in suites),
              "errors": sum(s.errors for s in suites), "skipped": sum(s.skipped for s in suites)}
    print(json.dumps(dict(totals, cases=cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
