#!/usr/bin/env bash
# Checks the thread-safety annotations (src/common/thread_annotations.h: HORA_GUARDED_BY,
# HORA_REQUIRES, ...) with clang's -Wthread-safety: a syntax-only compile of every source that
# uses them (directly or through its header), each warning an error. Seconds, not minutes: no
# code is generated. Exits non-zero naming the file and the unguarded access.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v clang++ >/dev/null || { echo "check_thread_safety: clang++ is not installed (setup.sh installs clang)"; exit 1; }

# The sources that include thread_annotations.h, or a header of their own folder that does.
headers=$(grep -rl --include='*.h' 'common/thread_annotations.h' src | sed 's|^src/||')
files=$(grep -rl --include='*.cc' -e 'common/thread_annotations.h' $(for h in $headers; do echo "-e $h"; done) src | sort)
[ -n "$files" ] || { echo "check_thread_safety: no annotated source found"; exit 1; }
status=0
for f in $files; do
  clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option \
    -Isrc -Iinclude "$f" || status=1
done
echo "check_thread_safety: $(echo "$files" | wc -l) files checked"
exit $status
