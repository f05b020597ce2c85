"""The C++ layering of docs/architecture.md, checked: every `#include "folder/..."` in src/,
launcher/ and include/hora goes along an arrow the ```include-layers block of that document
allows (so a wrong arrow fails CI), and every folder of src/ has a line there."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/', re.MULTILINE)


def allowed_layers():
    """{folder: set of folders it may include from}, from docs/architecture.md."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        block = re.search(r"```include-layers\n(.*?)```", f.read(), re.DOTALL)
    assert block, "docs/architecture.md has no ```include-layers block"
    rules = {}
    for line in block.group(1).splitlines():
        folder, _, targets = line.partition(":")
        rules[folder.strip()] = set(targets.split())
    return rules


def source_folders():
    """{layer name: directory} for src/<layer>, launcher/ and include/hora."""
    folders = {name: os.path.join(ROOT, "src", name) for name in sorted(os.listdir(os.path.join(ROOT, "src")))
               if os.path.isdir(os.path.join(ROOT, "src", name))}
    folders["launcher"] = os.path.join(ROOT, "launcher")
    folders["include"] = os.path.join(ROOT, "include", "hora")
    return folders


def arrows():
    """(from layer, to layer, file) of every include of another folder's header."""
    found = []
    for layer, directory in source_folders().items():
        for folder, _, files in os.walk(directory):
            for name in files:
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for target in INCLUDE.findall(f.read()):
                        target = "include" if target == "hora" else target
                        if target != layer:
                            found.append((layer, target, os.path.relpath(path, ROOT)))
    return found


def test_every_source_folder_has_a_rule():
    rules = allowed_layers()
    missing = [layer for layer in source_folders() if layer not in rules]
    assert not missing, f"no line for {missing} in docs/architecture.md's include-layers block"


def test_every_include_goes_along_an_allowed_arrow():
    rules = allowed_layers()
    wrong = [f"{path}: {layer} -> {target}" for layer, target, path in arrows() if target not in rules.get(layer, set())]
    assert not wrong, "includes against docs/architecture.md's layers:\n" + "\n".join(wrong)


def test_the_check_sees_the_arrows_it_should():
    """The reader finds the known arrows (a regex that matched nothing would pass everything)."""
    seen = {(layer, target) for layer, target, _ in arrows()}
    assert ("collectives", "transport") in seen and ("bootstrap", "transport") in seen, seen
