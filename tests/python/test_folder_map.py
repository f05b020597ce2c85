"""docs/architecture.md's folder map against the tracked files: every folder of src/, launcher/ and
include/ is named there (as a line of its own, or as `name/:` in its parent's line), and every
path the map names exists."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKED = ("src/", "launcher/", "include/")


def folder_map():
    """The map's code block: the one that follows the line starting 'Folders (one job each'."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"^Folders \(one job each.*?\n```\n(.*?)```", text, re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has no folder map ('Folders (one job each ...' and a code block)"
    return block.group(1)


def named_folders(block):
    """Every folder the map names: the path opening each entry, and `name/:` inside an entry."""
    named, entry = set(), None
    for line in block.splitlines():
        if line and not line[0].isspace():
            entry = line.split()[0].rstrip("/")
            named.add(entry)
        if entry:
            named.update(f"{entry}/{sub}" for sub in re.findall(r"\b(\w+)/:", line))
    return named


def tracked_folders():
    """Every folder holding a tracked file, and every folder above it."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    folders = set()
    for path in files:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folders.add("/".join(parts[:depth]))
    return folders


def test_every_folder_is_named():
    named = named_folders(folder_map())
    missing = sorted(f for f in tracked_folders() if f.startswith(CHECKED) and f not in named)
    assert not missing, "folders docs/architecture.md's folder map does not name: " + ", ".join(missing)


def test_every_named_folder_exists():
    tracked = tracked_folders()
    gone = sorted(f for f in named_folders(folder_map()) if f not in tracked)
    assert not gone, "docs/architecture.md's folder map names folders that do not exist: " + ", ".join(gone)


def test_the_map_is_read():
    """A reader that found nothing would pass everything."""
    named = named_folders(folder_map())
    assert {"src/common", "src/transport/tcp", "launcher", "include/hora"} <= named, named
    assert named_folders("src/x/             a\n                   y/: b\nlauncher/  c\n") == {"src/x", "src/x/y",
                                                                                           "launcher"}
