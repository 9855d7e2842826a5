#!/usr/bin/env python3
"""Validates driftgate's JSON files against the schemas in harness/schemas/.

    scripts/validate_json.py verdict FILE...   (gate's verdict.json)
    scripts/validate_json.py verify FILE...    (verify --json)
    scripts/validate_json.py bench FILE...     (bench --json)

Exit 0 when every file is valid, 1 when one is not (each error printed with its JSON path), 2 on
bad usage or a file that is not JSON. Needs python3-jsonschema (scripts/setup.sh installs it).
"""
import json
import pathlib
import sys

import jsonschema

SCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "harness" / "schemas"


def main(argv):
    if len(argv) < 3 or argv[1] not in ("verdict", "verify", "bench"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    store = {}
    for path in SCHEMAS.glob("*.schema.json"):
        schema = json.loads(path.read_text())
        store[schema["$id"]] = schema
    schema = json.loads((SCHEMAS / f"{argv[1]}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    resolver = jsonschema.RefResolver.from_schema(schema, store=store)
    validator = jsonschema.Draft202012Validator(schema, resolver=resolver)
    bad = 0
    for name in argv[2:]:
        try:
            instance = json.loads(pathlib.Path(name).read_text())
        except (OSError, ValueError) as e:
            print(f"{name}: not a readable JSON file: {e}", file=sys.stderr)
            return 2
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        for e in errors:
            where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
            print(f"{name}: {where}: {e.message}", file=sys.stderr)
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
