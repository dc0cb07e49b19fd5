#!/usr/bin/env python3
"""A small Singer tap in Python for tests: stream "words", bookmark "position"; config {"words": [...]}."""
import json
import sys

args = sys.argv[1:]


def arg(name):
    return args[args.index(name) + 1] if name in args else None


with open(arg("--config")) as f:
    config = json.load(f)
state = {}
if arg("--state"):
    with open(arg("--state")) as f:
        state = json.load(f)
position = state.get("bookmarks", {}).get("words", {}).get("position", 0)


def out(message):
    sys.stdout.write(json.dumps(message) + "\n")


out({"type": "SCHEMA", "stream": "words", "key_properties": ["position"],
     "schema": {"type": "object", "properties": {"position": {"type": "integer"}, "word": {"type": "string"},
                                                  "length": {"type": ["integer", "null"]}}}})
words = config["words"]
for i in range(position, len(words)):
    out({"type": "RECORD", "stream": "words", "record": {"position": i + 1, "word": words[i], "length": len(words[i])}})
    if (i + 1) % 2 == 0:
        out({"type": "STATE", "value": {"bookmarks": {"words": {"position": i + 1}}}})
out({"type": "STATE", "value": {"bookmarks": {"words": {"position": len(words)}}}})
