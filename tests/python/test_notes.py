"""The named notes of the sources (a line of a comment or docstring that starts `Note [name]:`,
the explanations other comments point at with `(Note [name])`), C++ and Python alike: each is
defined exactly once, and every reference, in the sources, the tests or the docs, names a note
that is defined."""

import collections
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("src", "launcher", "include", "python", "docs", "tests/cpp")
NOTE = re.compile(r"Note \[([^\]]+)\]")
DEFINITION = re.compile(r"^\s*(?://|#)?\s*Note \[([^\]]+)\]:")
DEFINED_IN = ("src", "launcher", "include", "python")


def notes():
    definitions, references = collections.defaultdict(list), collections.defaultdict(list)
    for top in FOLDERS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith((".h", ".cc", ".py", ".md")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        where = f"{os.path.relpath(path, ROOT)}:{number}"
                        defined = DEFINITION.match(line) if top in DEFINED_IN else None
                        if defined:
                            definitions[defined.group(1)].append(where)
                        for note in NOTE.findall(line[defined.end():] if defined else line):
                            references[note].append(where)
    return definitions, references


def test_each_note_is_defined_once():
    definitions, _ = notes()
    twice = {note: places for note, places in definitions.items() if len(places) > 1}
    assert not twice, f"notes defined more than once (make the others references): {twice}"
    assert len(definitions) > 10, definitions  # the reader finds them


def test_every_referenced_note_is_defined():
    definitions, references = notes()
    undefined = {note: places[:3] for note, places in references.items() if note not in definitions}
    assert not undefined, f"references to notes defined nowhere: {undefined}"
