#!/usr/bin/env python3
"""Validates a JSON document against a JSON Schema (draft 2020-12) with
Debian's python3-jsonschema: validate_json_schema.py SCHEMA DOCUMENT.
Exit 0 when valid; 1 with every error on stderr; 2 when jsonschema is
missing (install it with `make deps`)."""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed (make deps)", file=sys.stderr)
    sys.exit(2)

with open(sys.argv[1], encoding="utf-8") as f:
    schema = json.load(f)
with open(sys.argv[2], encoding="utf-8") as f:
    doc = json.load(f)
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
errors = sorted(cls(schema).iter_errors(doc), key=lambda e: list(e.path))
for e in errors:
    print("%s: %s" % ("/".join(str(p) for p in e.path) or "(root)", e.message), file=sys.stderr)
sys.exit(1 if errors else 0)
