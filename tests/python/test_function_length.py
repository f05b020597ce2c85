"""No function in src/ or launcher/ is over 60 lines unless a comment at its top says why
(docs/architecture.md, "Folders"): a comment line starting `Long:` right above the function or on
the first line of its body. Run as a script to list every function over the limit.

The scan is a brace matcher over the source with comments, strings, character literals and
preprocessor lines blanked out: a `{` whose preceding text (back to the last `;`, `{` or `}`) opens a namespace, class,
struct, union, enum or extern block is walked through; one whose text holds a parenthesis, outside
any function, opens a function; every other brace is nested in what encloses it."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 60
FOLDERS = ("src", "launcher")
CONTAINER = re.compile(r'^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern\s+"C")\b', re.DOTALL)
WHY = re.compile(r"^\s*//\s*Long:")


def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delimiter = text[i + 2:text.find("(", i)]
            j = text.find(")" + delimiter + '"', i)
            j = n if j < 0 else j + len(delimiter) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 is a number
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank_preprocessor(code):
    """The code with preprocessor lines (and their continuations) blanked."""
    lines, continued = code.split("\n"), False
    for k, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[k] = " " * len(line)
    return "\n".join(lines)


QUALIFIERS = {"const", "override", "final", "noexcept", "mutable", "try"}


def brace_initializer(header):
    """Whether a `{` after `header` initializes a member in a constructor's initializer list
    (`: a_(x), b_{y}`): after the last parenthesis comes a name that is no qualifier."""
    if ")" not in header:
        return False
    tail = header[header.rfind(")") + 1:]
    words = re.findall(r"\w+", tail)
    return bool(words) and "->" not in tail and words[-1] not in QUALIFIERS and bool(re.search(r"\w\s*$", tail))


def functions(text):
    """(first line, last line, signature) of every function defined in `text` (C++)."""
    code = blank_preprocessor(blank_comments_and_strings(text))
    stack = []  # per open brace: "container", ("function", first line, signature) or "nested"
    header_start = 0
    found = []
    for i, c in enumerate(code):
        if c == ";":
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            in_function = any(kind not in ("container", "init") for kind in stack)
            if in_function:
                stack.append("nested")
            elif brace_initializer(header):
                stack.append("init")  # part of the header that follows: keep reading it
                continue
            elif CONTAINER.match(header):
                stack.append("container")
            elif "(" in header and not header.rstrip().endswith("="):
                skipped = len(header) - len(header.lstrip())
                first_line = code.count("\n", 0, header_start + skipped) + 1
                stack.append(("function", first_line, " ".join(header.split())))
            else:
                stack.append("nested")
            header_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "container"
            if kind == "init":
                continue
            if isinstance(kind, tuple):
                found.append((kind[1], code.count("\n", 0, i) + 1, kind[2]))
            header_start = i + 1
    return found


def says_why(lines, first, last):
    """Whether a `// Long:` comment sits in the comment block above line `first` or on the
    function's first body lines (up to the first line of code after the opening brace)."""
    above = first - 2
    while above >= 0 and lines[above].lstrip().startswith("//"):
        if WHY.match(lines[above]):
            return True
        above -= 1
    for line in lines[first - 1:min(last, first + 5)]:
        if WHY.match(line):
            return True
    return False


def long_functions():
    """(path, first line, length, signature, says why) of every function over LIMIT lines."""
    out = []
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                lines = text.splitlines()
                for first, last, signature in functions(text):
                    if last - first + 1 > LIMIT:
                        out.append((os.path.relpath(path, ROOT), first, last - first + 1, signature,
                                    says_why(lines, first, last)))
    return sorted(out)


def test_no_function_is_over_the_limit_without_saying_why():
    unexplained = [f"{path}:{first}: {length} lines: {signature[:100]}"
                   for path, first, length, signature, why in long_functions() if not why]
    assert not unexplained, (f"functions over {LIMIT} lines without a `// Long:` comment at their top "
                             "saying why (split them, or say why not):\n" + "\n".join(unexplained))


def test_the_scan_finds_functions_and_measures_them():
    """A scan that found nothing, or miscounted, would pass everything."""
    sample = '''namespace a {
struct S {
  int f() const { return 1; }
};
// a comment with { braces }
int g(int x) {
  const char* s = "}";
  auto h = [&] { return x; };
  if (x) {
    return h();
  }
  return 0;
}
constexpr int kTable[] = {1, 2};
}  // namespace a
'''
    assert [(first, last) for first, last, _ in functions(sample)] == [(3, 3), (6, 13)]
    long_one = "Foo::Foo(int x)\n    : a_(x), b_{x} {\n" + "  a_ += 1;\n" * 70 + "}\n"
    assert [(first, last) for first, last, _ in functions(long_one) if last - first > 1] == [(1, 73)]
    assert len(functions(open(os.path.join(ROOT, "launcher", "flags.cc"), encoding="utf-8").read())) > 5
    lines = ["// Long: one table.", "void f() {", "}"]
    assert says_why(lines, 2, 3) and not says_why(["// short", "void f() {", "}"], 2, 3)


if __name__ == "__main__":
    for path, first, length, signature, why in long_functions():
        print(f"{'ok ' if why else 'NO '} {length:4d}  {path}:{first}  {signature[:90]}")
    sys.exit(0)
