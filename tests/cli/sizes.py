#!/usr/bin/env python3
"""The size limits the tree keeps (issue 27, docs/architecture.md): nrm/main.c
is dispatch only, no function under nrm/ grows past what one reading holds,
and the kubelet plugin stays one file of reasonable length.

A function is measured as ctags does: from the line of its name to the line
of its closing brace. Comments, strings and preprocessor lines are blanked
first, so that a brace in them counts for nothing.

Run by make check; also by hand: tests/cli/sizes.py [SRCDIR]."""
import os
import re
import sys

FILE_LINES = {"nrm/main.c": 400, "driver/kubelet/plugin.c": 1100}
FUNCTION_LINES = 150
FUNCTION_TREE = "nrm"

NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def blank(text):
    """text with comments, string and character literals and preprocessor
    lines replaced by spaces; newlines are kept, so line numbers hold."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A directive, with its continuation lines.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function defined in text."""
    code = blank(text)
    found, depth, head_start = [], 0, 0
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                head = code[head_start:i]
                names = [m for m in NAME.finditer(head) if m.group(1) != "__attribute__"]
                # An initializer ("= {") or a struct, union or enum body is no function.
                if names and "=" not in head[: names[0].start()] and head.rstrip().endswith(")"):
                    m = names[0]
                    found.append([m.group(1), code.count("\n", 0, head_start + m.start()) + 1, None])
                else:
                    found.append(None)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                f = found.pop()
                if f is not None:
                    f[2] = code.count("\n", 0, i) + 1
                    found.append(tuple(f))
                head_start = i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1
    return [f for f in found if f is not None]


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("NRM_SRCDIR", ".")
    bad = []
    for path, limit in sorted(FILE_LINES.items()):
        with open(os.path.join(srcdir, path), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().count("\n")
        verdict = "met" if lines <= limit else "NOT MET"
        print(f"{path}: {lines} lines, goal <= {limit}: {verdict}")
        if lines > limit:
            bad.append(f"{path} has {lines} lines, more than {limit}")
    measured = []
    for root, dirs, files in os.walk(os.path.join(srcdir, FUNCTION_TREE)):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(".c") or ".pb-c." in f:
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for name, first, last in functions(fh.read()):
                    measured.append((last - first + 1, os.path.relpath(path, srcdir), first, name))
    if not measured:
        print(f"no function found under {FUNCTION_TREE}/ of {srcdir}")
        return 1
    measured.sort(key=lambda m: (-m[0], m[1], m[2]))
    longest = measured[0]
    verdict = "met" if longest[0] <= FUNCTION_LINES else "NOT MET"
    print(f"{len(measured)} functions under {FUNCTION_TREE}/, longest {longest[0]} lines "
          f"({longest[3]}, {longest[1]}:{longest[2]}), goal <= {FUNCTION_LINES}: {verdict}")
    for lines, path, first, name in measured:
        if lines > FUNCTION_LINES:
            bad.append(f"{path}:{first}: {name} has {lines} lines, more than {FUNCTION_LINES}")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print("PASS: every size limit is met")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
