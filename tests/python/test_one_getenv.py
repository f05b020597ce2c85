"""The knob registry is the only code that reads the process environment (src/common/knobs.h):
no getenv in src/, launcher/ or include/ outside src/common/knobs.cc."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GETENV = re.compile(r"\b(secure_)?getenv\s*\(")


def getenv_calls():
    found = []
    for folder in ("src", "launcher", "include"):
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(directory, name)
                if not name.endswith((".h", ".cc")) or os.path.relpath(path, ROOT) == "src/common/knobs.cc":
                    continue
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        code = line.split("//")[0]
                        if GETENV.search(code):
                            found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    return found


def test_only_the_registry_reads_the_environment():
    calls = getenv_calls()
    assert not calls, "getenv outside src/common/knobs.cc (read a knob through common::Env, or " \
                      "a variable horarun passes on through common::processVariable):\n" + "\n".join(calls)


def test_the_pattern_sees_a_call():
    assert GETENV.search('if (const char* v = std::getenv("X"))') and not GETENV.search("mygetenvish")
